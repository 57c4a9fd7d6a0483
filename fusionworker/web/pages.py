"""The cross-queue pages and their API: failed jobs of every queue (filters by
queue, function, error type and time), retries apart from delayed jobs,
batches, a batch, a worker. What each reads is in ``listings.py`` and
``details.py``; every read there is bounded."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..events import metrics_history
from . import auth, details, listings
from .service import QUEUES_PER_PAGE, ApiError, Dashboard, parse_int, shown
from .state import JsonAnswer, WebState, api_read, signed_in

#: the charts of all queues read the recorder's sums above this many queues (below,
#: the queues' own counts are added up: the same figures, and the ones recorded before
#: the sums were)
SUMMED_ABOVE = 100
#: a page offers a list of the queues to pick from up to this many (a name is typed
#: beyond)
PICKER_LIMIT = 500


def _float(value: Any, name: str) -> float | None:
    """A time in epoch seconds (a finite number), None when not given; else 400."""
    if value in (None, ""):
        return None
    try:
        number = float(value) if len(str(value)) <= 40 else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or abs(number) > 1e12:
        raise ApiError(400, f"{name} must be a time in epoch seconds, got {shown(value)}")
    return number


def failed_query(board: Dashboard, params: Any) -> dict[str, Any]:
    """The failed listing the page and ``GET /api/v1/failed`` show for ``params``."""
    queue = params.get("queue") or ""
    names = [board.queue(queue).name] if queue else board.queue_names()
    since_key = params.get("since") or ""
    if since_key not in listings.SINCE:
        raise ApiError(400, f"since must be one of {', '.join(k for k in listings.SINCE if k)}")
    back = listings.SINCE[since_key]
    since = board.now() - back if back else None
    function = (params.get("function") or "").strip()
    error_type = (params.get("error_type") or "").strip()
    size = parse_int(params.get("per_page", 50), "per_page", 1, 500)
    result = listings.failed(board.r, board.prefix, names, function=function,
                             error_type=error_type, since=since,
                             before=_float(params.get("before"), "before"), size=size)
    result["filters"] = {"queue": queue, "function": function, "error_type": error_type,
                         "since": since_key}
    return result


@signed_in
def failed_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    board = st.board
    result = failed_query(board, request.query_params)
    queue = result["filters"]["queue"]
    stats = board.queue(queue).stats() if queue else None
    names = board.queue_names()
    return st.page(request, "failed.html", who, result=result,
                   names=names if len(names) <= PICKER_LIMIT else [],
                   since_choices=[k for k in listings.SINCE if k], q=stats)


@api_read
def api_failed(request: Request, st: WebState) -> Response:
    return JsonAnswer(failed_query(st.board, request.query_params))


def _scheduled_kind(board: Dashboard, retries: bool) -> dict[str, Any]:
    return listings.scheduled(board.r, board.prefix, board.queue_names(), retries)


@signed_in
def retries_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    return st.page(request, "retries.html", who, result=_scheduled_kind(st.board, True))


@api_read
def api_scheduled(request: Request, st: WebState) -> Response:
    kind = request.query_params.get("kind") or "delayed"
    if kind not in ("delayed", "retries"):
        raise ApiError(400, "kind is delayed or retries")
    return JsonAnswer(_scheduled_kind(st.board, kind == "retries"))


def _batches_query(board: Dashboard, request: Request) -> dict[str, Any]:
    return listings.batches(board.r, board.prefix, board.queue_names(),
                            _float(request.query_params.get("before"), "before"),
                            parse_int(request.query_params.get("per_page", 50), "per_page",
                                      1, 500))


def batch_query(board: Dashboard, request: Request) -> dict[str, Any]:
    """A batch, its callback jobs and (up to ``MAX_REFS``) the jobs that ended."""
    batch_id = request.path_params["id"]
    queue = request.query_params.get("queue") or ""
    if not queue:
        raise ApiError(400, "queue is required (the batch's queue)")
    q = board.queue(queue)
    doc = listings.batch_docs(board.r, board.prefix, [(q.name, batch_id)])[0]
    if not doc["exists"]:
        raise ApiError(404, f"no batch {batch_id!r} in queue {q.name!r}")
    kinds = list(doc["callbacks"])
    found = details.statuses(board.r, board.prefix,
                             [f"{q.name}:{doc['callbacks'][k]}" for k in kinds])
    doc["callback_jobs"] = [{"kind": kind, **ref} for kind, ref in zip(kinds, found, strict=True)]
    refs: list[str] = []
    if "unreadable" not in doc:       # (its set of ended jobs may be what Redis refused)
        ended_key = q.qkeys.batch_ended(batch_id)
        refs = sorted(str(x) for x in board.r.srandmember(ended_key, details.MAX_REFS) or [])
    doc["ended_jobs"] = details.statuses(board.r, board.prefix, refs)
    return doc



def _worker_query(board: Dashboard, request: Request) -> dict[str, Any]:
    name = request.path_params["name"]
    doc = details.worker_detail(board.r, board.prefix, name)
    if doc is None:
        raise ApiError(404, f"no live worker {name!r}")
    return doc


def page_and_api(name: str, template: str, as_name: str,
                 query: Callable[[Dashboard, Request], Any],
                 ) -> tuple[Callable[[Request], Response], Callable[[Request], Response]]:
    """``<name>_view``, the page (``template``, given the query's document as ``as_name``),
    and ``api_<name>``, the API endpoint (the document as JSON), of one query: functions
    of this module, as every endpoint is (named so)."""
    def page(request: Request, st: WebState, who: auth.Identity) -> Response:
        return st.page(request, template, who, **{as_name: query(st.board, request)})

    def api(request: Request, st: WebState) -> Response:
        return JsonAnswer(query(st.board, request))
    page.__name__ = page.__qualname__ = f"{name}_view"
    api.__name__ = api.__qualname__ = f"api_{name}"
    return signed_in(page), api_read(api)


batches_view, api_batches = page_and_api("batches", "batches.html", "result", _batches_query)
batch_view, api_batch = page_and_api("batch", "batch.html", "batch", batch_query)
worker_view, api_worker = page_and_api("worker", "worker.html", "w", _worker_query)


def _history_query(board: Dashboard, request: Request) -> dict[str, Any]:
    p = request.query_params
    span = p.get("range") or "hour"
    if span not in metrics_history.RANGES:
        raise ApiError(400, "range is hour or day")
    queue = p.get("queue") or ""
    names: list[str] | None = [board.queue(queue).name] if queue else board.queue_names()
    if not queue and len(names or []) > SUMMED_ABOVE:
        names = None     # the sums the recorder keeps: one hash per bucket
    doc = metrics_history.history(board.r, board.prefix, names, span, board.now())
    doc["queue"] = queue or None
    return doc


@signed_in
def charts_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    board = st.board
    doc = _history_query(board, request)
    p = request.query_params
    page, size, names, shown = board.names_page(p.get("page", 1),
                                                p.get("per_page", QUEUES_PER_PAGE))
    per_queue = [{"queue": name, **metrics_history.history(
        board.r, board.prefix, [name], doc["range"], board.now())["total"]}
        for name in shown]
    pager = {"page": page, "per_page": size, "total": len(names),
             "pages": max(1, -(-len(names) // size))}
    return st.page(request, "charts.html", who, history=doc, per_queue=per_queue, pager=pager,
                   names=names if len(names) <= PICKER_LIMIT else [],
                   ranges=list(metrics_history.RANGES))


@api_read
def api_history(request: Request, st: WebState) -> Response:
    return JsonAnswer(_history_query(st.board, request))


#: in the order they are matched (first of all the routes)
ROUTES = [
    Route("/failed", failed_view), Route("/retries", retries_view),
    Route("/api/v1/failed", api_failed), Route("/api/v1/scheduled", api_scheduled),
    Route("/batches", batches_view), Route("/batches/{id}", batch_view),
    Route("/api/v1/batches", api_batches), Route("/api/v1/batches/{id}", api_batch),
    Route("/workers/{name}", worker_view), Route("/charts", charts_view),
    Route("/api/v1/workers/{name}", api_worker), Route("/api/v1/history", api_history),
]
