"""The Starlette application: JSON API under ``/api/v1`` and the HTML pages.

``create_app`` builds one :class:`~.state.WebState` (kept as ``app.state.web``)
and the routes: module-level endpoints that read it from the request, in
``api.py`` (the JSON API), ``views.py`` (the pages of a queue and a job, the
login, the pages' form actions), ``pages.py`` (the cross-queue pages and their
API) and ``live.py`` (what the live pages poll); ``errors.py`` answers errors.
Reads run as plain functions in Starlette's thread pool (redis-py is
synchronous). Every request, page or API, passes ``guard.py`` first (its
sender, body size, credentials checked off the event loop, same-site check of
state changes, security headers) and is authenticated (see ``auth.py``); a read-only app refuses every action with 403 and its pages show
none. Errors are JSON ``{"error": "..."}`` on the API and a message on a page,
never a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..core.config import Settings
from ..core.connection import connect, decoding, mask_url
from ..events import metrics_history
from . import api, auth, errors, guard, live, pages, views
from .service import Dashboard
from .state import HERE, WebState, run, templates

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient


def create_app(settings: Settings, connection: RedisClient | None = None, *, read_only: bool = False,
               poll_interval: float = 2.0, history_interval: float | None = 5.0) -> Starlette:
    """The dashboard over ``connection`` (default: a client of ``settings.redis_url``).

    While it runs (its lifespan), a thread adds the event stream's new outcomes to
    the charts' history every ``history_interval`` seconds (None: no thread;
    ``events/metrics_history.py``)."""
    r = decoding(connection if connection is not None else connect(settings.redis_url))
    board = Dashboard(r, settings)
    authn = auth.Authenticator(settings.web_token, settings.web_user, settings.web_password_hash)
    if not authn.configured:   # secure by default: reads and actions both need credentials
        raise ValueError("the dashboard needs authentication: set FUSIONWORKER_WEB_TOKEN (or "
                         "FUSIONWORKER_WEB_USER and FUSIONWORKER_WEB_PASSWORD_HASH)")
    web = WebState(r=r, settings=settings, board=board, authn=authn, env=templates(),
                   read_only=read_only, masked=mask_url(settings.redis_url),
                   poll_interval=poll_interval, history_interval=history_interval,
                   limiter=auth.FailureLimiter(settings.web_auth_failures))
    routes = [*pages.ROUTES, *live.ROUTES, *api.ROUTES, *views.ROUTES,
              Mount("/static", StaticFiles(directory=str(HERE.joinpath("static"))), name="static"),
              Route("/favicon.ico", _favicon),
              # last: a job id or cron name holding a "/" (refused at creation since)
              *api.SLASHED, *views.SLASHED]
    app = Starlette(routes=routes, lifespan=_lifespan, exception_handlers=errors.HANDLERS,
                    middleware=[Middleware(guard.Guard, web=web)])
    app.state.web = web
    app.state.dashboard = board
    app.state.auth = authn
    return app


async def _favicon(request: Request) -> RedirectResponse:
    """``/favicon.ico``, which a browser asks for by itself where no page names an icon
    (a JSON answer opened in a tab): the pages' icon, as a static file is, unauthenticated."""
    return RedirectResponse("/static/favicon.svg", status_code=301)


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """The charts' history recorder runs while the app serves (when it has an interval)."""
    web: WebState = app.state.web
    recorder = (metrics_history.HistoryRecorder(web.r, web.settings.prefix, web.history_interval)
                if web.history_interval else None)
    if recorder is not None:
        recorder.start()
    try:
        yield
    finally:
        if recorder is not None:
            await run(recorder.stop)


def serve_in_thread(app: Starlette, host: str = "127.0.0.1", port: int = 9181) -> Any:
    """Start uvicorn serving ``app`` in a daemon thread; returns the ``uvicorn.Server``
    once it listens (``server.should_exit = True`` stops it). Raises OSError when the
    port cannot be bound."""
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, name="fusionworker-web", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise OSError(f"cannot listen on {host}:{port}")
        time.sleep(0.02)
    server.thread = thread  # type: ignore[attr-defined]
    return server
