"""Connecting to Redis: one URL picks a plain server, a Sentinel setup or a Cluster.

Accepted URLs (every client is made with ``decode_responses=True`` and
``encoding_errors="backslashreplace"``: bytes that are not UTF-8, written into a
key by someone else, read as the text ``\\xff`` instead of raising
``UnicodeDecodeError`` in the middle of a reply; docs/design.md, "Decoding what
Redis holds"):

``redis://[[user]:password@]host[:6379][/db]``, ``rediss://…`` (TLS),
``unix://[[user]:password@]/path/to/redis.sock[?db=N]``
    Parsed as :meth:`redis.Redis.from_url` parses them (its pool's ``from_url``, here
    the pool of ``core/redis_wire.py``), so its query options (``socket_timeout``,
    ``ssl_cert_reqs``, …) work as documented there.

``redis+sentinel://[[user]:password@]host:26379[,host2:26379…]/<master>[/<db>]``
    A :class:`redis.sentinel.Sentinel` over the listed sentinels and
    ``master_for(<master>)``. The client asks the sentinels for the master's
    address whenever it (re)connects, so after a failover the *same* client
    object reaches the new master (a command in flight during the switch may
    raise :class:`redis.ConnectionError`; redis-py retries it a few times).

    **Passwords.** The password in the URL is the *master's* (``requirepass``
    of the data nodes; the user likewise). Sentinels are usually run without
    a password; when they have one, give it as the query option
    ``?sentinel_password=…`` (and ``sentinel_username=…``). The master's
    password is never sent to the sentinels. Default port: 26379.

``redis+cluster://[[user]:password@]host:7000[,host2:7001…][/0]``, ``rediss+cluster://…``
    A :class:`redis.cluster.RedisCluster` with the listed startup nodes (one
    reachable node is enough; the rest is discovered). A cluster has only
    database 0. Default port: 6379.

Every multi-key command and Lua script on a cluster must touch keys of one
hash slot; fusionworker's per-queue keys share the hash tag ``fw:{queue}:…``
for that reason (see :mod:`fusionworker.keys`).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel, SentinelConnectionPool

from .redis_url import (
    RedisURL,
    mask_url,
    parse_url,
)
from .redis_wire import PACKER, LeanPool

log = logging.getLogger("fusionworker.connection")   # the name before the layers (logging configs use it)

__all__ = [
    "RedisURL",
    "connect",
    "decoding",
    "eviction_warning",
    "shared_client",
    "is_cluster",
    "mask_url",
    "new_pubsub_connection",
    "parse_url",
    "refresh_master",
    "server_time",
]


#: Connect timeout (seconds) used unless the caller passes one: a worker
#: whose Redis is unreachable should say so instead of hanging in connect().
DEFAULT_CONNECT_TIMEOUT = 5.0
#: how our clients decode bytes that are not UTF-8: as the escape ``\\xff``, never an
#: error (a reply is read whole or the connection is lost; one bad byte in one record
#: must not fail a claim, a listing or a page)
READ_ERRORS = "backslashreplace"
#: A reply that takes longer means Redis is frozen (SIGSTOP, swap storm): the caller
#: gets a TimeoutError and backs off instead of hanging. ``?socket_timeout=`` overrides.
DEFAULT_SOCKET_TIMEOUT = 15.0
#: Socket timeout of the short queries made to sentinels.
DEFAULT_SENTINEL_TIMEOUT = 1.0

#: A redis-py client fusionworker works with: a plain or Sentinel ``redis.Redis`` (or
#: its pipeline), or a ``RedisCluster`` (or its pipeline).
RedisClient: TypeAlias = redis.Redis | RedisCluster


def connect(url: str, **kwargs: Any) -> redis.Redis | RedisCluster:
    """A client for ``url`` (see the module docstring for the forms).

    ``kwargs`` go to the client (``socket_timeout``, ``client_name``, …) and
    win over the URL's query options. ``decode_responses`` is always true.
    No command is sent: a wrong host shows on the first command, except for
    a cluster, whose startup nodes are contacted here to learn the slot map
    (:class:`redis.exceptions.RedisClusterException` if none answers).
    """
    if kwargs.get("decode_responses", True) is not True:
        raise ValueError("fusionworker clients always use decode_responses=True")
    kwargs["decode_responses"] = True
    kwargs.setdefault("encoding_errors", READ_ERRORS)
    kwargs.setdefault("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    parsed = parse_url(url)

    if parsed.kind == "redis":
        kwargs.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT)  # the URL's option wins
        kwargs.setdefault("command_packer", PACKER)
        single = kwargs.pop("single_connection_client", False)   # as Redis.from_url does
        client = redis.Redis(connection_pool=LeanPool.from_url(url, **kwargs),
                             single_connection_client=single)
        client.auto_close_connection_pool = True
        return client

    options = {**parsed.options, **kwargs}
    options.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
    if parsed.username is not None:
        options.setdefault("username", parsed.username)
    if parsed.password is not None:
        options.setdefault("password", parsed.password)

    if parsed.kind == "sentinel":
        sentinel_kwargs: dict[str, Any] = {
            "socket_timeout": options.pop("sentinel_socket_timeout", DEFAULT_SENTINEL_TIMEOUT),
            "socket_connect_timeout": options["socket_connect_timeout"],
            "decode_responses": True,
        }
        for name in ("password", "username"):
            value = options.pop(f"sentinel_{name}", None)
            if value is not None:
                sentinel_kwargs[name] = value
        sentinel = Sentinel(list(parsed.hosts), sentinel_kwargs=sentinel_kwargs)
        master: redis.Redis = sentinel.master_for(parsed.master_name, db=parsed.db, **options)
        return master

    if parsed.scheme == "rediss+cluster":
        options.setdefault("ssl", True)
    nodes = [ClusterNode(host, port) for host, port in parsed.hosts]
    return RedisCluster(startup_nodes=nodes, **options)


def is_cluster(client: RedisClient) -> bool:
    """True if ``client`` talks to a Redis Cluster (keys must share a slot per command)."""
    return isinstance(client, RedisCluster)


def refresh_master(client: RedisClient) -> bool:
    """Ask the sentinels where the master is now; True if it moved.

    A Sentinel client looks the master up only when it opens a connection.
    After a failover in which the old master stays up (a manual
    ``SENTINEL FAILOVER``, a network split), pooled connections keep writing
    to the old master until Sentinel demotes it, and those writes are lost
    then. Calling this from the heartbeat bounds that window: when the master
    moved, idle pooled connections are closed and reopen on the new master
    (connections in use are dropped when released). One round trip to a
    sentinel; a no-op returning False for other clients.
    """
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return False
    before = pool.master_address
    return pool.get_master_address() != before and before is not None


# -- replies of a client: text ------------------------------------------------------
# redis-py types a reply item as ``bytes | str``. fusionworker's own clients decode
# (``decode_responses=True``, :func:`decoding`); these helpers say "text" once, and decode
# what a client that does not (a user's, read before ``decoding``) returns.


def text(value: Any) -> str:
    """A reply item (a key, a member, a field value) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def texts(values: Iterable[Any]) -> list[str]:
    """A list reply (``ZRANGE``, ``SMEMBERS``, ``KEYS``...) as text."""
    return [text(v) for v in values]


