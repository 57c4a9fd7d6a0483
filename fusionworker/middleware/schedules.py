"""Schedules declared in code, registered like jobs: Celery's ``beat_schedule``, arq's
``cron_jobs``, Huey's ``@periodic_task``.

::

    # app/tasks.py (a module the worker imports: worker --import app.tasks)
    import fusionworker

    @fusionworker.periodic("*/5 * * * *", queue="reports")
    def refresh_totals() -> None:
        ...

    fusionworker.schedule("nightly-cleanup", "0 3 * * *", "app.tasks:cleanup",
                          timezone="Europe/Berlin")

A declaration is kept in this process only (like ``@job``). A worker, at start,
writes each declared schedule as a cron entry (``cron.register``) unless an entry
of that name on that queue already says the same: N workers starting with the same
code write it once between them (a write that two of them make at the same moment
writes the same definition), and a worker started later does not move the entry's
next run. A declaration whose definition changed replaces the entry (its pause
state and run history kept). Runs are then the cron entries' own: exactly one
enqueue per due time however many workers serve the queue. An entry removed from
the code is not removed from Redis: ``fusionworker cron remove NAME``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from ..core import codec, cron
from ..core.functions import func_ref
from ..core.hooks import Middleware

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.connection import RedisClient
    from ..core.hooks import WorkerContext

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Schedule:
    """One schedule declared in code (:func:`periodic`, :func:`schedule`)."""

    name: str
    cron: str
    func: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    timezone: str = "UTC"
    catch_up: str = "skip"
    allow_overlap: bool = False


#: (queue, name) -> the schedule declared in this process
_DECLARED: dict[tuple[str, str], Schedule] = {}


def schedule(name: str, cron_expr: str, func: str | Callable[..., Any], *,
             args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
             queue: str = "default", timezone: str = "UTC", catch_up: str = "skip",
             allow_overlap: bool = False) -> Schedule:
    """Declare cron entry ``name``: run ``func`` on ``cron_expr`` (what ``cron add``
    takes); every worker that imported this module registers it at start. Checked now
    (the schedule, the zone, the arguments' encoding): a bad one raises at import."""
    given: object = cron_expr     # Celery beat's habit: a number of seconds, a timedelta
    if isinstance(given, (int, float, timedelta)) and not isinstance(given, bool):
        raise cron.InvalidSchedule(_interval_hint(given))
    cron.check_schedule(cron_expr, timezone)
    if catch_up not in cron.CATCH_UP_MODES:
        raise cron.InvalidSchedule(f"catch_up must be one of {', '.join(cron.CATCH_UP_MODES)}")
    codec.dumps(list(args), where="args")
    codec.dumps(dict(kwargs or {}), where="kwargs")
    found = Schedule(name, cron_expr, func_ref(func), tuple(args), dict(kwargs or {}), queue,
                     timezone, catch_up, allow_overlap)
    _DECLARED[(queue, name)] = found
    return found


def _interval_hint(every: float | timedelta) -> str:
    """The refusal of an interval (Celery beat's ``30.0`` or ``timedelta``): the cron
    expression of the same period where one exists (it divides a minute or an hour)."""
    secs = every.total_seconds() if isinstance(every, timedelta) else float(every)
    text = f"an interval ({secs:g} s) is not a schedule here: give a cron expression"
    whole = int(secs)
    if whole == secs and 0 < whole < 60 and 60 % whole == 0:
        return f"{text}, '* * * * * */{whole}' for every {whole} s (seconds last)"
    if whole == secs and whole % 60 == 0 and 0 < whole // 60 < 60 and 60 % (whole // 60) == 0:
        return f"{text}, '*/{whole // 60} * * * *' for every {whole // 60} min"
    return (f"{text} (5 fields, minute hour day month weekday, or 6 with seconds last), "
            "e.g. '*/5 * * * *'")


def periodic(cron_expr: str, *, name: str | None = None, queue: str = "default",
             args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
             timezone: str = "UTC", catch_up: str = "skip", allow_overlap: bool = False,
             **job_options: Any) -> Callable[[F], Any]:
    """Decorator: register the function as a job (``@job(queue=..., **job_options)``)
    and declare its schedule (named after the function unless ``name`` is given)."""
    from ..core.registry import register

    def declare(func: F) -> Any:
        handle = register(func, queue=queue, **job_options)
        schedule(name or func.__name__, cron_expr, handle.ref, args=args, kwargs=kwargs,
                 queue=queue, timezone=timezone, catch_up=catch_up,
                 allow_overlap=allow_overlap)
        return handle
    return declare


def declared() -> list[Schedule]:
    """The schedules declared in this process, by queue and name."""
    return [_DECLARED[key] for key in sorted(_DECLARED)]


def _same(entry: cron.CronEntry, wanted: Schedule) -> bool:
    return (entry.schedule, entry.func, list(entry.args), entry.kwargs, entry.timezone,
            entry.catch_up, entry.allow_overlap) == (
        wanted.cron, wanted.func, list(wanted.args), wanted.kwargs, wanted.timezone,
        wanted.catch_up, wanted.allow_overlap)


def ensure_declared(connection: RedisClient, settings: Settings,
                    schedules: Sequence[Schedule] | None = None) -> list[str]:
    """Write each declared schedule whose entry is missing or says otherwise; the names
    written. An entry that says the same is left alone (its next run unmoved)."""
    written = []
    for wanted in declared() if schedules is None else schedules:
        try:
            if _same(cron.get_entry(connection, settings, wanted.name, wanted.queue), wanted):
                continue
        except cron.NoSuchCronEntry:
            pass
        cron.register(connection, settings, wanted.name, wanted.cron, wanted.func,
                      args=wanted.args, kwargs=wanted.kwargs, queue=wanted.queue,
                      timezone=wanted.timezone, catch_up=wanted.catch_up,
                      allow_overlap=wanted.allow_overlap)
        written.append(wanted.name)
    return written


class DeclaredSchedules(Middleware):
    """At the worker's start: :func:`ensure_declared` (a failure is logged: the worker
    runs on, and the next start tries again)."""

    def on_start(self, worker: WorkerContext) -> None:
        if not _DECLARED:
            return
        try:
            written = ensure_declared(worker.connection, worker.settings)
        except Exception as exc:  # noqa: BLE001 - a schedule never stops the worker
            log.error("Worker %s: schedules declared in code not registered: %s: %s",
                      worker.name, type(exc).__name__, exc)
            return
        if written:
            log.info("Worker %s registered the schedule(s) declared in code: %s",
                     worker.name, ", ".join(written))
        _say_unserved(worker)


def _say_unserved(worker: WorkerContext) -> None:
    """A warning per declared schedule whose queue neither this worker nor any live one
    serves: its entry is run by the workers of its queue, so it enqueues nothing yet
    (Celery's beat enqueues whoever consumes; a typo in ``queue=`` would be silent)."""
    served = set(worker.queue_names)
    missing = [s for s in declared() if s.queue not in served]
    if not missing:
        return
    try:
        from ..core.worker_list import live_workers
        for info in live_workers(worker.connection, settings=worker.settings):
            served.update(info.queues)
    except Exception:  # noqa: BLE001 - a warning never stops the worker
        return
    for s in missing:
        if s.queue not in served:
            log.warning("Schedule %r enqueues on queue %r, which no live worker serves: "
                        "its runs are made by a worker of that queue, so none is made yet",
                        s.name, s.queue)


__all__ = ["DeclaredSchedules", "Schedule", "declared", "ensure_declared", "periodic",
           "schedule"]
