"""Only the culprit pays for a worker death: a suspect runs alone in its worker.

A job whose worker parent died under it (the reaper gave it back: ``worker_deaths``
> 0 in its record, requeue.lua 'reap') is a *suspect*: any job of that worker may have
killed it. A suspect runs only in a worker that runs nothing else, and that worker
claims nothing else until the suspect's horse ended. So when a worker dies while it
runs a suspect, the suspect was alone there: the reaper fails it as the culprit and
no other job is charged. Sequence (W: the worker; docs/design.md, "Isolation")::

    W: a claim brings a suspect (a claim of its own, or one riding in a finish pipeline)
    W: other jobs run here, or the claim brought others too -> give the suspect back
       at once (requeue.lua 'return': attempt not counted, back at its place) and
       wait: claim nothing until every slot is free, then claim one job
    W: else: alone.lua writes 'alone' = the attempt's token into the record (fenced:
       0 -> the attempt was taken back meanwhile, not run), then its horse starts;
       W claims nothing until that horse ended
    W dies while the suspect runs alone -> the reaper fails it ('killed', "the worker
       this job ran in alone died"); not counted as anyone else's

Crash points: W dies between the claim and the give-back -> the reaper recovers
the suspect as any job of a lost worker (``worker_deaths`` + 1, bounded at 3 by
requeue.lua). W dies after alone.lua, before the horse started -> the suspect is
failed as the culprit though it did not run (nothing but the suspect runs there
then: an outside kill). Redis unreachable at alone.lua -> the suspect does not run
here; it is given back if Redis answers again, else recovered by the reaper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ..core.hooks import WorkerContext
from ..core.job import Job
from ..core.scripts import replies
from .slot import Slot

log = logging.getLogger(__name__)


class Solo:
    """Which claimed jobs a worker runs, and how many it may claim, so that a suspect
    of a worker death runs alone (module docstring)."""

    def __init__(self, ctx: WorkerContext, scripts: Any,
                 usable: Callable[[int], int] = lambda free: free) -> None:
        self.ctx, self.scripts = ctx, scripts
        #: of n free slots, how many may claim (the GPU entries, runtime/gpus.py)
        self.usable = usable
        #: the suspect running alone here now
        self.alone: Job[Any] | None = None
        #: a suspect was given back: claim nothing until every slot is free, then one
        self.waiting = False

    def free(self, concurrency: int, slots: Sequence[Slot]) -> int:
        """How many jobs the worker may claim with ``slots`` running (of those free,
        those :attr:`usable`)."""
        if self.alone is not None:
            if any(slot.job is self.alone for slot in slots):
                return 0
            self.alone = None
        if self.waiting:
            return 0 if slots else self.usable(1)
        return self.usable(concurrency - len(slots))

    def sort(self, jobs: list[Job[Any]], slots: Sequence[Slot]) -> list[Job[Any]]:
        """The claimed ``jobs`` to start beside ``slots``: a suspect runs only alone
        (marked so first); one that cannot is given back at once."""
        if not slots:
            self.waiting = False        # the one job claimed once every slot was free
        if not any(job.worker_deaths and job.failure_reason is None for job in jobs):
            return jobs
        keep: list[Job[Any]] = []
        for job in jobs:
            if not job.worker_deaths or job.failure_reason is not None:   # malformed: no horse
                keep.append(job)
            elif len(jobs) == 1 and not slots and self.alone is None:
                if self._mark(job):
                    self.alone = job
                    keep.append(job)
            else:
                self._give_back(job)
                self.waiting = True
        return keep

    def _mark(self, job: Job[Any]) -> bool:
        """alone.lua: the record names this attempt as running alone. False: not run."""
        base = self.ctx.keys.queue(job.queue).base
        try:
            marked = replies.alone(self.scripts.alone(keys=[base], args=[job.id, job.token or ""]))
        except redis.RedisError as exc:
            log.warning("Worker %s: could not mark job %s as running alone (%s); not running it",
                        self.ctx.name, job.id, exc)
            self._give_back(job)
            return False
        if not marked:
            log.warning("Worker %s: job %s was taken back before it ran alone; not running it",
                        self.ctx.name, job.id)
            return False
        log.info("Worker %s runs job %s alone (its worker died under it %d time(s)) and "
                 "claims nothing else until it ends", self.ctx.name, job.id, job.worker_deaths)
        return True

    def _give_back(self, job: Job[Any]) -> None:
        """requeue.lua 'return': back at its place, the attempt not counted."""
        base = self.ctx.keys.queue(job.queue).base
        try:
            self.scripts.requeue(keys=[base], args=[job.id, "return", job.token or "",
                                                    self.ctx.settings.failed_ttl])
        except redis.RedisError as exc:
            log.error("Worker %s: could not give back job %s (%s); the reaper will recover it",
                      self.ctx.name, job.id, exc)
            return
        log.info("Worker %s gave job %s back: its worker died under it before, it runs only "
                 "alone; claiming nothing until this worker's jobs ended", self.ctx.name, job.id)