def text_hash(data: Mapping[Any, Any]) -> dict[str, str]:
    """An ``HGETALL`` reply as text (empty when the hash does not exist)."""
    return {text(k): text(v) for k, v in data.items()}


def stored_count(value: Any) -> int:
    """A count Redis holds (a hash field, a key's value) as an int; 0 for what is no
    whole number a page can show (``x``, ``nan``, ``inf``, ``1e20``, 5,000 digits):
    one bad value read from Redis costs a figure, never the page around it."""
    number = stored_number(value)
    return int(number) if number is not None and abs(number) < 1e18 else 0


def stored_number(value: Any) -> float | None:
    """A number Redis holds as a finite float; None when it holds none (absent, empty,
    not a number, ``inf``, ``nan``, past a float's range)."""
    if value is None or value == "" or value == b"":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def seconds(reply: Any) -> float:
    """A ``TIME`` reply (seconds, microseconds) as epoch seconds."""
    sec, usec = reply
    return float(sec) + float(usec) / 1e6


def server_time(client: RedisClient) -> float:
    """The Redis server's clock (epoch seconds): the one clock of every lease, due time
    and age (not pipelined: a Cluster pipeline refuses ``TIME``)."""
    return seconds(client.time())


def execute_settled(pipe: Any, give_back: Callable[[], None],
                    settle: Callable[[list[Any]], None]) -> None:
    """Send what ``pipe`` holds, the answers not raised (``raise_on_error=False``): a
    failed round trip calls ``give_back()`` and raises; else ``settle(answers)``, then
    the first answer that is a refusal is raised."""
    try:
        answers = pipe.execute(raise_on_error=False)
    except Exception:
        give_back()
        raise
    settle(answers)
    refused = next((a for a in answers if isinstance(a, Exception)), None)
    if refused is not None:
        raise refused


