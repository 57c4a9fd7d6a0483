"""How the dashboard answers an error: JSON ``{"error": "..."}`` under ``/api/``,
a page elsewhere, never a traceback (an unexpected error is logged)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import redis
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from .. import __version__
from .service import ApiError
from .state import state

if TYPE_CHECKING:  # pragma: no cover
    from starlette.types import ExceptionHandler

log = logging.getLogger("fusionworker.web")


def error_page(request: Request, status: int, message: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    st = state(request)
    html = st.env.get_template("error.html").render(
        status=status, error_text=message, user=None, read_only=st.read_only,
        version=__version__, path=request.url.path, message=None, error=None, csrf="",
        redis_url=None, auth_on=st.authn.configured)
    return HTMLResponse(html, status_code=status)


async def on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_page(request, exc.status, exc.message)


async def on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: "not found", 405: "method not allowed"}.get(exc.status_code, str(exc.detail))
    return error_page(request, exc.status_code, message)


async def on_redis(request: Request, exc: Exception) -> Response:
    log.warning("web: Redis error on %s: %s", request.url.path, type(exc).__name__)
    return error_page(request, 503, f"cannot reach Redis at {state(request).masked}")


async def on_refused(request: Request, exc: Exception) -> Response:
    """Redis answered a command with an error: most often a key under the prefix that
    holds another type than fusionworker writes there (written by another program or
    by hand); the answer says which command, and so which key."""
    said = str(exc)[:300]
    log.error("web: Redis refused a command on %s: %s", request.url.path, said)
    return error_page(request, 500, f"Redis refused a command ({said}): a key under this "
                                    "prefix may hold another type than fusionworker writes")


async def on_error(request: Request, exc: Exception) -> Response:
    log.error("web: error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_page(request, 500, "internal error (see the dashboard's log)")


HANDLERS: dict[Any, ExceptionHandler] = {
    ApiError: on_api_error, HTTPException: on_http,
    redis.ConnectionError: on_redis, redis.TimeoutError: on_redis,
    redis.ResponseError: on_refused, Exception: on_error,
}
