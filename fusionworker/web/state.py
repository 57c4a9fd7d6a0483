"""What every route of the dashboard reads: one :class:`WebState`, built by
``app.create_app`` and kept as ``app.state.web``, with the plumbing the routes
share (who is asking, the page and fragment renderers, the JSON body)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio
import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from .. import __version__
from ..ops.info import fmt_age
from . import auth
from .service import ApiError, Dashboard

#: the scope key where ``guard.Guard`` keeps the identity it found (guard.IDENTITY)
GUARD_IDENTITY = "fusionworker.identity"

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.connection import RedisClient

HERE = resources.files(__package__)


def _fmt_time(ts: float | None) -> str:
    """``ts`` (epoch seconds) as UTC text; a value read from Redis that is no time a
    date can show (``1e20``, ``inf``, ``nan``) as itself, never an error."""
    if not ts:
        return "-"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{ts!r} (no time)"


def _fmt_time_in(ts: float | None, zone: str | None) -> str:
    """``ts`` in the IANA ``zone`` (a cron entry's), the zone named: a Europe/Berlin
    schedule's next run reads in Berlin time, labelled (UTC when the zone is unknown)."""
    if not ts:
        return "-"
    try:
        tz: Any = ZoneInfo(zone or "UTC")
    except (ValueError, ZoneInfoNotFoundError):
        tz, zone = UTC, "UTC"
    try:
        return f"{datetime.fromtimestamp(ts, tz).strftime('%Y-%m-%d %H:%M:%S')} {zone or 'UTC'}"
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{ts!r} (no time)"


def _fmt_window(seconds: float) -> str:
    """A rate-limit window: ``s``, ``m``, ``h`` when it is one of them, else seconds."""
    names = {1.0: "s", 60.0: "m", 3600.0: "h"}
    return names.get(float(seconds), f"{seconds:g} s")


#: the characters of a value a page shows (the API's JSON has it whole)
SHOWN_CHARS = 20000


def _pretty(value: Any) -> str:
    """A value as indented JSON, its first :data:`SHOWN_CHARS` characters (a job of 9 MiB
    of arguments made an 18 MB page)."""
    text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
    if len(text) <= SHOWN_CHARS:
        return text
    return (f"{text[:SHOWN_CHARS]}\n... ({len(text) - SHOWN_CHARS:,} more characters: the "
            "API's /api/v1/jobs/<id> has it whole)")


def _fmt_rate_cell(queue: dict[str, Any]) -> str:
    """The overview's Rate cell, as ``info`` says it: ``10/s (held 1.5 s)``, ``1/s per
    group, 2 groups own (held 0.8 s)``, or ``-`` (static/app.js's rateText writes the same)."""
    rl, grl = queue.get("rate_limit"), queue.get("group_rate_limit")
    parts = []
    if rl:
        held = f" (held {rl['held_seconds']:.1f} s)" if rl["held_seconds"] else ""
        parts.append(f"{rl['limit']}/{_fmt_window(rl['window'])}{held}")
    if grl:
        own = []
        if grl.get("every"):
            own.append(f"{grl['every']['limit']}/{_fmt_window(grl['every']['window'])} per group")
        if grl.get("groups"):
            n = len(grl["groups"])
            own.append(f"{n} group{'s' if n > 1 else ''} own")
        held = f" (held {grl['held_seconds']:.1f} s)" if grl.get("held_seconds") else ""
        parts.append((", ".join(own) or "per group") + held)
    return " · ".join(parts) or "-"


def templates() -> jinja2.Environment:
    """The pages' Jinja environment (autoescaped, strict) with the dashboard's filters."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE.joinpath("templates"))),
        autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["age"] = fmt_age
    env.filters["when"] = _fmt_time
    env.filters["when_in"] = _fmt_time_in
    env.filters["window"] = _fmt_window
    env.filters["rate_cell"] = _fmt_rate_cell
    env.filters["pretty"] = _pretty
    return env


@dataclass
class WebState:
    """The dashboard's parts and options, shared by every route."""

    r: RedisClient
    settings: Settings
    board: Dashboard
    authn: auth.Authenticator
    env: jinja2.Environment
    read_only: bool
    #: the Redis URL without its password, as the pages and errors show it
    masked: str
    poll_interval: float
    history_interval: float | None
    #: wrong credentials per client (``guard.py``)
    limiter: auth.FailureLimiter = field(default_factory=lambda: auth.FailureLimiter(10))
    #: the worker threads password hashes may take at once (``auth.HASHERS``)
    hashers: Any = field(default_factory=lambda: anyio.CapacityLimiter(auth.HASHERS))

    def identify(self, request: Request) -> auth.Identity | None:
        """Who sent the request: what the guard found (it checked the credentials
        off the event loop)."""
        if GUARD_IDENTITY in request.scope:
            found: auth.Identity | None = request.scope[GUARD_IDENTITY]
            return found
        return self.authn.identify(request.headers.get("authorization"),
                                   request.cookies.get(auth.SESSION_COOKIE))

    def csrf_valid(self, request: Request, who: auth.Identity, given: object) -> bool:
        """A state change sent with ``who``'s credential carries its CSRF token (one
        authenticated by a bearer token needs none: a browser never adds it)."""
        return who.method == "bearer" or self.authn.csrf_valid(who, given)

    def secure_cookies(self, request: Request) -> bool:
        """Cookies are ``Secure`` over TLS (as a trusted proxy says) or when configured."""
        return self.settings.web_secure_cookies or request.url.scheme == "https"

    def api_user(self, request: Request, action: bool = False) -> str:
        """The API caller's name: 401 without credentials; for an ``action``, 403 when
        read-only or when a browser-sent credential comes without the CSRF header."""
        who = self.identify(request)
        if who is None:
            raise ApiError(401, "authentication required: Authorization: Bearer <token> "
                                "or basic auth")
        if action:
            if self.read_only:
                raise ApiError(403, "the dashboard runs read-only: actions are refused")
            if not self.csrf_valid(request, who, request.headers.get("x-csrf-token")):
                # basic auth and the session cookie are sent by the browser by itself
                raise ApiError(403, "CSRF token missing or wrong (X-CSRF-Token header: the "
                                    "token in the pages' csrf-token meta tag)")
        return who.user

    def page_user(self, request: Request) -> auth.Identity | Response:
        """The logged-in identity, or the redirect to the login page."""
        who = self.identify(request)
        if who is None:
            return RedirectResponse("/login?" + urlencode({"next": request.url.path}), 303)
        return who

    def page(self, request: Request, name: str, who: auth.Identity, **ctx: Any) -> HTMLResponse:
        """The template ``name`` rendered as a whole page, with the CSRF token of
        ``who``'s credential in its forms (and its ``csrf-token`` meta tag)."""
        csrf = self.authn.csrf_token(who)
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        html = self.env.get_template(name).render(
            request=request, user=who.user, read_only=self.read_only, csrf=csrf,
            version=__version__, redis_url=self.masked, poll_ms=int(self.poll_interval * 1000),
            message=request.query_params.get("msg"), error=request.query_params.get("error"),
            path=request.url.path, here=here, auth_on=self.authn.configured, qs=urlencode, **ctx)
        response = HTMLResponse(html)
        if auth.CSRF_COOKIE in request.cookies:   # the former double-submit cookie
            response.delete_cookie(auth.CSRF_COOKIE)
        return response

    def fragment(self, name: str, request: Request, user: str, here: str, **ctx: Any) -> str:
        """A part of a page, rendered as the page renders it (for live updates)."""
        return self.env.get_template(name).render(
            request=request, user=user, read_only=self.read_only,
            csrf=self.authn.csrf_token(self.identify(request)), here=here,
            path=here.split("?", 1)[0], qs=urlencode, **ctx)


def state(request: Request) -> WebState:
    """The :class:`WebState` of the app serving ``request``."""
    found: WebState = request.app.state.web
    return found


def signed_in(view: Callable[[Request, WebState, auth.Identity], Response],
              ) -> Callable[[Request], Response]:
    """A page's endpoint: ``view(request, state, identity)`` for a logged-in user, the
    redirect to the login page for anyone else."""
    @functools.wraps(view)
    def endpoint(request: Request) -> Response:
        st = state(request)
        who = st.page_user(request)
        if isinstance(who, Response):
            return who
        return view(request, st, who)
    return endpoint


def api_read(view: Callable[[Request, WebState], Response]) -> Callable[[Request], Response]:
    """An API endpoint that reads: ``view(request, state)`` for a known caller, 401 for
    anyone else."""
    @functools.wraps(view)
    def endpoint(request: Request) -> Response:
        st = state(request)
        st.api_user(request)
        return view(request, st)
    return endpoint


def api_action(view: Callable[[Request, WebState, str], Awaitable[Response]],
               ) -> Callable[[Request], Awaitable[Response]]:
    """An API endpoint that acts: ``view(request, state, caller)`` once
    :meth:`WebState.api_user` let the caller act (401, or 403 read-only or without
    the CSRF header)."""
    @functools.wraps(view)
    async def endpoint(request: Request) -> Response:
        st = state(request)
        who = st.api_user(request, action=True)
        return await view(request, st, who)
    return endpoint


async def body(request: Request) -> dict[str, Any]:
    """The request's JSON object body (``{}`` when empty); 400 for anything else."""
    raw = await request.body()
    if not raw:
        return {}
    if _depth(raw) > MAX_BODY_DEPTH:
        raise ApiError(400, f"the body nests deeper than {MAX_BODY_DEPTH} levels")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "the body must be JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


#: how deep a JSON body may nest (objects and lists)
MAX_BODY_DEPTH = 32


def _depth(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest (outside its strings), read without
    parsing it: a body of 100,000 ``[`` is refused before the parser recurses."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:      # backslash
                escaped = True
            elif byte == 0x22:      # "
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_BODY_DEPTH:
                break
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


class JsonAnswer(JSONResponse):
    """Starlette's JSON answer; a float read from Redis that JSON cannot say (``inf``,
    ``nan``: a last run, a lease) goes out as ``null`` instead of failing the answer."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:          # allow_nan=False met one: the rare path walks it
            return super().render(_finite(content))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def ok(data: Any, status: int = 200) -> JSONResponse:
    return JsonAnswer(data, status_code=status)


async def run(func: Any, *args: Any) -> Any:
    """``func(*args)`` in Starlette's thread pool (redis-py is synchronous)."""
    return await run_in_threadpool(func, *args)
