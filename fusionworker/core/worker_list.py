"""RQ's ``Worker.all(connection=r)`` and ``Worker.count(...)``: the live workers, read.

Each live worker as a :class:`WorkerInfo`, made from its heartbeat hash
(:func:`~fusionworker.core.admin.workers`, the source of ``info``, the dashboard and
``health``): a snapshot with RQ's attribute names where they mean the same, read only
(nothing here writes). Times are epoch seconds as everywhere in fusionworker, not
datetimes as in RQ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .admin import describe_worker, last_beat, workers
from .config import settings_from_env
from .redis_client import decoding, server_time, shared_client, stored_number

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .job import Job
    from .redis_client import RedisClient


@dataclass(frozen=True)
class WorkerInfo:
    """One live worker as its last heartbeat described it."""

    name: str
    hostname: str
    pid: int | None
    state: str                      #: idle | busy | suspended | ... (the heartbeat's)
    queues: list[str]               #: the names it serves (RQ: ``queue_names()``)
    current_job_ids: list[str]      #: the jobs it runs now (up to its concurrency)
    concurrency: int
    successful_job_count: int
    failed_job_count: int
    total_working_time: float       #: seconds of its jobs' run time
    birth_date: float | None        #: epoch seconds
    last_heartbeat: float | None    #: epoch seconds, on the Redis server's clock
    version: str | None
    settings: Settings              #: those it was read with (its deployment's prefix)
    connection: Any

    def queue_names(self) -> list[str]:
        """RQ's method: the names of the queues it serves."""
        return list(self.queues)

    def get_current_job_id(self) -> str | None:
        """RQ's: the (first) job it runs now, or None."""
        return self.current_job_ids[0] if self.current_job_ids else None

    def get_current_job(self) -> Job[Any] | None:
        """RQ's: that job read now, or None (none runs, or it is gone since)."""
        from ..exceptions import NoSuchJob
        from .job import Job

        job_id = self.get_current_job_id()
        if job_id is None:
            return None
        try:
            return Job.fetch(job_id, self.connection, settings=self.settings)
        except NoSuchJob:
            return None


def live_workers(connection: RedisClient | None = None, *, queue: Any = None,
                 settings: Settings | None = None) -> list[WorkerInfo]:
    """Every live worker (of ``queue`` only: a ``Queue`` or a name), by name. Without
    a connection, the settings' ``REDIS_URL`` (as ``Queue()``); the key prefix is the
    settings' (``FUSIONWORKER_PREFIX``)."""
    settings = settings or settings_from_env()
    client = decoding(connection) if connection is not None else shared_client(
        settings.redis_url)
    wanted = getattr(queue, "name", queue)
    now = server_time(client)
    out: list[WorkerInfo] = []
    for data in workers(client, settings.prefix):
        doc = describe_worker(data, now)
        if wanted is not None and wanted not in doc["queues"]:
            continue
        out.append(WorkerInfo(
            name=doc["name"], hostname=doc["host"], pid=doc["pid"], state=doc["state"],
            queues=doc["queues"], current_job_ids=doc["current_jobs"],
            concurrency=doc["concurrency"], successful_job_count=doc["successful"],
            failed_job_count=doc["failed"], total_working_time=doc["total_working_time"],
            birth_date=stored_number(data.get("birth")),
            last_heartbeat=last_beat(data, now),      # on the Redis server's clock
            version=doc["version"], settings=settings, connection=client))
    return out


__all__ = ["WorkerInfo", "live_workers"]
