"""What the clients of :mod:`.redis_client` send commands and check connections out
with: redis-py's serializer and pool, each with a step it takes on every command done
in one (callgrind counts: docs/benchmarks.md; CHANGELOG)."""

from __future__ import annotations

from typing import Any

import hiredis
import redis
from redis.connection import HiredisRespSerializer

__all__ = ["PACKER", "LeanPool"]


class Packer(HiredisRespSerializer):
    """redis-py's hiredis serializer, without its pass over the arguments that copies
    any ``bytearray`` or ``memoryview`` to ``bytes`` (a generator step per argument:
    a script call of 35 arguments packed in about 7 µs instead of 16). ``hiredis`` refuses
    what it cannot write (``TypeError``): that command goes the usual way, which copies
    those, or raises redis-py's own error. The same bytes either way."""

    def pack(self, *args: Any) -> Any:
        first = args[0]
        space = " " if isinstance(first, str) else b" "
        if space in first:
            return super().pack(*args)       # a command of two words: split there
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return super().pack(*args)


#: one serializer for every connection of the clients made here (it keeps no state)
PACKER = Packer()


def _telemetry_off() -> bool:
    """redis-py's own metrics (its OpenTelemetry observability) are not turned on."""
    try:
        from redis.observability import recorder
        return recorder._get_or_create_collector() is None
    except (ImportError, AttributeError):   # a redis-py without them
        return True


#: what the short checkout and return touch of redis-py's pool and connections
_POOL_PARTS = ("_checkpid", "_lock", "_available_connections", "_in_use_connections",
               "make_connection", "owns_connection", "_created_connections")
_CONNECTION_PARTS = ("connect", "can_read", "disconnect", "should_reconnect")
#: the redis-py whose pool this one's short steps were read from (5 to 8); a later one
#: may have changed what those parts mean, so its pool is used as it is
_KNOWN_POOL = redis.__version__.split(".")[0] in ("5", "6", "7", "8")


class LeanPool(redis.ConnectionPool):
    """redis-py's pool, with a connection's checkout and return in one step each.

    redis-py 8's pool records four metric counter changes and dispatches an event per
    command, whether its metrics are on or not: about a tenth of a producer's
    instructions per enqueue (326k instead of 362k, counted under callgrind). The
    checks stay: the process's pid (a pool used after a fork makes new connections),
    a connection not connected or holding unread data (reconnected), one asking to
    reconnect. Taken only where nothing listens to what is left out, decided when
    the pool is made (:attr:`lean`): redis-py's metrics off, no credential provider
    (re-authentication listens to the return event), RESP2 (no client-side cache, no
    maintenance notifications), a redis-py of the versions it was read from (5 to 8)
    and every part it touches there; else redis-py's way. Unlike redis-py 8.1's own
    pool, it never hands out a connection that holds an unread reply (8.1 reads its
    "auto" maintenance notifications as on, and skips that check)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        made = self.connection_kwargs
        self.lean = (_KNOWN_POOL and _telemetry_off() and made.get("credential_provider") is None
                     and made.get("protocol") in (None, 2, "2")
                     and getattr(self, "cache", None) is None
                     and all(hasattr(self, part) for part in _POOL_PARTS)
                     and all(hasattr(self.connection_class, part)
                             for part in _CONNECTION_PARTS))

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if not self.lean:
            return super().get_connection(*args, **kwargs)
        self._checkpid()
        with self._lock:
            try:
                connection = self._available_connections.pop()
            except IndexError:
                connection = self.make_connection()
            self._in_use_connections.add(connection)
        try:
            connection.connect()
            try:
                if connection.can_read():
                    raise redis.ConnectionError("Connection has data")
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                connection.disconnect()
                connection.connect()
                if connection.can_read():
                    raise redis.ConnectionError("Connection not ready") from None
        except BaseException:
            self.release(connection)
            raise
        return connection

    def release(self, connection: Any) -> None:
        if not self.lean:
            super().release(connection)
            return
        self._checkpid()
        with self._lock:
            try:
                self._in_use_connections.remove(connection)
            except KeyError:
                return           # not one of this pool's
            if self.owns_connection(connection):
                if connection.should_reconnect():
                    connection.disconnect()
                self._available_connections.append(connection)
                return
            connection.disconnect()      # another process's (made before a fork)
            if connection.pid == self.pid:
                self._created_connections -= 1
