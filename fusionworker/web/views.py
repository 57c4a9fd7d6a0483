"""The HTML pages of one queue, job and the overview, the login, and ``/action``,
where every button and form of the pages posts (read-only and CSRF checked
there; :func:`actions.dispatch` makes the call). The cross-queue pages are in
``pages.py``."""

from __future__ import annotations

import logging
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from .. import __version__
from ..core.job import JobStatus
from ..core.queue import find_queue_of
from . import auth, listings
from .actions import dispatch
from .guard import check_login
from .service import QUEUES_PER_PAGE, STATUSES, ApiError
from .state import WebState, run, signed_in, state

log = logging.getLogger("fusionworker.web")


@signed_in
def overview(request: Request, st: WebState, who: auth.Identity) -> Response:
    board = st.board
    p = request.query_params
    listing = board.queue_page(p.get("page", 1), p.get("per_page", QUEUES_PER_PAGE),
                               match=p.get("match"))
    names = [q["queue"] for q in listing["queues"]]
    return st.page(request, "overview.html", who, queues=listing["queues"], listing=listing,
                   workers=board.workers(), suspended=board.suspended(),
                   chart=board.chart(60, names=names))


@signed_in
def queue_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    board = st.board
    name = request.path_params["q"]
    board.queue(name)   # an invalid or unknown name: its error page (never a redirect)
    p = request.query_params
    names = board.queue_names()
    status = p.get("status") or JobStatus.QUEUED
    try:
        listing = board.jobs(name, status, p.get("priority"), p.get("function"),
                             p.get("page", 1), p.get("per_page", 50), p.get("start"))
    except ApiError as exc:
        if exc.status == 404:
            raise
        return RedirectResponse(f"/queues/{quote(name)}?" + urlencode({"error": exc.message}), 303)
    stats = board.queue(name).stats()
    live = {k: p.get(k) for k in ("priority", "function", "page", "per_page") if p.get(k)}
    live_url = f"/api/v1/queues/{quote(name)}/live?" + urlencode({"status": status, **live})
    return st.page(request, "queue.html", who, q=stats, listing=listing, statuses=STATUSES,
                   counts=board.status_counts(name), live_url=live_url,
                   seen=listing["fingerprint"] or "",
                   names=names, failed_page=False, status=status,
                   filters={k: p.get(k) or "" for k in ("priority", "function")})


@signed_in
def job_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    job = st.board.job(request.path_params["id"], request.query_params.get("queue"))
    return st.page(request, "job.html", who, job=job, seen=job["fingerprint"])


@signed_in
def scheduled_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    board = st.board
    rows = listings.scheduled(st.r, st.settings.prefix, board.queue_names(), retries=False)
    return st.page(request, "scheduled.html", who, listings=rows["queues"],
                   cron=board.cron_entries(), now=board.now())


@signed_in
def search_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    text = (request.query_params.get("q") or "").strip()
    if not text:
        return RedirectResponse("/", 303)
    if len(text) > 200:
        raise ApiError(400, "search for at most 200 characters")
    if listings.looks_like_job_id(text):
        where = find_queue_of(st.r, text, st.settings.prefix)
        if where is not None:
            return RedirectResponse(f"/jobs/{quote(text)}?queue={quote(where)}", 303)
    result = listings.search_functions(st.r, st.settings.prefix, st.board.queue_names(), text)
    return st.page(request, "search.html", who, result=result)


@signed_in
def workers_view(request: Request, st: WebState, who: auth.Identity) -> Response:
    return st.page(request, "workers.html", who, workers=st.board.workers())


