"""How the worker reads a Redis error: an outage to wait out, or a refusal."""

from __future__ import annotations

import time
from typing import Any

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


#: While Redis is unreachable, one PING this often says when it answers again: what
#: waits for it (an outcome's write, the next claim) goes on then, whatever its backoff
#: had grown to.
PROBE_INTERVAL = 0.25


def wait_reachable(connection: Any, up_to: float) -> bool:
    """Wait up to ``up_to`` seconds for Redis, one PING every :data:`PROBE_INTERVAL`
    (the first after one interval: a failure just seen is not retried at once). True as
    soon as it answers (a refusal answers too), False when ``up_to`` passed first."""
    deadline = time.monotonic() + up_to
    while True:
        left = deadline - time.monotonic()
        time.sleep(max(0.0, min(PROBE_INTERVAL, left)))
        try:
            connection.ping()
            return True
        except UNREACHABLE:
            if left <= PROBE_INTERVAL:
                return False
        except redis.RedisError:
            return True
