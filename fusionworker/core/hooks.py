"""Hook points of the worker loop.

The worker loop only claims, forks, waits and records. Everything else —
the resource governor, the event log, metrics, systemd notification, the
reaper, cron — hangs off these hooks. A hook must be cheap and must never
raise into the loop: the worker logs and swallows a hook's exception (a
broken metrics exporter must not stop jobs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..worker import Outcome, Worker
    from .config import Settings
    from .job import Job


class Middleware:
    """Base class: override the hooks you need."""

    def on_start(self, worker: Worker) -> None:
        """The worker registered itself and is about to take jobs."""

    def before_claim(self, worker: Worker) -> str | None:
        """Return a reason (e.g. ``"throttled: RAM at 93.1%"``) to claim nothing now."""
        return None

    def after_claim(self, worker: Worker, job: Job[Any]) -> None:
        """A job was claimed and its horse is being forked."""

    def on_horse_tick(self, worker: Worker, job: Job[Any], horse_pid: int) -> str | None:
        """Called about once a second while a horse runs.

        Return a reason (``"memory"``) to kill the horse and fail the job with it.
        """
        return None

    def on_progress(self, worker: Worker, job: Job[Any], progress: float,
                    message: str | None) -> None:
        """A running job's progress was written to its record (``current_job()``;
        rate-limited: at most once per ``progress_interval`` per job)."""

    def after_finish(self, worker: Worker, job: Job[Any], outcome: Outcome) -> None:
        """The job's outcome was recorded (finished, retry scheduled, or failed)."""

    def on_job_reaped(self, worker: Worker, job: Job[Any], outcome: str) -> None:
        """The reaper (running in ``worker``) gave back a job whose worker died.

        ``outcome`` is ``"requeued"`` (back on its queue, attempt counted) or
        ``"abandoned"`` (attempts used up: failed for good). The job's
        ``requeued``/``abandoned`` event is already emitted. Use this hook
        instead of looking for another middleware with ``isinstance``.
        """

    def on_tick(self, worker: Worker) -> None:
        """Called about once a second by the worker loop, busy or idle."""

    def on_stop(self, worker: Worker) -> None:
        """The worker is shutting down (after its last job)."""

    def reload(self, worker: Worker, settings: Settings) -> None:
        """SIGHUP: the config file was read again; take what may change live."""

    def describe(self) -> dict[str, Any]:
        """Fields this middleware adds to the worker's heartbeat hash."""
        return {}
