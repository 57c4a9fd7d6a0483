"""Hook points of the worker loop, and what a hook is given.

The worker loop only claims, forks, waits and records. Everything else —
the resource governor, the event log, metrics, systemd notification, the
reaper, cron — hangs off these hooks. A hook must be cheap and must never
raise into the loop: the worker logs and swallows a hook's exception (a
broken metrics exporter must not stop jobs).

A hook gets the worker as a :class:`WorkerContext` (what a middleware may
read or ask of it) and, after a job, its :class:`Outcome`. Both live here, in
the bottom layer, so the middleware and the event log depend on this contract,
not on the runtime that implements it (``fusionworker.runtime.worker.Worker``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

# ``ok`` or a failure reason: one vocabulary with FailureReason (vocabulary.py)
from .vocabulary import OutcomeReason as OutcomeReason

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from .config import Settings
    from .job import Job
    from .keys import Keys
    from .redis_client import RedisClient


class OutcomeStatus(StrEnum):
    """What became of an attempt (``Outcome.status``; also the ``status`` argument of
    ``finish.lua`` and the name of the outcome events)."""

    FINISHED = "finished"    #: the job returned; its result is stored
    RETRY = "retry"          #: it failed and is scheduled again (backoff)
    FAILED = "failed"        #: it failed for good: dead-letter
    REQUEUED = "requeued"    #: given back unstarted (cold shutdown, lease): not counted


@dataclass
class Outcome:
    """What the worker recorded for one attempt."""

    status: OutcomeStatus
    reason: OutcomeReason
    duration: float = 0.0
    result: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    retry_delay: float | None = None
    recorded: bool = True    # False: the attempt's token was stale (reaped meanwhile)
    #: the job's last progress/meta, written with the outcome (runtime/progress_store.py)
    progress_fields: list[str] = field(default_factory=list)
    #: a final failure: why it was not retried, in words (the worker logs it)
    not_retried: str | None = None
    #: the outcome was recorded and its event, which finish.lua writes, was not: why
    #: (a stream or history key of another type); the event log counts it dropped
    event_lost: str | None = None

    def __post_init__(self) -> None:
        # text stays accepted (``Outcome(status="retry", reason="exception")``)
        if type(self.status) is not OutcomeStatus:   # (a member: nothing to convert)
            self.status = OutcomeStatus(self.status)
        self.reason = OutcomeReason.read(self.reason)   # a middleware's own reason too


class Connected(Protocol):
    """Something that reads one fusionworker Redis: its client and its settings (the
    worker as a hook sees it, what ``info`` reads)."""

    @property
    def connection(self) -> RedisClient: ...

    @property
    def settings(self) -> Settings: ...


class WorkerContext(Connected, Protocol):
    """The worker as a hook sees it (``fusionworker.worker.Worker`` implements it)."""

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def keys(self) -> Keys: ...

    @property
    def queue_names(self) -> Sequence[str]: ...

    @property
    def middleware(self) -> Sequence[Middleware]: ...

    def request_stop(self, mode: str = "warm") -> None:
        """Ask the loop to stop: ``warm`` (let running jobs finish) or ``cold``."""


class Middleware:
    """Base class: override the hooks you need."""

    def on_start(self, worker: WorkerContext) -> None:
        """The worker registered itself and is about to take jobs."""

    def before_claim(self, worker: WorkerContext) -> str | None:
        """Return a reason (e.g. ``"throttled: RAM at 93.1%"``) to claim nothing now."""
        return None

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        """A job was claimed and its horse is being forked."""

    def on_horse_tick(self, worker: WorkerContext, job: Job[Any], horse_pid: int) -> str | None:
        """Called about once a second while a horse runs.

        Return a reason (``"memory"``) to kill the horse and fail the job with it.
        """
        return None

    def on_progress(self, worker: WorkerContext, job: Job[Any], progress: float,
                    message: str | None) -> None:
        """A running job's progress was written to its record (``current_job()``;
        rate-limited: at most once per ``progress_interval`` per job)."""

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        """The job's outcome was recorded (finished, retry scheduled, or failed)."""

    def on_job_reaped(self, worker: WorkerContext, job: Job[Any], outcome: str) -> None:
        """The reaper (running in ``worker``) gave back a job whose worker died.

        ``outcome`` is ``"requeued"`` (back on its queue, attempt counted) or
        ``"abandoned"`` (attempts used up: failed for good). The job's
        ``requeued``/``abandoned`` event is already emitted. Use this hook
        instead of looking for another middleware with ``isinstance``.
        """

    def on_tick(self, worker: WorkerContext) -> None:
        """Called about once a second by the worker loop, busy or idle."""

    def on_stop(self, worker: WorkerContext) -> None:
        """The worker is shutting down (after its last job)."""

    def reload(self, worker: WorkerContext, settings: Settings) -> None:
        """SIGHUP: the config file was read again; take what may change live."""

    def describe(self) -> dict[str, Any]:
        """Fields this middleware adds to the worker's heartbeat hash."""
        return {}
