"""Exceptions users see, and the ones a job may raise on purpose."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from .core.base_error import FusionWorkerError as FusionWorkerError
from .core.config_file import ConfigError as ConfigError
from .core.job_view import JobView
from .core.retry import RetryPolicy


class Retry(Exception):
    """Raise from a job to ask for a retry (counts against ``max_retries``).

    ``delay`` (seconds, or a ``timedelta``) overrides the exponential backoff for
    this retry.

    ``Retry(max=3, interval=[10, 30, 60])`` is RQ's spelling of the enqueue policy
    (``q.enqueue(f, retry=Retry(max=3))``): it carries a
    :class:`~fusionworker.core.retry.RetryPolicy` (``.policy``), which ``retry=``
    reads. ``max`` is keyword-only, so ``raise Retry("busy", 5)`` keeps its meaning.
    """

    def __init__(self, message: str = "retry requested by the job",
                 delay: float | timedelta | None = None,
                 *, max: int | None = None,  # RQ's name: keyword-only
                 interval: float | list[float] | tuple[float, ...] | None = None) -> None:
        super().__init__(message)
        #: the enqueue policy this spells (RQ's ``Retry(max=...)``), else None
        self.policy = RetryPolicy(max, interval) if max is not None else None
        self.delay = delay.total_seconds() if isinstance(delay, timedelta) else delay
        self.max = max
        self.interval = interval

    def __repr__(self) -> str:
        if self.max is not None:      # a policy given at enqueue
            if self.interval is None:
                return f"Retry(max={self.max})"
            return f"Retry(max={self.max}, interval={self.interval!r})"
        delay = "" if self.delay is None else f", delay={self.delay:g}"
        return f"Retry({str(self)!r}{delay})"


class JobTimeoutError(BaseException):
    """Raised inside a horse by the death penalty (SIGALRM) when the job overran.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that a job's own
    ``except Exception`` cannot swallow its time limit.
    """


class FunctionNotAllowed(FusionWorkerError):
    """The job names a module that is not on the allow-list (or is on the deny-list)."""


class InvalidFunction(FunctionNotAllowed):
    """The job's function reference is not ``module:function`` of a public callable (a
    typo, a private name, a dotted path through another module): refused, as a
    :class:`FunctionNotAllowed` is, so one ``except FunctionNotAllowed`` catches both."""


class NoSuchJob(FusionWorkerError):
    """No job with that id exists (any more)."""


class InvalidOperation(FusionWorkerError):
    """The job is not in a state that allows the operation (e.g. reprioritize a started job)."""


class PriorityOutOfRange(FusionWorkerError, ValueError):
    """Priorities are whole numbers in [-1023, 1023] (see ``job.score``)."""


class JobFailed(FusionWorkerError):
    """``job.wait()`` found the job failed. ``.job`` is the failed job; ``.reason``
    (exception, timeout, crash, refused, ...), ``.error_type``, ``.error_message``
    and ``.traceback`` are copied from it. ``.job`` is a ``Job``, typed as the
    :class:`~fusionworker.core.job_view.JobView` it meets (job.py imports this module)."""

    def __init__(self, job: JobView) -> None:
        self.job = job
        self.reason = job.failure_reason
        self.error_type = job.error_type
        self.error_message = job.error_message
        self.traceback = job.traceback
        what = job.error or ("canceled on request (job cancel)" if job.status == "canceled"
                             else "no error recorded")
        why = f" ({self.reason})" if self.reason and str(self.reason) != str(job.status) else ""
        super().__init__(f"job {job.id} ({job.func}) {job.status}{why}: {what}")


class JobCanceled(JobFailed):
    """``job.wait()`` found the job canceled."""


class JobWaitTimeout(FusionWorkerError, TimeoutError):
    """``job.wait(timeout)`` gave up waiting; the job itself goes on (``.job``).

    Not to be confused with a job's own time limit
    (:class:`JobTimeoutError`, failure reason ``timeout``)."""

    def __init__(self, message: str, job: JobView | None = None) -> None:
        super().__init__(message)
        self.job = job


class PartialEnqueue(FusionWorkerError):
    """``Queue.enqueue_many`` lost its connection after writing some chunks.

    ``jobs`` are the jobs written (whole chunks, in order); the rest were not.
    """

    def __init__(self, jobs: Sequence[JobView], cause: BaseException) -> None:
        super().__init__(f"enqueue_many wrote {len(jobs)} job(s), then failed: {cause}")
        self.jobs: list[JobView] = list(jobs)



class MetaTooLarge(FusionWorkerError, ValueError):
    """A job's ``current_job().meta`` would exceed its size limit (``progress.META_LIMIT``);
    raised in the job, at the assignment, with the meta unchanged."""
