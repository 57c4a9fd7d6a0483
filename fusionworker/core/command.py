"""RQ's ``rq.command``: ``send_stop_job_command(connection, job_id)``, reachable as
``from fusionworker.command import send_stop_job_command``.

RQ sends the command to the worker by pub/sub; here it is ``Queue.stop`` (stop.lua),
which finds the job's queue, marks the record and publishes on the queue's ``stop``
channel (docs/design.md, "Stopping a running job").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidOperation, NoSuchJob
from .keys import Keys
from .redis_client import text_hash

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .job import Job
    from .redis_client import RedisClient


def _settings(serializer: Any, settings: Settings | None) -> Settings:
    """RQ's ``serializer`` must be None (arguments are always tagged JSON, commands plain
    text); the settings given, else the environment's."""
    from .queue import settings_from_env

    if serializer is not None:
        raise TypeError("serializer= is not taken: job arguments are always tagged JSON "
                        "and commands plain text")
    return settings or settings_from_env()


def send_stop_job_command(connection: RedisClient, job_id: str, serializer: Any = None, *,
                          settings: Settings | None = None) -> Job[Any]:
    """Stop job ``job_id`` (RQ's name): its worker kills it and it ends ``stopped``; a
    job not started yet is canceled. Returns the job as it is now. ``serializer`` is
    RQ's and must be None (arguments are always tagged JSON)."""
    from .queue import Queue, find_queue_of

    settings = _settings(serializer, settings)
    name = find_queue_of(connection, job_id, settings.prefix, None)
    if name is None:
        raise NoSuchJob(f"no job {job_id!r} in any queue")
    return Queue(name, connection, settings=settings).stop(job_id)


def send_shutdown_command(connection: RedisClient, worker_name: str, serializer: Any = None,
                          *, mode: str = "warm", settings: Settings | None = None) -> None:
    """Ask worker ``worker_name`` to stop (RQ's name): ``warm`` as one SIGTERM (its
    running jobs finish), ``cold`` as two (they go back, the attempt not counted).
    :class:`~fusionworker.exceptions.InvalidOperation` when no live worker has that name
    (docs/design.md, "Stopping one worker from elsewhere")."""
    from .admin import request_shutdown

    request_shutdown(connection, worker_name, _settings(serializer, settings).prefix, mode)


def send_kill_horse_command(connection: RedisClient, worker_name: str,
                            serializer: Any = None, *,
                            settings: Settings | None = None) -> list[Job[Any]]:
    """Stop the jobs worker ``worker_name`` runs now (RQ's name: its horse is killed);
    each ends ``stopped`` as :func:`send_stop_job_command` ends it, and the worker
    goes on. Returns those jobs as they are now ([]: it runs none).
    :class:`~fusionworker.exceptions.InvalidOperation` when no live worker has that
    name."""
    from .admin import describe_worker

    settings = _settings(serializer, settings)
    data = text_hash(connection.hgetall(Keys(settings.prefix).worker(worker_name)))
    if not data:
        raise InvalidOperation(f"no live worker named {worker_name!r}")
    stopped = []
    for job_id in describe_worker(data, 0.0)["current_jobs"]:
        try:
            stopped.append(send_stop_job_command(connection, job_id, settings=settings))
        except (NoSuchJob, InvalidOperation):
            continue                      # ended (or gone) since the hash was written
    return stopped


__all__ = ["send_kill_horse_command", "send_shutdown_command", "send_stop_job_command"]
