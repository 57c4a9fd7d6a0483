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
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel, SentinelConnectionPool

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

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel",)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SUPPORTED_SCHEMES = PLAIN_SCHEMES + SENTINEL_SCHEMES + CLUSTER_SCHEMES

#: Query options whose values are secrets (masked by :func:`mask_url`).
_SECRET_OPTIONS = frozenset({"password", "sentinel_password"})

#: Query options of sentinel/cluster URLs and how to parse them.
_OPTION_PARSERS: dict[str, Any] = {
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "health_check_interval": int,
    "client_name": str,
    "sentinel_password": str,
    "sentinel_username": str,
    "sentinel_socket_timeout": float,
}

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


@dataclass(frozen=True)
class RedisURL:
    """A parsed Sentinel or Cluster URL (plain URLs are parsed by redis-py itself)."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    master_name: str | None = None   # sentinel only
    db: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``"redis"``, ``"sentinel"`` or ``"cluster"``."""
        if self.scheme in SENTINEL_SCHEMES:
            return "sentinel"
        if self.scheme in CLUSTER_SCHEMES:
            return "cluster"
        return "redis"


def mask_url(url: str) -> str:
    """``url`` with its password(s) replaced by ``***``; safe for logs and errors.

    A user name given without a password (``redis://NAME@host``) is masked too: it is
    the password far more often than a user of Redis's ACL without one. Never raises:
    a string that does not even parse as a URL is masked with a regular expression
    instead, and one without ``scheme://`` (a typo: ``:pw@host``, ``redis:/:pw@host``)
    shows nothing of what stands before its last ``@``.
    """
    _, sep, rest = url.partition("://")
    if not sep:
        return _mask_schemeless(url)
    if "@" in rest and "@" not in _netloc(url):
        # a user or password holding an unencoded '/', '?' or '#' ends the authority early
        # for a URL parser: mask everything from the user's ':' to the last '@'
        userinfo, _, hostpart = rest.rpartition("@")
        user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
        return f"{url[:len(url) - len(rest)]}{user}:***@{_mask_query(hostpart)}"
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostinfo = netloc.rpartition("@")
            if ":" in userinfo:
                user = userinfo.split(":", 1)[0]
                netloc = f"{user}:***@{hostinfo}"
            else:
                netloc = f"***@{hostinfo}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k in _SECRET_OPTIONS for k, _ in pairs):
                query = urlencode(
                    [(k, "***" if k in _SECRET_OPTIONS else v) for k, v in pairs], safe="*"
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        masked = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
        return re.sub(r"((?:sentinel_)?password=)[^&]*", r"\1***", masked)


#: what a mistyped scheme may keep of itself (``redis:``, ``redis:/``): letters, then ':'
_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/{0,2}")


def _mask_schemeless(url: str) -> str:
    """A URL without ``scheme://``: all before its last ``@`` (but a scheme-like start)
    is ``***``, whatever it holds; a ``password=`` option too."""
    masked = url
    if "@" in url:
        head, _, tail = url.rpartition("@")
        kept = _SCHEME_LIKE.match(head)
        masked = f"{kept.group(0) if kept else ''}***@{tail}"
    return re.sub(r"((?:sentinel_)?password=)[^&]*", r"\1***", masked)


def _netloc(url: str) -> str:
    try:
        return urlsplit(url).netloc
    except ValueError:
        return ""


def _split_userinfo(url: str) -> bool:
    """The URL's user or password holds an unencoded ``/``, ``?`` or ``#``: a URL parser
    ends the authority there and finds the ``@`` in the path, query or fragment."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if "@" in parts.netloc:
        return False
    query_user = "@" in parts.query and "=" not in parts.query.split("@", 1)[0]
    return "@" in parts.path or "@" in parts.fragment or query_user


def _mask_query(text: str) -> str:
    return re.sub(r"((?:sentinel_)?password=)[^&]*", r"\1***", text)


def _check_plain(url: str, parts: Any) -> None:
    """A ``redis://``/``rediss://``/``unix://`` URL that redis-py would read otherwise
    than written: a database that is no integer (redis-py takes db 0 for ``/abc``,
    ``/1.5``, ``/0/extra``), or a ``#`` part."""
    if parts.fragment:
        raise ValueError(f"a Redis URL has no '#' part: {mask_url(url)}")
    if parts.scheme.lower() != "unix" and parts.path not in ("", "/") and not re.fullmatch(
            r"/[0-9]+", parts.path):
        raise ValueError(f"bad database {parts.path[1:]!r} in Redis URL {mask_url(url)}: "
                         "write /N with N a whole number (/0, /1...)")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "db" and not value.isdigit():
            raise ValueError(f"bad database {value!r} in Redis URL {mask_url(url)}: "
                             "db=N with N a whole number")


def _parse_host(text: str, default_port: int, url: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` → (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"malformed host {text!r} in Redis URL {mask_url(url)}")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
        if ":" in port_text:
            raise ValueError(
                f"malformed host {text!r} in Redis URL {mask_url(url)} "
                "(write IPv6 addresses in brackets: [::1]:26379)"
            )
    if not host:
        raise ValueError(f"empty host in Redis URL {mask_url(url)}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad port {port_text!r} in Redis URL {mask_url(url)}")
    return host, int(port_text)


def _parse_options(query: str, url: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        parser = _OPTION_PARSERS.get(key)
        if parser is None:
            known = ", ".join(sorted(_OPTION_PARSERS))
            raise ValueError(f"unknown option {key!r} in Redis URL {mask_url(url)} (known: {known})")
        try:
            options[key] = parser(value)
        except ValueError as exc:
            raise ValueError(f"bad value for {key!r} in Redis URL {mask_url(url)}") from exc
    return options


def _scheme_of(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise ValueError(f"not a Redis URL (no scheme://): {mask_url(url)}")
    scheme = scheme.lower()
    if scheme not in SUPPORTED_SCHEMES:
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r} in {mask_url(url)}; "
            f"use one of: {', '.join(s + '://' for s in SUPPORTED_SCHEMES)}"
        )
    return scheme


def parse_url(url: str) -> RedisURL:
    """Parse a ``redis+sentinel://`` or ``redis+cluster://`` URL (no I/O).

    Plain ``redis://``, ``rediss://`` and ``unix://`` URLs are checked for
    their scheme and host and returned with ``kind == "redis"``; their
    details are left to redis-py. Raises :class:`ValueError` on a malformed
    URL or an unsupported scheme.
    """
    scheme = _scheme_of(url)
    if _split_userinfo(url):
        raise ValueError(f"cannot read the user and password of Redis URL {mask_url(url)}: "
                         "percent-encode '/', '?', '#' and '@' in them (%2F, %3F, %23, %40)")
    parts = urlsplit(url)
    username, password, hostinfo = _credentials(parts.netloc)
    if scheme in PLAIN_SCHEMES:
        _check_plain(url, parts)
        if scheme == "unix":
            if not parts.path:
                raise ValueError(f"unix:// Redis URL without a socket path: {mask_url(url)}")
            return RedisURL(scheme, (), username, password)
        host = _parse_host(hostinfo, 6379, url) if hostinfo else ("localhost", 6379)
        return RedisURL(scheme, (host,), username, password)

    if not hostinfo:
        raise ValueError(f"no host in Redis URL {mask_url(url)}")
    default_port = 26379 if scheme in SENTINEL_SCHEMES else 6379
    hosts = tuple(_parse_host(h, default_port, url) for h in hostinfo.split(","))
    options = _parse_options(parts.query, url)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if scheme in SENTINEL_SCHEMES:
        master, db = _sentinel_path(segments, url)
        return RedisURL(scheme, hosts, username, password, master, db, options)
    _check_cluster(options, segments, parts.path, url)
    return RedisURL(scheme, hosts, username, password, None, 0, options)


def _credentials(netloc: str) -> tuple[str | None, str | None, str]:
    """``(username, password, hosts)`` of a URL's netloc, user and password unquoted."""
    userinfo, at, hostinfo = netloc.rpartition("@")
    if not at:
        return None, None, netloc
    user, colon, secret = userinfo.partition(":")
    return unquote(user) or None, (unquote(secret) if colon else None), hostinfo


def _sentinel_path(segments: list[str], url: str) -> tuple[str, int]:
    """``(master_name, db)`` of a Sentinel URL's path segments."""
    if not segments or len(segments) > 2:
        raise ValueError(
            f"a Sentinel URL names the master and optionally the db: "
            f"redis+sentinel://host:26379,host2:26379/<master_name>[/<db>], got {mask_url(url)}"
        )
    if len(segments) == 2 and not segments[1].isdigit():
        raise ValueError(f"bad database number {segments[1]!r} in {mask_url(url)}")
    return segments[0], int(segments[1]) if len(segments) == 2 else 0


def _check_cluster(options: dict[str, Any], segments: list[str], path: str, url: str) -> None:
    """A cluster URL takes no Sentinel option and no database but 0."""
    for name in ("sentinel_password", "sentinel_username", "sentinel_socket_timeout"):
        if name in options:
            raise ValueError(f"option {name!r} is for Sentinel URLs, not {mask_url(url)}")
    if segments and segments != ["0"]:
        raise ValueError(f"a Redis Cluster has only database 0; got path {path!r} in {mask_url(url)}")


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
