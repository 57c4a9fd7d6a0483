"""RQ's ``rq.command``: ``send_stop_job_command(connection, job_id)``, reachable as
``from fusionworker.command import send_stop_job_command``.

RQ sends the command to the worker by pub/sub; here it is ``Queue.stop`` (stop.lua),
which finds the job's queue, marks the record and publishes on the queue's ``stop``
channel (docs/design.md, "Stopping a running job").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..exceptions import NoSuchJob

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .job import Job
    from .redis_client import RedisClient


def send_stop_job_command(connection: RedisClient, job_id: str, serializer: Any = None, *,
                          settings: Settings | None = None) -> Job[Any]:
    """Stop job ``job_id`` (RQ's name): its worker kills it and it ends ``stopped``; a
    job not started yet is canceled. Returns the job as it is now. ``serializer`` is
    RQ's and must be None (arguments are always tagged JSON)."""
    from .queue import Queue, find_queue_of, settings_from_env

    if serializer is not None:
        raise TypeError("serializer= is not taken: arguments are always tagged JSON")
    settings = settings or settings_from_env()
    name = find_queue_of(connection, job_id, settings.prefix, None)
    if name is None:
        raise NoSuchJob(f"no job {job_id!r} in any queue")
    return Queue(name, connection, settings=settings).stop(job_id)


__all__ = ["send_stop_job_command"]
