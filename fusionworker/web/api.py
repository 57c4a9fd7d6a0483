"""The JSON API under ``/api/v1``: reads, and the actions (each checked for
read-only and CSRF by :meth:`WebState.api_user` and audited by the
:class:`Dashboard` call it makes). Errors are ``{"error": "..."}``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.job import JobStatus
from . import live
from .openapi import OPENAPI
from .service import QUEUES_PER_PAGE, QUEUES_UNPAGED, ApiError, Dashboard, parse_int
from .state import WebState, api_action, api_read, body, ok, run, state

# -- reads -----------------------------------------------------------------------------


async def api_openapi(request: Request) -> Response:
    state(request).api_user(request)
    return ok(OPENAPI)


@api_read
def api_queues(request: Request, st: WebState) -> Response:
    """Every queue's stats while there are at most ``QUEUES_UNPAGED`` (500); beyond,
    and with ``page`` (and ``per_page``, default 50), one page of them by name, with
    ``total``, ``pages`` and ``next_page`` (and a ``Link: <...>; rel="next"`` header
    while there is a next page)."""
    p = request.query_params
    suspended = st.board.suspended() is not None
    if "page" in p or "per_page" in p or "match" in p:
        listing = st.board.queue_page(p.get("page", 1), p.get("per_page", QUEUES_PER_PAGE),
                                      match=p.get("match"))
    else:
        names = st.board.queue_names()
        if len(names) <= QUEUES_UNPAGED:
            queues = st.board.queues(names)
            return ok({"queues": queues, "suspended": suspended, "total": len(queues)})
        listing = st.board.queue_page(1, QUEUES_UNPAGED, names)
    answer = ok({**listing, "suspended": suspended})
    if listing["next_page"] is not None:
        query = {"page": listing["next_page"], "per_page": listing["per_page"],
                 **({"match": listing["match"]} if listing["match"] else {})}
        answer.headers["Link"] = f'</api/v1/queues?{urlencode(query)}>; rel="next"'
    return answer


def _whole(name: str, read: Callable[[Dashboard], Any]) -> Callable[[Request], Response]:
    """``api_<name>``, ``GET /api/v1/<name>``: ``{name: read(dashboard)}`` (a function of
    this module, as every endpoint is: named so)."""
    def endpoint(request: Request, st: WebState) -> Response:
        return ok({name: read(st.board)})
    endpoint.__name__ = endpoint.__qualname__ = f"api_{name}"
    return api_read(endpoint)


api_workers = _whole("workers", Dashboard.workers)
api_cron = _whole("cron", Dashboard.cron_entries)


@api_read
def api_info(request: Request, st: WebState) -> Response:
    """``info --json``; with ``page`` (and ``per_page``), one page of the queues."""
    p = request.query_params
    if "page" in p or "per_page" in p:
        return ok(st.board.info(p.get("page", 1), p.get("per_page", QUEUES_PER_PAGE)))
    return ok(st.board.info())


@api_read
def api_chart(request: Request, st: WebState) -> Response:
    p = request.query_params
    minutes = parse_int(p.get("minutes", 60), "minutes", 1, 120)
    names = None
    if "page" in p or "per_page" in p:   # the queues of one page of the overview
        names = st.board.names_page(p.get("page", 1), p.get("per_page", QUEUES_PER_PAGE),
                                    match=p.get("match"))[3]
    return ok({"minutes": st.board.chart(minutes, p.get("queue") or None, names)})


@api_read
def api_jobs(request: Request, st: WebState) -> Response:
    p = request.query_params
    return ok(st.board.jobs(p.get("queue"), p.get("status") or JobStatus.QUEUED, p.get("priority"),
                            p.get("function"), p.get("page", 1), p.get("per_page", 50),
                            p.get("start")))


@api_read
def api_job(request: Request, st: WebState) -> Response:
    return ok(st.board.job(request.path_params["id"], request.query_params.get("queue")))


# -- actions ---------------------------------------------------------------------------


@api_action
async def api_priority(request: Request, st: WebState, who: str) -> Response:
    data = await body(request)
    if "priority" not in data:
        raise ApiError(400, 'give {"priority": N} (-1023..1023)')
    return ok(await run(st.board.set_priority, who, request.path_params["id"], data["priority"],
                        request.query_params.get("queue")))


#: ``POST /api/v1/jobs/{id}/{action}``: the ``Dashboard`` method of each action
JOB_ACTIONS = {"requeue": "requeue", "cancel": "cancel", "hold": "hold", "release": "release",
               "run-now": "run_now", "stop": "stop"}


@api_action
async def api_job_action(request: Request, st: WebState, who: str) -> Response:
    action = request.path_params["action"]
    if action not in JOB_ACTIONS:
        raise ApiError(404, f"no action {action!r} (requeue, cancel, stop, hold, release, "
                            "run-now)")
    return ok(await run(getattr(st.board, JOB_ACTIONS[action]), who, request.path_params["id"],
                        request.query_params.get("queue")))


@api_action
async def api_delete_job(request: Request, st: WebState, who: str) -> Response:
    return ok(await run(st.board.delete, who, request.path_params["id"],
                        request.query_params.get("queue")))


@api_action
async def api_requeue_failed(request: Request, st: WebState, who: str) -> Response:
    data = await body(request)
    ids = data.get("ids")
    if ids is not None and (not isinstance(ids, list)
                            or not all(isinstance(i, str) for i in ids)):
        raise ApiError(400, '"ids" must be a list of job ids (omit it for all failed jobs)')
    return ok(await run(st.board.requeue_failed, who, request.path_params["q"], ids))


@api_action
async def api_queue_pause(request: Request, st: WebState, who: str) -> Response:
    paused = request.path_params["action"] == "pause"
    if request.path_params["action"] not in ("pause", "unpause"):
        raise ApiError(404, "pause or unpause")
    return ok(await run(st.board.pause, who, request.path_params["q"], paused))


@api_action
async def api_max_active(request: Request, st: WebState, who: str) -> Response:
    data = await body(request)
    if "max_active" not in data:
        raise ApiError(400, 'give {"max_active": N} (N >= 1, or null for no cap)')
    return ok(await run(st.board.max_active, who, request.path_params["q"], data["max_active"]))


@api_action
async def api_rate_limit(request: Request, st: WebState, who: str) -> Response:
    data = await body(request)
    if "rate" not in data:
        raise ApiError(400, 'give {"rate": "10/s"} (or null to remove; "scope": "queue", '
                            '"every" or "group" with "group": name)')
    return ok(await run(st.board.rate_limit, who, request.path_params["q"], data["rate"],
                        str(data.get("scope") or "queue"), str(data.get("group") or "")))


@api_action
async def api_cron_add(request: Request, st: WebState, who: str) -> Response:
    data = await body(request)
    for key in ("name", "schedule", "func", "timezone", "queue"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ApiError(400, f"{key} must be a string")
    fields = {k: data.get(k) for k in ("name", "schedule", "func", "timezone", "priority")}
    for key, kind in (("args", list), ("kwargs", dict)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise ApiError(400, f"{key} must be a JSON {'list' if kind is list else 'object'}")
        fields[key] = json.dumps(data.get(key) or kind())
    return ok(await run(st.board.cron_add, who, fields, data.get("queue")), 201)


@api_action
async def api_suspend(request: Request, st: WebState, who: str) -> Response:
    return ok(await run(st.board.suspend, who, request.url.path.endswith("/suspend")))


@api_action
async def api_shutdown(request: Request, st: WebState, who: str) -> Response:
    return ok(await run(st.board.shutdown_worker, who, request.path_params["name"],
                        request.query_params.get("mode") or "warm"))


@api_action
async def api_cron_action(request: Request, st: WebState, who: str) -> Response:
    action = request.path_params["action"]
    if action == "run":
        return ok(await run(st.board.cron_run_now, who, request.path_params["name"],
                            request.query_params.get("queue")))
    if action not in ("pause", "resume"):
        raise ApiError(404, "pause, resume or run")
    return ok(await run(st.board.cron, who, request.path_params["name"], action,
                        request.query_params.get("queue")))


@api_action
async def api_cron_delete(request: Request, st: WebState, who: str) -> Response:
    return ok(await run(st.board.cron, who, request.path_params["name"], "remove",
                        request.query_params.get("queue")))


# -- ids and names with a "/" (made before they were refused at creation) -----------------


async def _with(request: Request, endpoint: Callable[[Request], Any], **params: str) -> Any:
    """``endpoint`` called with ``params`` as its path parameters (sync ones in the pool)."""
    if not all(params.values()):
        raise ApiError(404, "not found")
    request.scope["path_params"] = {**request.path_params, **params}
    if inspect.iscoroutinefunction(endpoint):
        return await endpoint(request)
    return await run_in_threadpool(endpoint, request)


async def api_job_slashed(request: Request) -> Any:
    """``/api/v1/jobs/{rest:path}``, matched after every other route: a job id holding a
    ``/``, with what follows it (``/live``, ``/priority``, ``/<action>``) as above."""
    rest = request.path_params["rest"]
    if request.method == "GET":
        if rest.endswith("/live"):
            return await _with(request, live.api_job_live, id=rest[:-len("/live")])
        return await _with(request, api_job, id=rest)
    if request.method == "DELETE":
        return await _with(request, api_delete_job, id=rest)
    head, _, tail = rest.rpartition("/")
    if request.method == "PUT":
        if tail != "priority":
            raise ApiError(404, "not found")
        return await _with(request, api_priority, id=head)
    return await _with(request, api_job_action, id=head, action=tail)


async def api_cron_slashed(request: Request) -> Any:
    """``/api/v1/cron/{rest:path}``: a cron name holding a ``/``."""
    rest = request.path_params["rest"]
    if request.method == "DELETE":
        return await _with(request, api_cron_delete, name=rest)
    head, _, tail = rest.rpartition("/")
    return await _with(request, api_cron_action, name=head, action=tail)


#: matched after every other route (app.py)
SLASHED = [
    Route("/api/v1/jobs/{rest:path}", api_job_slashed, methods=["GET", "PUT", "POST", "DELETE"]),
    Route("/api/v1/cron/{rest:path}", api_cron_slashed, methods=["POST", "DELETE"]),
]


#: in the order they are matched (after the cross-queue and live routes)
ROUTES = [
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
    Route("/api/v1/workers/{name}/shutdown", api_shutdown, methods=["POST"]),
    Route("/api/v1/cron/{name}/{action}", api_cron_action, methods=["POST"]),
    Route("/api/v1/cron/{name}", api_cron_delete, methods=["DELETE"]),
]