def new_pubsub_connection(client: RedisClient, **kwargs: Any) -> Any:
    """A pub/sub object of its own connection, for either kind of client.

    On a plain or Sentinel client this is ``client.pubsub()`` (a dedicated
    connection from the pool, re-resolved through the sentinels after a
    failover). On a cluster it is a :class:`redis.cluster.ClusterPubSub`:
    classic ``PUBLISH`` is broadcast over the cluster bus to every node, so
    subscribing on whichever node redis-py picks receives every message.
    ``kwargs`` (``ignore_subscribe_messages=True`` …) go to ``pubsub()``.

    A pub/sub connection must not be shared across fork(): call this in the
    process that listens.
    """
    open_pubsub: Callable[..., Any] = client.pubsub   # RedisCluster.pubsub is not annotated
    return open_pubsub(**kwargs)



# -- clients users hand us -----------------------------------------------------------

#: connection kwargs redis-py adds to a pool for its own bookkeeping: never copied
_INTERNAL_KWARGS = frozenset({
    "maint_notifications_pool_handler", "himport_registry", "orig_host_address",
    "orig_socket_timeout", "orig_socket_connect_timeout", "connection_pool", "driver_info",
    "decode_responses",
})

_decoding: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _decodes(client: RedisClient) -> bool:
    try:
        return bool(client.get_encoder().decode_responses)
    except AttributeError:
        return True   # not a redis-py client (a fake): take it as it is


def _user_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The client's own options, for its twin; bytes that are not UTF-8 read as escapes."""
    found = {k: v for k, v in kwargs.items() if k not in _INTERNAL_KWARGS}
    if found.get("encoding_errors", "strict") == "strict":
        found["encoding_errors"] = READ_ERRORS
    return found


def _decoding_twin(client: RedisClient) -> RedisClient:
    if isinstance(client, RedisCluster):
        kwargs = _user_kwargs(client.nodes_manager.connection_kwargs)
        for name in ("host", "port"):
            kwargs.pop(name, None)
        nodes = [ClusterNode(n.host, n.port) for n in client.get_nodes()]
        return RedisCluster(startup_nodes=nodes, decode_responses=True, **kwargs)
    pool = client.connection_pool
    kwargs = _user_kwargs(pool.connection_kwargs)
    if isinstance(pool, SentinelConnectionPool):
        manager = pool.sentinel_manager
        make = manager.master_for if pool.is_master else manager.slave_for
        twin: redis.Redis = make(pool.service_name, redis_class=type(client),
                                 decode_responses=True, **kwargs)
        return twin
    kwargs.setdefault("command_packer", PACKER)
    pool_class = LeanPool if type(pool) is redis.ConnectionPool else type(pool)
    new_pool = pool_class(connection_class=pool.connection_class,
                          max_connections=pool.max_connections, decode_responses=True, **kwargs)
    return type(client)(connection_pool=new_pool)


def decoding(client: RedisClient) -> RedisClient:
    """``client`` itself if it decodes replies to ``str``, else a twin that does.

    Any redis-py client works with fusionworker: a plain ``redis.Redis()``
    (bytes replies, redis-py's default), a Sentinel ``master_for()`` client or
    a ``RedisCluster``. The twin has the same server, database, credentials,
    TLS and timeouts (and pool size), with ``decode_responses=True``; it is
    made once per client and lives as long as the client does (weakly cached).
    """
    if _decodes(client):
        return client
    with _lock:
        twin = _decoding.get(client)
        if twin is None:
            twin = _decoding[client] = _decoding_twin(client)
        return twin


_shared: dict[str, RedisClient] = {}


def shared_client(url: str) -> RedisClient:
    """One client (one connection pool) per URL for this process.

    ``Queue("sms")`` without a connection uses it, so a web app making a
    ``Queue`` per request reuses pooled sockets instead of opening one per
    call. redis-py pools reset themselves in a forked child.
    """
    client = _shared.get(url)
    if client is None:
        with _lock:
            client = _shared.get(url)
            if client is None:
                client = _shared[url] = connect(url)
    return client


def eviction_warning(connection: RedisClient) -> str | None:
    """A loud warning when Redis may evict keys (any ``maxmemory-policy`` but
    ``noeviction``): job records, queue keys and registries would vanish silently.

    ``CONFIG GET`` may be refused (managed Redis, ACLs): then None (unknown).
    """
    try:
        reply = connection.config_get("maxmemory-policy")
    except (redis.ResponseError, redis.exceptions.NoPermissionError):
        return None
    policies = set()
    found: dict[Any, Any] = reply if isinstance(reply, dict) else {}
    for key, value in found.items():      # a Cluster may answer per node
        if isinstance(value, dict):
            value = value.get("maxmemory-policy")
        elif key != "maxmemory-policy":
            continue
        if value:
            policies.add(text(value))
    evicting = sorted(p for p in policies if p != "noeviction")
    if not evicting:
        return None
    return (f"Redis maxmemory-policy is {', '.join(evicting)}: Redis may evict job records, "
            "queues and registries silently (jobs lost); set maxmemory-policy noeviction "
            "(see docs/deployment.md)")
