"""How the worker reads a Redis error: an outage to wait out, or a refusal."""

from __future__ import annotations

import redis

#: What an unreachable (down, restarting, stopped) Redis raises: back off, retry.
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)

#: A refusal that is not an outage: OOM under maxmemory, WRONGTYPE on a key
#: somebody overwrote. The scripts check before their first write, so a refused script
#: changed nothing. A refused claim backs that queue off (the others are still served);
#: a refused outcome under OOM is retried like an outage; other refusals are logged.
REFUSED = redis.ResponseError


def is_oom(exc: Exception) -> bool:
    """Redis is out of memory (redis-py strips the ``OOM`` prefix into the class)."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or str(exc).startswith("OOM")


def is_refusal(reply: object) -> bool:
    """A pipeline reply that is a refusal (not a script missing after a Redis restart)."""
    return isinstance(reply, REFUSED) and not isinstance(reply, redis.exceptions.NoScriptError)
