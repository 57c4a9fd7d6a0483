"""Redis URLs: which forms fusionworker takes (``core/redis_client.py``'s docstring
lists them), parsed without I/O (:func:`parse_url`), and shown without their secrets
(:func:`mask_url`): a password, a user name given alone, ``password=`` options, and
all before the ``@`` of a URL whose ``scheme://`` was mistyped."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis

__all__ = ["CLUSTER_SCHEMES", "PLAIN_SCHEMES", "SENTINEL_SCHEMES", "SUPPORTED_SCHEMES",
           "RedisURL", "mask_url", "parse_url"]

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
    known = _plain_options(parts.scheme.lower())
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "db" and not value.isdigit():
            raise ValueError(f"bad database {value!r} in Redis URL {mask_url(url)}: "
                             "db=N with N a whole number")
        if key not in known:      # redis-py would pass it on, to fail at the first command
            near = difflib.get_close_matches(key, known, n=1)
            raise ValueError(f"unknown option {key!r} in Redis URL {mask_url(url)}"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))


@functools.cache
def _plain_options(scheme: str) -> frozenset[str]:
    """The query options redis-py's client takes for a ``scheme`` URL: what its
    connection class (``rediss``: the TLS one) and its pool accept."""
    cls = {"rediss": redis.SSLConnection, "unix": redis.UnixDomainSocketConnection}.get(
        scheme, redis.Connection)
    # redis-py's own URL options (its parsers'), whatever the class takes
    names = set(getattr(redis.connection, "URL_QUERY_ARGUMENT_PARSERS", {"timeout": float}))
    for owner in (*cls.__mro__, *redis.ConnectionPool.__mro__):
        init = owner.__dict__.get("__init__")
        try:
            found = inspect.signature(init).parameters.values() if init else ()
        except (TypeError, ValueError):
            continue
        names.update(p.name for p in found if p.name != "self"
                     and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    return frozenset(names)


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
