"""What the exceptions that carry a job give of it: :class:`JobView`, which ``Job`` meets.

``JobFailed.job``, ``JobWaitTimeout.job`` and ``PartialEnqueue.jobs``
(``fusionworker/exceptions.py``) are jobs, and ``Job.wait`` raises those exceptions:
naming the class would close a circle of imports once the ``TYPE_CHECKING`` ones
count (``tests/test_layers.py``). They name this protocol; what they hold is the
``Job`` itself (``isinstance(exc.job, Job)`` holds). The type checker checks that
``Job`` meets it where ``Job.wait`` and ``Queue.enqueue_many`` raise them.
"""

from __future__ import annotations

from typing import Any, Protocol, Self

from .vocabulary import FailureReason, JobStatus


class JobView(Protocol):
    """A job: what it is, where it stands, how it ended, and the calls on it."""

    # what it is
    id: str
    queue: str
    func: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    group: str | None
    unique_key: str | None
    batch: str | None
    depends_on: list[str] | None
    # where it stands
    status: JobStatus
    attempts: int
    max_retries: int
    enqueued_at: float | None
    scheduled_for: float | None
    started_at: float | None
    ended_at: float | None
    duration: float | None
    worker_name: str | None
    meta: dict[str, Any]
    # how it ended
    result: Any
    error_type: str | None
    error_message: str | None
    traceback: str | None
    failure_reason: FailureReason | None

    @property
    def error(self) -> str | None: ...

    @property
    def description(self) -> str: ...

    def refresh(self) -> Self: ...

    def wait(self, timeout: float | None = None) -> Self: ...

    def requeue(self) -> Self: ...

    def cancel(self) -> Self: ...

    def delete(self) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...
