"""The connection module users import (``fusionworker.connection`` is this module):
every public name of :mod:`.redis_client` (connecting to Redis from one URL; its
docstring lists the URLs), and :class:`FollowSentinelMaster`, the worker's hook that
follows a Sentinel failover.

The hook lives here, above the hook contract (``hooks.py``), which names the client
and lies above :mod:`.redis_client`: so the core's imports run one way
(``tests/test_layers.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from .hooks import Middleware
from .redis_client import DEFAULT_CONNECT_TIMEOUT as DEFAULT_CONNECT_TIMEOUT
from .redis_client import DEFAULT_SENTINEL_TIMEOUT as DEFAULT_SENTINEL_TIMEOUT
from .redis_client import DEFAULT_SOCKET_TIMEOUT as DEFAULT_SOCKET_TIMEOUT
from .redis_client import READ_ERRORS as READ_ERRORS
from .redis_client import RedisClient as RedisClient
from .redis_client import __all__ as _client_names
from .redis_client import connect as connect
from .redis_client import decoding as decoding
from .redis_client import eviction_warning as eviction_warning
from .redis_client import is_cluster as is_cluster
from .redis_client import log as log
from .redis_client import new_pubsub_connection as new_pubsub_connection
from .redis_client import refresh_master as refresh_master
from .redis_client import seconds as seconds
from .redis_client import server_time as server_time
from .redis_client import shared_client as shared_client
from .redis_client import text as text
from .redis_client import text_hash as text_hash
from .redis_client import texts as texts
from .redis_url import CLUSTER_SCHEMES as CLUSTER_SCHEMES
from .redis_url import PLAIN_SCHEMES as PLAIN_SCHEMES
from .redis_url import SENTINEL_SCHEMES as SENTINEL_SCHEMES
from .redis_url import SUPPORTED_SCHEMES as SUPPORTED_SCHEMES
from .redis_url import RedisURL as RedisURL
from .redis_url import mask_url as mask_url
from .redis_url import parse_url as parse_url

if TYPE_CHECKING:  # pragma: no cover
    from .hooks import WorkerContext

__all__ = ["FollowSentinelMaster", *_client_names]


class FollowSentinelMaster(Middleware):
    """Calls :func:`refresh_master` on the worker's connection every ``interval`` seconds.

    A no-op unless the connection is a Sentinel client. Never raises: with
    every sentinel unreachable it logs a warning (once per outage) and the
    worker carries on with the connections it has.
    """

    def __init__(self, interval: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._next = 0.0
        self._failing = False

    def on_tick(self, worker: WorkerContext) -> None:
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.interval
        client = getattr(worker, "connection", None)
        if client is None:
            return
        try:
            moved = refresh_master(client)
        except redis.RedisError as exc:
            if not self._failing:
                self._failing = True
                log.warning("Cannot ask the Redis sentinels for the master: %s", exc)
            return
        self._failing = False
        if moved:
            host, port = client.connection_pool.master_address
            log.info("Redis master moved to %s:%s (Sentinel failover); reconnecting", host, port)
