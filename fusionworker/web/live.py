"""What the live pages poll. The job page and the queue pages send a digest of
what they show (``seen``); the answer carries something only when that changed,
so a viewer of an unchanged job costs one ``HGETALL`` per poll. See docs/web.md
("live") and ``bench/web.py`` for the Redis commands per viewer."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.job import JobStatus
from .auth import safe_next
from .state import JsonAnswer, state


def api_job_live(request: Request) -> Response:
    """Nothing new while the job's record is unchanged (one HGETALL), else the
    page's body rendered again."""
    st = state(request)
    board = st.board
    who = st.api_user(request)
    job_id = request.path_params["id"]
    name, seen = board.job_fingerprint(job_id, request.query_params.get("queue"))
    if seen == request.query_params.get("seen"):
        return JsonAnswer({"changed": False, "seen": seen})
    job = board.job(job_id, name)
    here = f"/jobs/{quote(job_id)}?" + urlencode({"queue": name})
    return JsonAnswer({"changed": True, "seen": job["fingerprint"],
                         "status": job["status"],
                         "html": st.fragment("job_body.html", request, who, here, job=job)})


def api_queue_live(request: Request) -> Response:
    """The counts, and the page's rows only when its ids changed (a listing
    filtered on record fields keeps its rows)."""
    st = state(request)
    board = st.board
    who = st.api_user(request)
    p = request.query_params
    name = request.path_params["q"]
    status = p.get("status") or JobStatus.QUEUED
    stats = board.queue(name).stats()
    here = safe_next(p.get("here") or f"/queues/{quote(name)}")
    filters = {k: p.get(k) or "" for k in ("priority", "function")}
    out: dict[str, Any] = {"counts": board.status_counts(name), "paused": stats["paused"],
                           "seen": None, "stats": st.fragment(
                               "queue_stats.html", request, who, here, q=stats)}
    # a listing read by a scan (a function filter, a priority off the queued set, the
    # stopped jobs of `failed`) keeps its rows: they come from the page's own `start`
    if (not filters["function"] and status != JobStatus.STOPPED
            and (not filters["priority"] or status == JobStatus.QUEUED)):
        listing = board.jobs(name, status, p.get("priority"), None, p.get("page", 1),
                             p.get("per_page", 50), None, unless=p.get("seen"))
        out["seen"] = listing["fingerprint"]
        if listing["jobs"] is not None:
            ctx = {"q": stats, "status": status, "listing": listing, "filters": filters,
                   "failed_page": False}
            out["rows"] = st.fragment("queue_rows.html", request, who, here, **ctx)
            out["pager"] = st.fragment("queue_pager.html", request, who, here, **ctx)
    return JsonAnswer(out)


#: matched before the API's ``/api/v1/jobs/{id}/{action}`` and ``/queues/{q}/{action}``
ROUTES = [Route("/api/v1/jobs/{id}/live", api_job_live, methods=["GET"]),
          Route("/api/v1/queues/{q}/live", api_queue_live, methods=["GET"])]
