"""The Starlette application: JSON API under ``/api/v1`` and the HTML pages.

Routes run as plain functions in Starlette's thread pool (redis-py is
synchronous). Every request, page or API, is authenticated first (see
``auth.py``); a read-only app refuses every action with 403 and its pages show
none. Errors are JSON ``{"error": "..."}`` on the API and a message on a page,
never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import jinja2
import redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import __version__
from ..core.config import Settings
from ..core.connection import mask_url
from ..core.job import JobStatus
from ..core.queue import find_queue_of
from ..events import metrics_history
from ..ops.info import fmt_age
from . import auth, listings, live, pages
from .actions import dispatch
from .openapi import OPENAPI
from .service import STATUSES, ApiError, Dashboard, parse_int

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

log = logging.getLogger("fusionworker.web")

_HERE = resources.files(__package__)


def _fmt_time(ts: float | None) -> str:
    if not ts:
        return "-"
    from datetime import datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _fmt_window(seconds: float) -> str:
    """A rate-limit window: ``s``, ``m``, ``h`` when it is one of them, else seconds."""
    names = {1.0: "s", 60.0: "m", 3600.0: "h"}
    return names.get(float(seconds), f"{seconds:g} s")


def create_app(settings: Settings, connection: RedisClient | None = None, *, read_only: bool = False,
               poll_interval: float = 2.0, history_interval: float | None = 5.0) -> Starlette:
    """The dashboard over ``connection`` (default: a client of ``settings.redis_url``).

    While it runs (its lifespan), a thread adds the event stream's new outcomes to
    the charts' history every ``history_interval`` seconds (None: no thread;
    ``events/metrics_history.py``)."""
    from ..core.connection import connect

    r = connection if connection is not None else connect(settings.redis_url)
    from ..core.connection import decoding

    r = decoding(r)
    board = Dashboard(r, settings)
    authn = auth.Authenticator(settings.web_token, settings.web_user, settings.web_password_hash)
    if not authn.configured:   # secure by default: reads and actions both need credentials
        raise ValueError("the dashboard needs authentication: set FUSIONWORKER_WEB_TOKEN (or "
                         "FUSIONWORKER_WEB_USER and FUSIONWORKER_WEB_PASSWORD_HASH)")
    masked = mask_url(settings.redis_url)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE.joinpath("templates"))),
        autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["age"] = fmt_age
    env.filters["when"] = _fmt_time
    env.filters["window"] = _fmt_window
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, default=str, ensure_ascii=False)

    # -- plumbing ------------------------------------------------------------------

    def identify(request: Request) -> auth.Identity | None:
        return authn.identify(request.headers.get("authorization"),
                              request.cookies.get(auth.SESSION_COOKIE))

    def api_user(request: Request, action: bool = False) -> str:
        who = identify(request)
        if who is None:
            raise ApiError(401, "authentication required: Authorization: Bearer <token> "
                                "or basic auth")
        if action:
            if read_only:
                raise ApiError(403, "the dashboard runs read-only: actions are refused")
            if who.method in ("basic", "session"):   # sent by the browser by itself
                given = request.headers.get("x-csrf-token")
                if not auth.csrf_ok(request.cookies.get(auth.CSRF_COOKIE), given):
                    raise ApiError(403, "CSRF token missing or wrong (X-CSRF-Token header)")
        return who.user

    async def body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            raise ApiError(400, "the body must be JSON") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the body must be a JSON object")
        return data

    def ok(data: Any, status: int = 200) -> JSONResponse:
        return JSONResponse(data, status_code=status)

    def page(request: Request, name: str, who: auth.Identity, **ctx: Any) -> HTMLResponse:
        csrf = request.cookies.get(auth.CSRF_COOKIE) or auth.new_csrf()
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        html = env.get_template(name).render(
            request=request, user=who.user, read_only=read_only, csrf=csrf,
            version=__version__, redis_url=masked, poll_ms=int(poll_interval * 1000),
            message=request.query_params.get("msg"), error=request.query_params.get("error"),
            path=request.url.path, here=here, auth_on=authn.configured, qs=urlencode, **ctx)
        response = HTMLResponse(html)
        if request.cookies.get(auth.CSRF_COOKIE) != csrf:
            response.set_cookie(auth.CSRF_COOKIE, csrf, httponly=False, samesite="strict")
        return response

    def fragment(name: str, request: Request, user: str, here: str, **ctx: Any) -> str:
        """A part of a page, rendered as the page renders it (for live updates)."""
        return env.get_template(name).render(
            request=request, user=user, read_only=read_only,
            csrf=request.cookies.get(auth.CSRF_COOKIE) or "", here=here,
            path=here.split("?", 1)[0], qs=urlencode, **ctx)

    def page_user(request: Request) -> auth.Identity | Response:
        who = identify(request)
        if who is None:
            return RedirectResponse("/login?" + urlencode({"next": request.url.path}), 303)
        return who

    # -- API -------------------------------------------------------------------------

    async def api_openapi(request: Request) -> Response:
        api_user(request)
        return ok(OPENAPI)

    def api_queues(request: Request) -> Response:
        api_user(request)
        return ok({"queues": board.queues(), "suspended": board.suspended() is not None})

    def api_workers(request: Request) -> Response:
        api_user(request)
        return ok({"workers": board.workers()})

    def api_info(request: Request) -> Response:
        api_user(request)
        return ok(board.info())

    def api_chart(request: Request) -> Response:
        api_user(request)
        minutes = parse_int(request.query_params.get("minutes", 60), "minutes", 1, 120)
        return ok({"minutes": board.chart(minutes, request.query_params.get("queue") or None)})

    def api_cron(request: Request) -> Response:
        api_user(request)
        return ok({"cron": board.cron_entries()})

    def api_jobs(request: Request) -> Response:
        api_user(request)
        p = request.query_params
        return ok(board.jobs(p.get("queue"), p.get("status") or JobStatus.QUEUED, p.get("priority"),
                             p.get("function"), p.get("page", 1), p.get("per_page", 50),
                             p.get("start")))

    def api_job(request: Request) -> Response:
        api_user(request)
        return ok(board.job(request.path_params["id"], request.query_params.get("queue")))

    async def api_priority(request: Request) -> Response:
        who = api_user(request, action=True)
        data = await body(request)
        if "priority" not in data:
            raise ApiError(400, 'give {"priority": N} (-1023..1023)')
        return ok(await _run(board.set_priority, who, request.path_params["id"], data["priority"],
                             request.query_params.get("queue")))

    async def api_job_action(request: Request) -> Response:
        who = api_user(request, action=True)
        action = request.path_params["action"]
        job_id = request.path_params["id"]
        q = request.query_params.get("queue")
        if action == "requeue":
            return ok(await _run(board.requeue, who, job_id, q))
        if action == "cancel":
            return ok(await _run(board.cancel, who, job_id, q))
        if action == "run-now":
            return ok(await _run(board.run_now, who, job_id, q))
        raise ApiError(404, f"no action {action!r} (requeue, cancel, run-now)")

    async def api_delete_job(request: Request) -> Response:
        who = api_user(request, action=True)
        return ok(await _run(board.delete, who, request.path_params["id"],
                             request.query_params.get("queue")))

    async def api_requeue_failed(request: Request) -> Response:
        who = api_user(request, action=True)
        data = await body(request)
        ids = data.get("ids")
        if ids is not None and (not isinstance(ids, list)
                                or not all(isinstance(i, str) for i in ids)):
            raise ApiError(400, '"ids" must be a list of job ids (omit it for all failed jobs)')
        return ok(await _run(board.requeue_failed, who, request.path_params["q"], ids))

    async def api_queue_pause(request: Request) -> Response:
        who = api_user(request, action=True)
        paused = request.path_params["action"] == "pause"
        if request.path_params["action"] not in ("pause", "unpause"):
            raise ApiError(404, "pause or unpause")
        return ok(await _run(board.pause, who, request.path_params["q"], paused))

    async def api_max_active(request: Request) -> Response:
        who = api_user(request, action=True)
        data = await body(request)
        if "max_active" not in data:
            raise ApiError(400, 'give {"max_active": N} (N >= 1, or null for no cap)')
        return ok(await _run(board.max_active, who, request.path_params["q"], data["max_active"]))

    async def api_rate_limit(request: Request) -> Response:
        who = api_user(request, action=True)
        data = await body(request)
        if "rate" not in data:
            raise ApiError(400, 'give {"rate": "10/s"} (or null to remove; "scope": "queue", '
                                '"every" or "group" with "group": name)')
        return ok(await _run(board.rate_limit, who, request.path_params["q"], data["rate"],
                             str(data.get("scope") or "queue"), str(data.get("group") or "")))

    async def api_cron_add(request: Request) -> Response:
        who = api_user(request, action=True)
        data = await body(request)
        fields = {k: data.get(k) for k in ("name", "schedule", "func", "timezone", "priority")}
        for key, kind in (("args", list), ("kwargs", dict)):
            if data.get(key) is not None and not isinstance(data[key], kind):
                raise ApiError(400, f"{key} must be a JSON {'list' if kind is list else 'object'}")
            fields[key] = json.dumps(data.get(key) or kind())
        return ok(await _run(board.cron_add, who, fields, data.get("queue")), 201)

    async def api_suspend(request: Request) -> Response:
        who = api_user(request, action=True)
        return ok(await _run(board.suspend, who, request.url.path.endswith("/suspend")))

    async def api_cron_action(request: Request) -> Response:
        who = api_user(request, action=True)
        action = request.path_params["action"]
        if action == "run":
            return ok(await _run(board.cron_run_now, who, request.path_params["name"],
                                 request.query_params.get("queue")))
        if action not in ("pause", "resume"):
            raise ApiError(404, "pause, resume or run")
        return ok(await _run(board.cron, who, request.path_params["name"], action,
                             request.query_params.get("queue")))

    async def api_cron_delete(request: Request) -> Response:
        who = api_user(request, action=True)
        return ok(await _run(board.cron, who, request.path_params["name"], "remove",
                             request.query_params.get("queue")))

    # -- pages -------------------------------------------------------------------------

    def overview(request: Request) -> Response:
        who = page_user(request)
        if isinstance(who, Response):
            return who
        return page(request, "overview.html", who, queues=board.queues(),
                    workers=board.workers(), suspended=board.suspended(),
                    chart=board.chart(60))

    def queue_page(request: Request, name: str) -> Response:
        who = page_user(request)
        if isinstance(who, Response):
            return who
        p = request.query_params
        names = board.queue_names()
        status = p.get("status") or JobStatus.QUEUED
        try:
            listing = board.jobs(name, status, p.get("priority"), p.get("function"),
                                 p.get("page", 1), p.get("per_page", 50), p.get("start"))
        except ApiError as exc:
            if exc.status == 404:
                raise
            return RedirectResponse(f"/queues/{quote(name)}?" + urlencode({"error": exc.message}),
                                    303)
        stats = board.queue(name).stats()
        live = {k: p.get(k) for k in ("priority", "function", "page", "per_page") if p.get(k)}
        live_url = f"/api/v1/queues/{quote(name)}/live?" + urlencode({"status": status, **live})
        return page(request, "queue.html", who, q=stats, listing=listing, statuses=STATUSES,
                    counts=board.status_counts(name), live_url=live_url,
                    seen=listing["fingerprint"] or "",
                    names=names, failed_page=False, status=status,
                    filters={k: p.get(k) or "" for k in ("priority", "function")})

    def queue_view(request: Request) -> Response:
        return queue_page(request, request.path_params["q"])

    def job_view(request: Request) -> Response:
        who = page_user(request)
        if isinstance(who, Response):
            return who
        job = board.job(request.path_params["id"], request.query_params.get("queue"))
        return page(request, "job.html", who, job=job, seen=job["fingerprint"])

    def scheduled_view(request: Request) -> Response:
        who = page_user(request)
        if isinstance(who, Response):
            return who
        rows = listings.scheduled(r, settings.prefix, board.queue_names(), retries=False)
        return page(request, "scheduled.html", who, listings=rows["queues"], cron=board.cron_entries(),
                    now=board.now())

    def search_view(request: Request) -> Response:
        who = page_user(request)
        if isinstance(who, Response):
            return who
        text = (request.query_params.get("q") or "").strip()
        if not text:
            return RedirectResponse("/", 303)
        if len(text) > 200:
            raise ApiError(400, "search for at most 200 characters")
        if listings.looks_like_job_id(text):
            where = find_queue_of(r, text, settings.prefix)
            if where is not None:
                return RedirectResponse(f"/jobs/{quote(text)}?queue={quote(where)}", 303)
        result = listings.search_functions(r, settings.prefix, board.queue_names(), text)
        return page(request, "search.html", who, result=result)

    def workers_view(request: Request) -> Response:
        who = page_user(request)
        if isinstance(who, Response):
            return who
        return page(request, "workers.html", who, workers=board.workers())

    async def login(request: Request) -> Response:
        nxt = request.query_params.get("next") or "/"
        error = None
        if request.method == "POST":
            form = await request.form()
            nxt = str(form.get("next") or "/")
            sid = authn.login(token=str(form.get("token") or ""), user=str(form.get("user") or ""),
                              password=str(form.get("password") or ""))
            if sid:
                response = RedirectResponse(_safe_next(nxt), 303)
                response.set_cookie(auth.SESSION_COOKIE, sid, httponly=True, samesite="strict")
                return response
            log.warning("web: refused login from %s",
                        request.client.host if request.client else "?")
            error = "wrong token, user or password"
        html = env.get_template("login.html").render(
            next=_safe_next(nxt), error=error, user=None, read_only=read_only, version=__version__,
            password_login=bool(authn.user and authn.password_hash), path="/login",
            message=None, redis_url=None, csrf="", auth_on=authn.configured)
        return HTMLResponse(html, status_code=401 if request.method == "POST" else 200)

    async def logout(request: Request) -> Response:
        authn.logout(request.cookies.get(auth.SESSION_COOKIE))
        response = RedirectResponse("/login", 303)
        response.delete_cookie(auth.SESSION_COOKIE)
        return response

    async def form_action(request: Request) -> Response:
        """Every button and form of the pages posts here (CSRF checked)."""
        who = identify(request)
        if who is None:
            return RedirectResponse("/login", 303)
        form = await request.form()
        back = _safe_next(str(form.get("next") or "/"))
        if read_only:
            raise ApiError(403, "the dashboard runs read-only: actions are refused")
        if not auth.csrf_ok(request.cookies.get(auth.CSRF_COOKIE), form.get("csrf")):
            raise ApiError(403, "CSRF token missing or wrong: reload the page and try again")
        action = str(form.get("action") or "")
        queue = str(form.get("queue") or "") or None
        job_id = str(form.get("job_id") or "")
        ids = [str(i) for i in form.getlist("ids") if i]
        user = who.user
        try:
            message = await _run(dispatch, board, user, action, queue, job_id, ids, form)
        except ApiError as exc:
            return RedirectResponse(_with(back, "error", exc.message), 303)
        if action == "delete" and job_id:
            back = f"/queues/{quote(queue)}" if queue else "/"
        return RedirectResponse(_with(back, "msg", message), 303)

    site = pages.Site(board=board, page=page, page_user=page_user, api_user=api_user,
                      body=body, fragment=fragment)
    routes = [*pages.routes(site), *live.routes(site),
        Route("/api/v1/openapi.json", api_openapi),
        Route("/api/v1/queues", api_queues),
        Route("/api/v1/workers", api_workers),
        Route("/api/v1/info", api_info),
        Route("/api/v1/chart", api_chart),
        Route("/api/v1/cron", api_cron),
        Route("/api/v1/jobs", api_jobs),
        Route("/api/v1/jobs/{id}", api_job, methods=["GET"]),
        Route("/api/v1/jobs/{id}", api_delete_job, methods=["DELETE"]),
        Route("/api/v1/jobs/{id}/priority", api_priority, methods=["PUT"]),
        Route("/api/v1/jobs/{id}/{action}", api_job_action, methods=["POST"]),
        Route("/api/v1/queues/{q}/requeue-failed", api_requeue_failed, methods=["POST"]),
        Route("/api/v1/queues/{q}/max-active", api_max_active, methods=["PUT"]),
        Route("/api/v1/queues/{q}/rate-limit", api_rate_limit, methods=["PUT"]),
        Route("/api/v1/cron", api_cron_add, methods=["POST"]),
        Route("/api/v1/queues/{q}/{action}", api_queue_pause, methods=["POST"]),
        Route("/api/v1/suspend", api_suspend, methods=["POST"]),
        Route("/api/v1/resume", api_suspend, methods=["POST"]),
        Route("/api/v1/cron/{name}/{action}", api_cron_action, methods=["POST"]),
        Route("/api/v1/cron/{name}", api_cron_delete, methods=["DELETE"]),
        Route("/", overview),
        Route("/queues/{q}", queue_view),
        Route("/jobs/{id}", job_view),
        Route("/scheduled", scheduled_view),
        Route("/workers", workers_view),
        Route("/search", search_view),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/action", form_action, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(_HERE.joinpath("static"))), name="static"),
    ]

    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def error_page(request: Request, status: int, message: str) -> Response:
        if is_api(request):
            return JSONResponse({"error": message}, status_code=status)
        html = env.get_template("error.html").render(
            status=status, error_text=message, user=None, read_only=read_only,
            version=__version__, path=request.url.path, message=None, error=None, csrf="",
            redis_url=None, auth_on=authn.configured)
        return HTMLResponse(html, status_code=status)

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_page(request, exc.status, exc.message)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = {404: "not found", 405: "method not allowed"}.get(exc.status_code,
                                                                    str(exc.detail))
        return error_page(request, exc.status_code, message)

    async def on_redis(request: Request, exc: Exception) -> Response:
        log.warning("web: Redis error on %s: %s", request.url.path, type(exc).__name__)
        return error_page(request, 503, f"cannot reach Redis at {masked}")

    async def on_error(request: Request, exc: Exception) -> Response:
        log.error("web: error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_page(request, 500, "internal error (see the dashboard's log)")

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        recorder = (metrics_history.HistoryRecorder(r, settings.prefix, history_interval)
                    if history_interval else None)
        if recorder is not None:
            recorder.start()
        try:
            yield
        finally:
            if recorder is not None:
                await _run(recorder.stop)

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        ApiError: on_api_error, HTTPException: on_http,
        redis.ConnectionError: on_redis, redis.TimeoutError: on_redis,
        Exception: on_error,
    })
    app.state.dashboard = board
    app.state.auth = authn
    return app


async def _run(func: Any, *args: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(func, *args)


_safe_next = auth.safe_next


def _with(target: str, key: str, value: str) -> str:
    base = target.split("?", 1)
    query = [part for part in (base[1].split("&") if len(base) > 1 else [])
             if part and not part.startswith(("msg=", "error="))]
    query.append(urlencode({key: value}))
    return base[0] + "?" + "&".join(query)


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
