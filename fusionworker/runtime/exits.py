"""How a horse ended, read by the worker: its report, or the way it died.

A :class:`HorseExit` is what became of one attempt before the retry policy
(recorder.py) turns it into an outcome. It comes from the horse's
:class:`~fusionworker.runtime.protocol.HorseReport` (:func:`exit_from_report`:
every field is job output, made safe text here), from the kill the worker
ordered (:func:`killed_exit`: timeout, memory, lost, shutdown, lease), or,
with no report, from its wait status (:func:`exit_from_status`): a fatal
signal (SIGSEGV -> ``segfault``, SIGBUS/SIGILL/SIGFPE/SIGABRT -> ``crash``,
SIGKILL or SIGTERM from outside -> ``killed``, e.g. the kernel's OOM killer)
or an exit without a report (``os._exit`` in the job -> ``exit``).
"""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import dataclass
from typing import Any

from ..core.functions import verify_loaded
from ..core.job import FailureReason, Job, safe_text
from ..exceptions import FunctionNotAllowed, InvalidFunction
from .protocol import HorseReport

_CRASH_SIGNALS = {signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}


@dataclass
class HorseExit:
    """What became of one horse, before retry policy is applied."""

    ok: bool
    reason: FailureReason | None     # None: the job returned (``ok``)
    result_json: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    retryable: bool = False
    retry_delay: float | None = None
    duration: float = 0.0
    #: the job's final progress/meta (``current_job()``), None if it set none (progress.py)
    progress: dict[str, Any] | None = None
    #: the horse died because the fork server it shared with other jobs died: the job is
    #: given back uncounted, up to SHARED_DEATHS_MAX times (recorder.decide)
    shared: bool = False


def _text(value: Any) -> str | None:
    """A report field as safe text: a lone surrogate in a job's error, traceback or
    result must not crash the parent when it is encoded for Redis, the logs, the
    events or a webhook. None stays None; a field that is not text (a report the job
    wrote itself) is its JSON, and one too deep even for that is named, not shown."""
    if value is None:
        return None
    if not isinstance(value, str):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            value = f"<a {type(value).__name__} too deep to show>"
    return safe_text(value)


#: the reasons a horse's own report may give: what its job did. The others are the
#: worker's to decide (a lease, a cold shutdown, a mate's kill give the job back
#: uncharged: recorder.py), so a report that claims one is a job's forgery.
HORSE_REASONS = frozenset({FailureReason.EXCEPTION, FailureReason.TIMEOUT,
                           FailureReason.REFUSED, FailureReason.STOPPED})


def exit_from_report(report: HorseReport, duration: float) -> HorseExit:
    """The :class:`HorseExit` a horse's report stands for. The report is untrusted (the
    job may have written it): a reason only the worker gives is the job's failure."""
    ok = report.ok is True
    claimed = report.reason if isinstance(report.reason, str) else ""
    reason = None if ok else FailureReason.read(claimed or FailureReason.EXCEPTION)
    message = _text(report.error_message)
    if reason is not None and reason not in HORSE_REASONS:
        message = (f"the job's report claimed the reason {safe_text(claimed[:40])!r}, which "
                   f"only the worker gives: taken as the job's failure; {message}")
        reason = FailureReason.EXCEPTION
    delay = report.retry_delay
    return HorseExit(
        ok=ok, reason=reason,
        result_json=_text(report.result), error_type=_text(report.error_type),
        error_message=message, traceback=_text(report.traceback),
        retryable=report.retryable is True,
        retry_delay=delay if isinstance(delay, (int, float)) and not isinstance(delay, bool)
        and math.isfinite(delay) and delay >= 0 else None, duration=duration,
        progress=report.progress if isinstance(report.progress, dict) else None,
    )


