"""The worker's cron duty: :class:`CronScheduler` runs the due cron entries of its
queues on every tick. The entries' model and admin API are ``core/cron.py``
(importable from here as before); the sequence and its crash point: docs/design.md,
"Cron: one enqueue per due time".
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis

from ..core.cron import (
    CATCH_UP_MODES,
    CRON_RESCAN,
    MISFIRE_GRACE,
    TICK_BATCH,
    CronEntry,
    InvalidSchedule,
    NoSuchCronEntry,
    check_schedule,
    find_queue,
    get_entry,
    index_queues,
    list_entries,
    next_after,
    pause,
    plan,
    register,
    remove,
    resume,
    run_due,
)
from ..core.hooks import Middleware
from ..core.keys import Keys

if TYPE_CHECKING:  # pragma: no cover
    from ..core.hooks import WorkerContext

__all__ = [
    "CronScheduler",
    "MISFIRE_GRACE",
    "CATCH_UP_MODES",
    "TICK_BATCH",
    "CRON_RESCAN",
    "InvalidSchedule",
    "NoSuchCronEntry",
    "CronEntry",
    "check_schedule",
    "next_after",
    "plan",
    "register",
    "find_queue",
    "get_entry",
    "remove",
    "pause",
    "resume",
    "list_entries",
    "run_due",
    "index_queues",
]

log = logging.getLogger("fusionworker.cron")


class CronScheduler(Middleware):
    """Runs the due cron entries of the worker's queues on every tick (~1/s).

    A tick reads ``<prefix>:cron_queues`` (the queues that have entries: ``register``
    adds to it before it writes the entry) and only those of the worker's queues: an
    idle worker on 1,000 queues without cron sends one SMEMBERS a second, not 1,000
    reads. At start and every :data:`CRON_RESCAN` seconds one pipeline over every
    served queue adds the queues whose entries were written without the index."""

    def __init__(self) -> None:
        self._rescan_at = 0.0
        self._index_refused = False

    def _queues(self, worker: WorkerContext) -> list[str]:
        """The served queues that have entries; every served queue while the index
        cannot be read (a key of another type: said once, and cron still runs)."""
        served = list(worker.queue_names)
        now = time.monotonic()
        try:
            if now >= self._rescan_at:
                self._rescan_at = now + CRON_RESCAN
                index_queues(worker.connection, worker.settings.prefix, served)
            indexed = {q if isinstance(q, str) else q.decode() for q in
                       worker.connection.smembers(Keys(worker.settings.prefix).cron_queues)}
        except redis.ResponseError as exc:
            if not self._index_refused:
                self._index_refused = True
                log.error("Cron: the index of queues with entries cannot be read (%s); "
                          "every served queue is looked at instead", str(exc)[:200])
            return served
        return [q for q in served if q in indexed]

    def on_tick(self, worker: WorkerContext) -> None:
        try:
            results = run_due(worker.connection, worker.settings.prefix, self._queues(worker))
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # the loop reports outages
            log.debug("cron tick skipped: Redis unreachable (%s)", exc)
            return
        for queue, _name, reply in results:
            if reply.outcome == "queued" and reply.job_id:
                _emit_run(worker, queue, reply.job_id)


def _emit_run(worker: WorkerContext, queue: str, job_id: str) -> None:
    """A cron run is a ``queued`` event like any enqueue; never raises."""
    from ..events.middleware import emit_job_event
    try:
        data = worker.connection.hgetall(Keys(worker.settings.prefix).queue(queue).job(job_id))
        emit_job_event(worker, "queued", data or {"id": job_id, "queue": queue})
    except Exception:  # observability never blocks (docs/design.md)
        log.exception("Cron: could not emit the queued event of job %s", job_id)
