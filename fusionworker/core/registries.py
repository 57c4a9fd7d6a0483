"""A queue's job registries as objects, under RQ's names.

Each registry is one ZSET of the queue (``keys.py``): ``StartedJobRegistry``
(score: the lease deadline), ``ScheduledJobRegistry`` (when the job is due),
``DeferredJobRegistry`` (enqueue time), ``FinishedJobRegistry``,
``FailedJobRegistry`` and ``CanceledJobRegistry`` (when the job ended). The
objects only read and call the queue's own operations; nothing here changes a
job in a way the queue's scripts would not::

    from fusionworker import Queue
    from fusionworker.registries import FailedJobRegistry

    q = Queue("default")
    failed = q.failed_job_registry            # or FailedJobRegistry(queue=q)
    for job_id in failed.get_job_ids():
        failed.requeue(job_id)

What differs from RQ: the records of finished, failed and canceled jobs
expire by their TTL and the worker's reaper drops their ids later;
:meth:`JobRegistry.get_job_ids` leaves out (and drops) the ids whose record is
gone already, and :meth:`JobRegistry.cleanup` does it for the whole registry.
Only a failed job can be requeued (``CanceledJobRegistry`` has no ``requeue``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from ..exceptions import InvalidOperation
from .job import DONE_STATUSES, Job, JobStatus
from .queue_port import queue_class
from .redis_client import texts

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .queue_view import QueueView
    from .redis_client import RedisClient


def _job_id(job: Job[Any] | str) -> str:
    return job if isinstance(job, str) else job.id


class JobRegistry:
    """The jobs of one status of one queue (RQ's ``BaseRegistry``)."""

    status: ClassVar[JobStatus]

    def __init__(self, name: str = "default", connection: RedisClient | None = None, *,
                 queue: QueueView | None = None, settings: Settings | None = None) -> None:
        self.queue: QueueView = (queue if queue is not None
                                 else queue_class()(name, connection, settings=settings))
        self.name = self.queue.name
        self.connection = self.queue.connection
        self.key = self.queue.qkeys.registry(self.status)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobRegistry):
            return NotImplemented
        return type(self) is type(other) and self.queue == other.queue

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.queue))

    @property
    def count(self) -> int:
        """How many ids the registry holds (``ZCARD``; see :meth:`cleanup`)."""
        return int(self.connection.zcard(self.key))

    def __len__(self) -> int:
        return self.count

    def __contains__(self, job: object) -> bool:
        if not isinstance(job, (str, Job)):
            return False
        return self.connection.zscore(self.key, _job_id(job)) is not None

    def get_job_ids(self, start: int = 0, end: int = -1, desc: bool = False) -> list[str]:
        """Ids from ``start`` to ``end`` (inclusive, like ``ZRANGE``), by score: oldest
        first, newest first with ``desc=True``. An id whose record is gone (expired,
        deleted) is left out and dropped from the registry."""
        read = self.connection.zrevrange if desc else self.connection.zrange
        ids = texts(read(self.key, start, end))
        return self._present(ids)

    def get_jobs(self, start: int = 0, end: int = -1, desc: bool = False) -> list[Job[Any]]:
        """The jobs of :meth:`get_job_ids` (read through the queue)."""
        jobs = (self.queue.fetch_job(i) for i in self.get_job_ids(start, end, desc))
        return [j for j in jobs if j is not None]

    def _present(self, ids: list[str]) -> list[str]:
        if not ids:
            return ids
        pipe = self.connection.pipeline(transaction=False)
        for job_id in ids:
            pipe.exists(self.queue.qkeys.job(job_id))
        found = pipe.execute()
        gone = [i for i, there in zip(ids, found) if not there]
        if gone and self.status in DONE_STATUSES:
            # only an ended job's entry is dropped: a live one's belongs to the scripts
            self.connection.zrem(self.key, *gone)
        return [i for i, there in zip(ids, found) if there]

    def cleanup(self) -> int:
        """Drop the ids whose record is gone; returns how many (RQ's ``cleanup``).
        Only the registries of ended jobs (finished, failed, canceled) are cleaned."""
        if self.status not in DONE_STATUSES:
            return 0
        dropped, start = 0, 0
        while True:
            ids = texts(self.connection.zrange(self.key, start, start + 499))
            if not ids:
                return dropped
            kept = self._present(ids)
            dropped += len(ids) - len(kept)
            start += len(kept)

    def remove(self, job: Job[Any] | str, delete_job: bool = False) -> None:
        """Take the job off this registry; ``delete_job=True`` deletes the job (the
        queue's ``delete``). Without it only an ended job's entry can be taken off
        (its record stays until its TTL): a live job's entry is what the queue's
        scripts run it by, so that is refused."""
        job_id = _job_id(job)
        if delete_job:
            self.queue.delete(job_id)
            return
        if self.status not in DONE_STATUSES:
            raise InvalidOperation(f"the {self.status} registry's entries belong to the "
                                   "running queue: use remove(job, delete_job=True) or "
                                   "queue.cancel(id)")
        self.connection.zrem(self.key, job_id)

    def get_expiration_time(self, job: Job[Any] | str) -> datetime | None:
        """The score of the job's entry as a UTC datetime (what it means: the class's
        docstring), or None when it is not in the registry."""
        value = self.connection.zscore(self.key, _job_id(job))
        return None if value is None else datetime.fromtimestamp(float(value), UTC)


class StartedJobRegistry(JobRegistry):
    """Jobs a worker runs now; the score is the lease deadline (server time)."""

    status = JobStatus.STARTED


class ScheduledJobRegistry(JobRegistry):
    """Delayed jobs and retries waiting for their time; the score is when they are due."""

    status = JobStatus.SCHEDULED

    def get_scheduled_time(self, job: Job[Any] | str) -> datetime | None:
        """When the job is due (UTC), or None when it is not scheduled."""
        return self.get_expiration_time(job)


class DeferredJobRegistry(JobRegistry):
    """Jobs waiting on their dependencies; the score is the enqueue time."""

    status = JobStatus.DEFERRED


class FinishedJobRegistry(JobRegistry):
    """Jobs that returned; the score is when they ended."""

    status = JobStatus.FINISHED


class FailedJobRegistry(JobRegistry):
    """Jobs that failed for good (the dead-letter); the score is when they failed."""

    status = JobStatus.FAILED

    def requeue(self, job: Job[Any] | str) -> Job[Any]:
        """Put the failed job back on its queue (attempts start over); returns it."""
        return self.queue.requeue(_job_id(job))

    def requeue_all(self) -> int:
        """Requeue every failed job of the queue; returns how many."""
        return self.queue.requeue_all_failed()


class CanceledJobRegistry(JobRegistry):
    """Jobs canceled before they ran (or because a dependency failed); the score is
    when they were canceled."""

    status = JobStatus.CANCELED


REGISTRIES: dict[str, type[JobRegistry]] = {
    cls.status.value: cls for cls in (
        StartedJobRegistry, ScheduledJobRegistry, DeferredJobRegistry, FinishedJobRegistry,
        FailedJobRegistry, CanceledJobRegistry)
}


__all__ = [
    "CanceledJobRegistry", "DeferredJobRegistry", "FailedJobRegistry", "FinishedJobRegistry",
    "JobRegistry", "ScheduledJobRegistry", "StartedJobRegistry",
]