def exit_from_status(status: int, duration: float) -> HorseExit:
    """A horse that died without a report: what its wait status says."""
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status))
        if sig == signal.SIGSEGV:
            reason, what = FailureReason.SEGFAULT, "segmentation fault"
        elif sig in _CRASH_SIGNALS:
            reason, what = FailureReason.CRASH, "crashed"
        else:
            reason, what = FailureReason.KILLED, "killed from outside (OOM killer?)"
        return HorseExit(ok=False, reason=reason, error_type="HorseDied",
                         error_message=f"work horse died of {sig.name} ({what})",
                         duration=duration)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return HorseExit(ok=False, reason=FailureReason.EXIT, error_type="HorseExited",
                     error_message=f"work horse exited with status {code} before reporting "
                                   "a result (os._exit() in the job?)",
                     duration=duration)


#: The error a kill of ours gives the attempt, by reason.
_KILLED = {
    FailureReason.MEMORY: ("HorseMemoryExceeded",
                           "work horse held more memory of its own than --max-horse-memory "
                           "(FUSIONWORKER_MAX_HORSE_MEMORY) allows and was killed; the "
                           "worker's log names both figures"),
    FailureReason.LOST: ("JobLost", "the job was taken back (reaped or deleted) while it ran"),
    FailureReason.SHUTDOWN: ("WorkerShutdown", "cold shutdown of the worker interrupted the job"),
    FailureReason.STOPPED: ("JobStopped", "stopped on request (job stop): its horse was killed"),
    FailureReason.LEASE: ("LeaseExpired",
                          "the worker could not renew the job's lease in time (frozen "
                          "or cut off from Redis): its horse was killed"),
}


def killed_exit(reason: FailureReason, timeout: float, duration: float,
                report: HorseReport | None, lost_server: bool = False) -> HorseExit:
    """A horse we killed (``reason``), or whose fork server died under it."""
    if reason == FailureReason.TIMEOUT:
        error_type, message = ("JobTimeoutError",
                               f"job exceeded its timeout of {timeout:g} s and was killed")
    else:
        error_type, message = _KILLED.get(reason, ("HorseKilled", f"killed: {reason}"))
    if lost_server:
        error_type, message = "HorseKilled", "the fork server died while the job ran"
    if report is not None and report.reason in (FailureReason.TIMEOUT, FailureReason.STOPPED):
        error_type, message = report.error_type, report.error_message
    return HorseExit(ok=False, reason=reason, error_type=_text(error_type),
                     error_message=_text(message),
                     traceback=_text(report.traceback if report else None), duration=duration)


def unreadable_exit(size: int, duration: float) -> HorseExit:
    """A horse that exited after writing ``size`` bytes that are no report (the job wrote
    into its own report pipe, or replaced how the report is written)."""
    return HorseExit(ok=False, reason=FailureReason.EXIT, error_type="UnreadableReport",
                     error_message=f"work horse's report cannot be read ({size} bytes that "
                                   "are not a report: did the job write into its report "
                                   "pipe?)", duration=duration)


def horse_exit(report: HorseReport | None, status: int, duration: float, *,
               kill_reason: FailureReason | None = None, timeout: float = 0.0,
               lost_server: bool = False, unread: int = 0) -> HorseExit:
    """How the horse ended: killed by us (unless it reported success first), its
    report, or its wait status; ``unread``: bytes it wrote that are no report."""
    if kill_reason is not None and not (report is not None and report.ok):
        return killed_exit(kill_reason, timeout, duration, report, lost_server)
    if report is not None:
        return exit_from_report(report, duration)
    if unread and not os.WIFSIGNALED(status):
        return unreadable_exit(unread, duration)
    return exit_from_status(status, duration)


def refusal(job: Job[Any], allowed: tuple[str, ...]) -> HorseExit | None:
    """A bad job fails without a fork: a malformed record, a refused function (checked
    without importing anything, core/functions.py). None: it may run."""
    if job.failure_reason == FailureReason.MALFORMED:
        return HorseExit(ok=False, reason=FailureReason.MALFORMED, error_type=job.error_type,
                         error_message=job.error_message)
    try:
        verify_loaded(job.func, allowed)
    except (FunctionNotAllowed, InvalidFunction) as exc:
        return HorseExit(ok=False, reason=FailureReason.REFUSED, error_type=type(exc).__name__,
                         error_message=str(exc))
    except Exception:  # noqa: BLE001 - a module's own __getattr__ failing: the horse reports it
        return None
    return None