async def login(request: Request) -> Response:
    """The login form; its post carries the form's token and, like every state change,
    comes from this site (``guard.py``); wrong credentials count against the client."""
    st = state(request)
    nxt = request.query_params.get("next") or "/"
    error, status, headers = None, 200, None
    if request.method == "POST":
        form = await request.form()
        nxt = str(form.get("next") or "/")
        client = request.client.host if request.client else "?"
        if not st.authn.login_token_valid(form.get("csrf")):
            error, status = "the login form expired: try again", 403
        else:
            sid = await check_login(st, client, token=str(form.get("token") or ""),
                                    user=str(form.get("user") or ""),
                                    password=str(form.get("password") or ""))
            if isinstance(sid, str):
                response = RedirectResponse(auth.safe_next(nxt), 303)
                response.set_cookie(auth.SESSION_COOKIE, sid, httponly=True, samesite="strict",
                                    secure=st.secure_cookies(request))
                return response
            if isinstance(sid, int):
                error, status = f"too many wrong attempts: try again in {sid} s", 429
                headers = {"Retry-After": str(sid)}
            else:
                log.warning("web: refused login from %s", client)
                error, status = "wrong token, user or password", 401
    html = st.env.get_template("login.html").render(
        next=auth.safe_next(nxt), error=error, user=None, read_only=st.read_only,
        version=__version__, password_login=bool(st.authn.user and st.authn.password_hash),
        path="/login", message=None, redis_url=None, csrf=st.authn.login_token(),
        auth_on=st.authn.configured)
    return HTMLResponse(html, status_code=status, headers=headers)


async def logout(request: Request) -> Response:
    """Ends the session (with its CSRF token, from this site: ``guard.py``)."""
    st = state(request)
    who = st.identify(request)
    if who is not None and who.method == "session":
        form = await request.form()     # the page's form field, or a script's header
        token = form.get("csrf") or request.headers.get("x-csrf-token")
        if not st.csrf_valid(request, who, token):
            raise ApiError(403, "CSRF token missing or wrong: reload the page and try again")
        st.authn.logout(request.cookies.get(auth.SESSION_COOKIE))
    response = RedirectResponse("/login", 303)
    response.delete_cookie(auth.SESSION_COOKIE)
    return response


async def form_action(request: Request) -> Response:
    """Every button and form of the pages posts here (CSRF checked)."""
    st = state(request)
    who = st.identify(request)
    if who is None:
        return RedirectResponse("/login", 303)
    form = await request.form()
    back = auth.safe_next(str(form.get("next") or "/"))
    if st.read_only:
        raise ApiError(403, "the dashboard runs read-only: actions are refused")
    if not st.csrf_valid(request, who, form.get("csrf")):
        raise ApiError(403, "CSRF token missing or wrong: reload the page and try again")
    action = str(form.get("action") or "")
    queue = str(form.get("queue") or "") or None
    job_id = str(form.get("job_id") or "")
    ids = [str(i) for i in form.getlist("ids") if i]
    try:
        message = await run(dispatch, st.board, who.user, action, queue, job_id, ids, form)
    except ApiError as exc:
        return RedirectResponse(with_param(back, "error", exc.message), 303)
    return RedirectResponse(with_param(_back_after(action, queue, job_id, back), "msg", message),
                            303)


def _back_after(action: str, queue: str | None, job_id: str, back: str) -> str:
    """Where a done action returns: ``back``, unless the page it came from is gone."""
    if action == "delete" and job_id:
        return f"/queues/{quote(queue)}" if queue else "/"
    if action == "worker-shutdown":  # its page is gone once it stops: the list says so
        return "/workers"
    return back


def with_param(target: str, key: str, value: str) -> str:
    """``target`` with ``key=value`` as its only ``msg``/``error`` query parameter."""
    base = target.split("?", 1)
    query = [part for part in (base[1].split("&") if len(base) > 1 else [])
             if part and not part.startswith(("msg=", "error="))]
    query.append(urlencode({key: value}))
    return base[0] + "?" + "&".join(query)


#: a job whose id holds a "/" (matched after every other route)
SLASHED = [Route("/jobs/{id:path}", job_view)]

#: in the order they are matched (after the API routes)
ROUTES = [
    Route("/", overview),
    Route("/queues/{q}", queue_view),
    Route("/jobs/{id}", job_view),
    Route("/scheduled", scheduled_view),
    Route("/workers", workers_view),
    Route("/search", search_view),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/action", form_action, methods=["POST"]),
]
