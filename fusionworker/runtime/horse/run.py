"""In the horse: run one job under the death penalty and say how it went.

:func:`run_job` resolves the job's function (every check of
``functions.resolve``, or the fork server's remembered resolution), calls it
(an awaitable it returns, e.g. from an ``async def`` job, runs to completion
in a fresh event loop), and turns whatever happened into a
:class:`~fusionworker.runtime.protocol.HorseReport`: the result as tagged
JSON, or the exception, its traceback and whether it is retryable. SIGALRM at
the job's timeout (the death penalty) raises in the job's code and becomes a
``timeout`` report; armed sooner, at the horse's lease deadline, when its lease
thread has not started (lease.py: it starts then, if the lease was renewed). It
never raises.
"""

from __future__ import annotations

import inspect
import signal
import sys
import traceback
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...core import codec
from ...core.functions import resolve
from ...core.job import FailureReason, Job, safe_text
from ...exceptions import FunctionNotAllowed, InvalidFunction, JobTimeoutError, Retry
from ..protocol import HorseReport
from . import lease

if TYPE_CHECKING:  # pragma: no cover
    from types import FrameType

#: the C module ``signal.py`` wraps: its ``signal()`` takes plain ints, without the enum
#: conversions whose pages every horse would copy (copy-on-write faults, horse/main.py)
_csignal = sys.modules["_signal"]


def is_retryable(exc: BaseException, retryable: Iterable[str]) -> bool:
    """Whether ``exc``'s class (or a base class) is named in ``retryable`` (``"*"``: any).
    A :class:`Retry` the job raised asks for a retry whatever the list names (Celery's
    ``self.retry()``); the job's ``max_retries`` still caps it."""
    if isinstance(exc, Retry):
        return True
    names = set(retryable)
    if "*" in names:
        return True
    return any(f"{cls.__module__}.{cls.__qualname__}" in names for cls in type(exc).__mro__)


def _describe(exc: BaseException) -> str:
    """``str(exc)``, even when the exception's own ``__str__`` raises."""
    try:
        return safe_text(str(exc))[:2000]
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the real error
        return f"<{type(exc).__name__} whose str() failed>"


#: FUSIONWORKER_MAX_RESULT_BYTES of the worker (0: none), set once by the process that
#: forks the horses (:func:`cap_results`): a larger result is refused here, in the horse,
#: so it never crosses the pipe
_result_cap = 0


def cap_results(limit: int) -> None:
    """Horses forked from this process refuse a result over ``limit`` bytes (0: none)."""
    global _result_cap
    _result_cap = max(0, int(limit))


def result_too_large(limit: int, result: str | None) -> str | None:
    """Why ``result`` (the encoded return value) may not be stored, or None."""
    if not limit or result is None or len(result) <= limit // 4:    # 4 bytes a char at most
        return None
    size = len(result.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return None
    return (f"the job's return value is {size} bytes of JSON; the limit is {limit} bytes "
            "(FUSIONWORKER_MAX_RESULT_BYTES): store large data elsewhere and return a "
            "reference. Nothing was stored.")


def _result_report(result: Any) -> HorseReport:
    """The report of a job that returned ``result``: its JSON, or why it cannot be sent."""
    if result is None:      # what most jobs return (an SMS sent): no encoder to run
        return HorseReport(ok=True, reason="ok", result="null")
    try:
        encoded = codec.dumps(result, where="the job's return value")
    except (TypeError, ValueError) as exc:   # codec.UnsupportedType is a TypeError
        return HorseReport(ok=False, reason=FailureReason.EXCEPTION,
                           error_type="ResultNotSerializable",
                           error_message=str(exc)[:2000], traceback="")
    too_large = result_too_large(_result_cap, encoded)
    if too_large:        # never retried: the same job returns the same value again
        return HorseReport(ok=False, reason=FailureReason.EXCEPTION, error_type="ResultTooLarge",
                           error_message=too_large, traceback="")
    return HorseReport(ok=True, reason="ok", result=encoded)


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if lease.on_alarm():      # the horse's lease deadline came first (lease.py)
        return
    raise JobTimeoutError("job exceeded its timeout")


def run_job(job: Job[Any], allowed: Iterable[str], retryable: Iterable[str],
            resolved: Mapping[str, Callable[..., Any]] | None = None) -> HorseReport:
    """Run the job in this process under the death penalty; return the report.

    ``resolved``: functions the fork server resolved already (forkserver/server.py),
    by reference. Never raises: every failure becomes a report. The job's own
    ``retry_on`` (when set) says what is retryable instead of ``retryable``.
    """
    if job.retry_on is not None:
        retryable = job.retry_on
    _csignal.signal(_csignal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, lease.alarm_after(max(job.timeout, 0.001)))
    try:
        try:
            func = (resolved.get(job.func) if resolved else None) or resolve(job.func, allowed)
        except (FunctionNotAllowed, InvalidFunction) as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return HorseReport(ok=False, reason=FailureReason.REFUSED,
                               error_type=type(exc).__name__, error_message=str(exc),
                               traceback="")
        result = call(func, job.args, job.kwargs)
        signal.setitimer(signal.ITIMER_REAL, 0)
        return _result_report(result)
    except JobTimeoutError:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return HorseReport(ok=False, reason=FailureReason.TIMEOUT, error_type="JobTimeoutError",
                           error_message=f"job exceeded its timeout of {job.timeout:g} s",
                           traceback=_format_exc(),
                           # RQ's Retry retries a timeout too; so does a retry_on naming it
                           retryable=is_retryable(JobTimeoutError(), retryable))
    except BaseException as exc:  # noqa: BLE001 - the horse reports everything, even SystemExit
        signal.setitimer(signal.ITIMER_REAL, 0)
        return HorseReport(ok=False, reason=FailureReason.EXCEPTION,
                           error_type=type(exc).__name__, error_message=_describe(exc),
                           traceback=_format_exc(), retryable=is_retryable(exc, retryable),
                           retry_delay=exc.delay if isinstance(exc, Retry) else None)


def call(func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Call the job function; an awaitable it returns (``async def``) is run to the end.

    Each awaited job gets a fresh event loop (``asyncio.run``): a horse runs one
    job, so nothing is shared with another job's loop. SIGALRM (the death
    penalty) interrupts the loop like any other code and the loop is closed.
    """
    result = func(*args, **kwargs)
    if _awaitable(result):
        # imported here, not at the top: the fork server (and so every horse) would map
        # asyncio and ssl, ~6 MiB, for sync jobs too (the server imports it once an
        # async def job ran: forkserver/server.py)
        import asyncio

        return asyncio.run(_awaited(result))
    return result


def _awaitable(value: Any) -> bool:
    """What ``await`` accepts: a coroutine, a generator-based coroutine, or an object whose
    type has ``__await__``. ``inspect.isawaitable`` says the same through the Awaitable
    ABC, whose caches every horse would write to (copy-on-write faults, each job)."""
    kind = type(value)
    if kind is types.CoroutineType:
        return True
    if kind is types.GeneratorType:
        return bool(value.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE)
    return getattr(kind, "__await__", None) is not None


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _format_exc() -> str:
    try:
        return safe_text(traceback.format_exc())
    except Exception:  # noqa: BLE001 - e.g. a __str__ that raises inside the traceback
        return ""
