"""What every request of the dashboard passes before a route sees it (an ASGI
middleware, :class:`Guard`):

1. the sender: ``X-Forwarded-Proto``, ``X-Forwarded-Host`` and ``X-Forwarded-For``
   are believed only from ``FUSIONWORKER_WEB_TRUSTED_PROXIES`` (the scheme then
   says whether cookies are ``Secure``; the address is the client the failure
   limit counts);
2. who is asking: the credentials are checked here, a password hash (PBKDF2, tens
   of milliseconds) in a worker thread, at most ``auth.HASHERS`` at once, never on the
   event loop; a client past ``FUSIONWORKER_WEB_AUTH_FAILURES`` wrong credentials
   in a minute gets 429 with ``Retry-After`` and nothing is hashed for it;
3. a state change (any method but GET, HEAD and OPTIONS) must come from this
   site: its ``Origin`` (else its ``Referer``), when it has one, is this
   dashboard's own origin (scheme and Host); one authenticated by what a browser
   sends by itself (a session cookie, basic auth), and the login and logout,
   must have one; its body is read whole before the route, at most
   ``FUSIONWORKER_WEB_MAX_BODY`` bytes (413 beyond);
4. every answer carries the security headers (:data:`SECURITY_HEADERS`: a strict
   Content-Security-Policy with no inline script, framing refused, ``nosniff``,
   ``Referrer-Policy``), and every answer but a static file's ``Cache-Control:
   no-store`` (Back after a log out shows no page kept from before).

The identity found is kept in the request's scope (:data:`IDENTITY`) for
``WebState.identify``; the CSRF token itself is checked by the routes that act.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers

from . import auth
from .state import GUARD_IDENTITY

log = logging.getLogger("fusionworker.web")

if TYPE_CHECKING:  # pragma: no cover
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from .state import WebState

#: the scope key of the identity the guard found (None: no or wrong credentials)
IDENTITY = GUARD_IDENTITY
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
#: every answer but the static files': no copy kept (a page or an answer of the API
#: shown again from the browser's cache by Back after a log out)
NO_STORE = (b"cache-control", b"no-store")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: state changes that need the sender's site named even with no credential on them
NAMED_SITE_PATHS = frozenset({"/login", "/logout"})


def trusted_networks(entries: tuple[str, ...]) -> list[Any]:
    """``FUSIONWORKER_WEB_TRUSTED_PROXIES`` as networks (a plain host name is kept as is)."""
    found: list[Any] = []
    for entry in entries:
        try:
            found.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            found.append(entry)
    return found


def is_trusted(host: str | None, networks: list[Any]) -> bool:
    if not host or not networks:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in networks
    return any(not isinstance(n, str) and address in n for n in networks)


class Guard:
    """See the module doc."""

    def __init__(self, app: ASGIApp, web: WebState) -> None:
        self.app = app
        self.web = web
        self.proxies = trusted_networks(web.settings.web_trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._with_headers(send, scope["path"].startswith("/static/"))
        self._forwarded(scope, Headers(scope=scope))
        headers = Headers(scope=scope)   # with the forwarded Host, if any
        client = self.client(scope)
        wait = self.web.limiter.retry_after(client)
        if wait and headers.get("authorization"):
            await self._answer(scope, send, 429, f"too many wrong credentials: try again in "
                               f"{wait} s", {"retry-after": str(wait)})
            return
        who = scope[IDENTITY] = await self.identify(headers, client)
        if scope["method"] not in SAFE_METHODS:
            refused = self._cross_site(scope, headers, who)
            if refused:
                await self._answer(scope, send, 403, refused)
                return
            body = await self._body(headers, receive)
            if body is None:
                await self._answer(scope, send, 413, f"the request body is over "
                                   f"{self.web.settings.web_max_body} bytes")
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    # -- the sender ----------------------------------------------------------------------

    def _forwarded(self, scope: Scope, headers: Headers) -> None:
        """Believe the forwarding headers of a trusted proxy only."""
        peer = scope.get("client")
        if not peer or not is_trusted(peer[0], self.proxies):
            return
        proto = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scope["scheme"] = proto
        host = headers.get("x-forwarded-host", "").split(",")[0].strip()
        if host:
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"host"]
            scope["headers"].append((b"host", host.encode("latin-1")))
        hops = [h.strip() for h in headers.get("x-forwarded-for", "").split(",") if h.strip()]
        for hop in reversed(hops):   # the nearest hop the proxies did not add themselves
            if not is_trusted(hop, self.proxies):
                scope["client"] = (hop, 0)
                break

    @staticmethod
    def client(scope: Scope) -> str:
        peer = scope.get("client")
        return str(peer[0]) if peer else "?"

    @staticmethod
    def origin(scope: Scope, headers: Headers) -> str:
        """This dashboard's origin as the browser names it: scheme and Host."""
        return f"{scope.get('scheme', 'http')}://{headers.get('host', '')}".lower()

    def _cross_site(self, scope: Scope, headers: Headers, who: auth.Identity | None) -> str:
        """Why a state change is refused as sent from another site ("" when it is not)."""
        own = self.origin(scope, headers)
        sender = headers.get("origin")
        if sender is None and headers.get("referer"):
            parts = urlsplit(headers["referer"])
            sender = f"{parts.scheme}://{parts.netloc}" if parts.scheme else "null"
        if sender is None:
            if scope["path"] in NAMED_SITE_PATHS or (who is not None and who.method != "bearer"):
                return ("a state change from a browser must name its site (Origin or Referer "
                        "header)")
            return ""
        if sender.strip().lower() != own:
            return f"cross-site request refused: it comes from {sender[:100]!r}, not {own!r}"
        return ""

    async def _body(self, headers: Headers, receive: Receive) -> bytes | None:
        """The whole body, or None when it is over the limit (nothing more is read)."""
        limit = self.web.settings.web_max_body
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    # -- who is asking ---------------------------------------------------------------------

    async def identify(self, headers: Headers, client: str) -> auth.Identity | None:
        """The identity of the request's credentials; a password hash runs in a worker
        thread. Wrong credentials count against ``client``."""
        authn = self.web.authn
        authorization = headers.get("authorization")
        session = _cookie(headers, auth.SESSION_COOKIE)
        needs_hash = bool(authorization and authorization.lower().startswith("basic ")
                          and not authn.basic_known(authorization))
        if needs_hash:
            who = await anyio.to_thread.run_sync(authn.identify, authorization, session,
                                                 limiter=self.web.hashers)
        else:
            who = authn.identify(authorization, session)
        if who is None and authorization:
            self.web.limiter.failed(client)    # said as a refused login is (never the secret)
            scheme = authorization.partition(" ")[0].lower()
            log.warning("web: refused %s credentials from %s",
                        scheme if scheme in ("bearer", "basic") else "other", client)
        return who

    # -- answers ---------------------------------------------------------------------------

    @staticmethod
    def _with_headers(send: Send, static: bool) -> Send:
        wanted = SECURITY_HEADERS if static else [*SECURITY_HEADERS, NO_STORE]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in wanted if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)
        return sending

    @staticmethod
    async def _answer(scope: Scope, send: Send, status: int, text: str,
                      headers: dict[str, str] | None = None) -> None:
        """An error answered by the guard: JSON under ``/api/``, plain text elsewhere."""
        if scope["path"].startswith("/api/"):
            data, kind = json.dumps({"error": text}).encode(), b"application/json"
        else:
            data, kind = f"{status}: {text}\n".encode(), b"text/plain; charset=utf-8"
        raw = [(b"content-type", kind), (b"content-length", str(len(data)).encode())]
        raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": data})


async def check_login(web: WebState, client: str, *, token: str, user: str,
                      password: str) -> str | int | None:
    """A login form's credentials: the new session id, None when wrong (counted), or
    the seconds to wait when ``client`` is past the failure limit (nothing checked)."""
    wait = web.limiter.retry_after(client)
    if wait:
        return wait
    sid = await anyio.to_thread.run_sync(
        lambda: web.authn.login(token=token, user=user, password=password),
        limiter=web.hashers)
    if sid is None:
        web.limiter.failed(client)
    return sid


def _cookie(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then what the server sends (a disconnect)."""
    sent = False

    async def replaying() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replaying
