"""RQ's names on a ``Queue`` (docs/from-rq.md): ``get_job_ids``,
``get_jobs``, ``is_empty``, ``get_job_position``, equality by name, and the
registries as objects (``q.failed_job_registry`` & co, see ``registries.py``).

:class:`QueueHabits` is a part of ``Queue``; each name is a thin layer over a
read of the queue's keys or the objects of ``registries.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from .derived import Derived
from .redis_client import texts

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .job import Job, JobStatus
    from .keys import QueueKeys
    from .queue_view import QueueView
    from .redis_client import RedisClient
    from .registries import (
        CanceledJobRegistry,
        DeferredJobRegistry,
        FailedJobRegistry,
        FinishedJobRegistry,
        JobRegistry,
        ScheduledJobRegistry,
        StartedJobRegistry,
    )


R = TypeVar("R")


class _RegistryOf(Derived["QueueHabits", R]):
    """``q.<status>_job_registry`` (RQ's names): :meth:`QueueHabits.registry`, typed."""

    def __init__(self, status: str) -> None:
        self.status = status

    def read(self, obj: QueueHabits) -> R:
        return cast(R, obj.registry(self.status))


class QueueHabits:
    """RQ's names of ``Queue``."""

    name: str
    connection: RedisClient
    qkeys: QueueKeys
    settings: Settings

    if TYPE_CHECKING:  # pragma: no cover - the other parts of Queue
        @property
        def count(self) -> int: ...

        def fetch_job(self, job_id: str) -> Job[Any] | None: ...

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """Queued ids in the order they will run, ``length`` of them from ``offset``
        (-1: all)."""
        stop = -1 if length < 0 else offset + length - 1
        return texts(self.connection.zrevrange(self.qkeys.pending, offset, stop))

    def get_jobs(self, offset: int = 0, length: int = -1) -> list[Job[Any]]:
        """The queued jobs of :meth:`get_job_ids`."""
        found = (self.fetch_job(i) for i in self.get_job_ids(offset, length))
        return [j for j in found if j is not None]

    def is_empty(self) -> bool:
        """No job is queued (scheduled and deferred ones are not counted)."""
        return self.count == 0

    def get_job_position(self, job: Job[Any] | str) -> int | None:
        """Place of a queued job in the run order (0 runs next), or None."""
        place = self.connection.zrevrank(self.qkeys.pending, job if isinstance(job, str)
                                         else job.id)
        return None if place is None else int(cast("int", place))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueHabits):
            return NotImplemented
        return (self.name, self.settings.prefix) == (other.name, other.settings.prefix)

    def __hash__(self) -> int:
        return hash((self.name, self.settings.prefix))

    def registry(self, status: JobStatus | str) -> JobRegistry:
        """The registry object of ``status`` (``"failed"``, ``"started"``, ...)."""
        from .registries import REGISTRIES

        if str(status) not in REGISTRIES:
            raise ValueError(f"no registry for status {status!r}; one of "
                             f"{', '.join(sorted(REGISTRIES))}")
        return REGISTRIES[str(status)](queue=cast("QueueView", self))

    failed_job_registry: _RegistryOf[FailedJobRegistry] = _RegistryOf("failed")
    finished_job_registry: _RegistryOf[FinishedJobRegistry] = _RegistryOf("finished")
    started_job_registry: _RegistryOf[StartedJobRegistry] = _RegistryOf("started")
    scheduled_job_registry: _RegistryOf[ScheduledJobRegistry] = _RegistryOf("scheduled")
    deferred_job_registry: _RegistryOf[DeferredJobRegistry] = _RegistryOf("deferred")
    canceled_job_registry: _RegistryOf[CanceledJobRegistry] = _RegistryOf("canceled")
