"""Admin actions on a queue: cancel, delete, requeue, reprioritize, pause, caps,
rate limits, empty, forget.

Every state change of a job is one Lua script call (``scripts/``); queue
settings are plain keys. :class:`QueueAdmin` is a part of ``Queue``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Unpack

from ..exceptions import InvalidOperation, NoSuchJob
from . import job_reads
from .config import settings_from_env
from .job import Job, JobStatus, check_priority
from .keys import Keys, QueueKeys, check_queue_name
from .queue_read import _group_rate_doc, _rate_doc
from .redis_client import text, text_hash
from .scripts import Scripts, replies

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .emitting import EventFields
    from .listing import Listing
    from .redis_client import RedisClient


class QueueAdmin:
    """The admin methods of ``Queue``."""

    name: str
    connection: RedisClient
    settings: Settings
    qkeys: QueueKeys
    scripts: Scripts

    if TYPE_CHECKING:  # pragma: no cover - Queue's other parts
        def _require(self, job_id: str) -> Job[Any]: ...

        def _emit(self, event: str, job: Job[Any] | dict[str, Any],
              **fields: Unpack[EventFields]) -> None: ...

        @property
        def job_ids(self) -> Listing[str]: ...

    def cancel(self, job_id: str) -> Job[Any]:
        """Cancel a queued, scheduled, deferred or held job (a started job cannot be
        canceled: :meth:`stop` it)."""
        verdict = replies.cancel(self.scripts.cancel(keys=[self.qkeys.base],
                                                     args=[job_id, self.settings.result_ttl]))
        job = self._changed(job_id, verdict, "canceled", "; only queued, scheduled, "
                            "deferred or held jobs can be canceled (a running one is "
                            "stopped: job.stop(), `fusionworker job stop`)")
        self._replay_notes()
        return job

    def _replay_notes(self) -> None:
        """Apply at once the notes a cancel or delete left in the queue's outbox (its
        dependents canceled or released, its batch told): a worker applies them after its
        own jobs only, so an idle one left them to its poll, and the reaper's pass. Never
        raises: the change is written, and the notes stay for a worker or the reaper."""
        from .workflows import replay_outbox

        try:
            if self.connection.llen(self.qkeys.outbox):
                replay_outbox(self.connection, self.settings, self.name, callbacks=False)
        except Exception as exc:  # noqa: BLE001 - written already; replayed later
            log.warning("The dependency notes of %s are left to the workers: %s",
                        self.name, exc)

    def _changed(self, job_id: str, verdict: replies.Changed, event: str,
                 refused: str) -> Job[Any]:
        """The job an admin script changed, its ``event`` emitted; NoSuchJob when the
        script found no job, InvalidOperation (``job ID is STATUS`` + ``refused``) when
        the job's status refused the change."""
        if verdict.outcome == "missing":
            raise self._missing(job_id)
        if verdict.outcome == "refused":
            raise InvalidOperation(f"job {job_id} is {verdict.status}{refused}")
        job = self._require(job_id)
        self._emit(event, job)
        return job

    def _missing(self, job_id: str) -> NoSuchJob:
        return NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")

    def stop(self, job_id: str) -> Job[Any]:
        """Stop a job: a started one is killed by the worker running it (whatever its
        host) and ends ``stopped``, without a retry, its ``on_stopped`` callback run; a
        queued, scheduled or deferred one is canceled. Returns the job as it is now (a
        started one still ``started``: its worker kills it within a second or so;
        ``job.wait()`` raises :class:`~fusionworker.exceptions.JobFailed` once it is
        stopped). The sequence is in docs/design.md, "Stopping a running job".

        :class:`NoSuchJob` for an unknown id, :class:`InvalidOperation` for a job that
        ended already."""
        for _ in range(3):    # a job may start between the stop's read and the cancel
            verdict = replies.stop(self.scripts.stop(keys=[self.qkeys.base], args=[job_id]))
            if verdict.outcome == "missing":
                raise self._missing(job_id)
            if verdict.outcome == "ended":
                raise InvalidOperation(f"job {job_id} is {verdict.detail}: it ended already")
            if verdict.outcome == "stopping":
                job = self._require(job_id)
                self._emit("admin", job, reason="stop")
                return job
            try:
                return self.cancel(job_id)
            except InvalidOperation:
                continue      # it started (or ended) meanwhile: look again
        raise InvalidOperation(f"job {job_id} kept changing state; try again")

    def hold(self, job_id: str) -> Job[Any]:
        """Set a queued or scheduled job aside: no worker claims it until :meth:`release`,
        which gives it back its place (priority and FIFO order, or its due time). Holding
        a held job changes nothing. Refused for a job that is not ready (started, ended,
        deferred, or queued behind its group's running job)."""
        verdict = replies.hold(self.scripts.hold(keys=[self.qkeys.base], args=[job_id]))
        if verdict.outcome == "missing":
            raise self._missing(job_id)
        if verdict.outcome == "refused":
            what = ("queued behind its group's running job" if verdict.why == "group"
                    else str(verdict.status))
            raise InvalidOperation(f"job {job_id} is {what}; only a queued or scheduled job "
                                   "can be held")
        job = self._require(job_id)
        if verdict.status != JobStatus.HELD:
            self._emit("held", job)
        return job

    def release(self, job_id: str) -> Job[Any]:
        """Put a held job back where it was (see :meth:`hold`); workers claim it again."""
        verdict = replies.release(self.scripts.release(keys=[self.qkeys.base], args=[job_id]))
        return self._changed(job_id, verdict, "released", ", not held")

    def delete(self, job_id: str | None = None, *, delete_jobs: bool = True) -> None:
        """Delete a job and every reference to it. Without ``job_id``, RQ's
        ``q.delete(delete_jobs=True)``: the queue itself, with its jobs
        (:func:`forget_queue`, refused while a job of it runs); ``delete_jobs=False`` is
        refused (a job whose queue is gone could never run)."""
        if job_id is None:
            if not delete_jobs:
                raise InvalidOperation(
                    "a queue is deleted with its jobs (a job whose queue is gone could never "
                    "run): q.delete(), or q.empty() to drop its waiting jobs only")
            forget_queue(self.connection, self.name, self.settings.prefix)
            return
        before = text_hash(self.connection.hgetall(self.qkeys.job(job_id)))
        verdict = replies.delete(self.scripts.delete(keys=[self.qkeys.base], args=[job_id]))
        if verdict.outcome == "missing":
            raise self._missing(job_id)
        self._emit("deleted", before or {"id": job_id, "queue": self.name})
        self._replay_notes()

    def requeue(self, job_id: str) -> Job[Any]:
        """Move a failed (or stopped) job back to its queue (attempts start over)."""
        verdict = replies.requeue(self.scripts.requeue(
            keys=[self.qkeys.base], args=[job_id, "failed", "", self.settings.failed_ttl]))
        if verdict.outcome != "requeued":
            if verdict.missing:
                raise self._missing(job_id)
            raise InvalidOperation(f"cannot requeue {job_id}: {verdict.why}")
        job = self._require(job_id)
        self._emit("requeued", job, reason="manual")
        return job

    def requeue_all_failed(self, progress: Callable[[int], None] | None = None) -> int:
        """Requeue every job in the failed registry (failed or stopped); returns how many
        were requeued. An entry whose record expired is dropped; one the script skips for
        another reason (its record now says otherwise) is left where it is."""
        done = 0
        kept = 0                 # entries left in the registry, before the ones still to read
        while True:
            ids = self.connection.zrange(self.qkeys.failed, kept, kept + 499)
            if not ids:
                return done
            moved = 0
            # the events name each job's function, as a single requeue's do
            funcs = job_reads.job_fields(self.connection, self.settings.prefix,
                                         [(self.name, text(i)) for i in ids], ("func",))
            for job_id, known in zip(ids, funcs, strict=True):
                verdict = replies.requeue(self.scripts.requeue(
                    keys=[self.qkeys.base], args=[job_id, "failed", "", self.settings.failed_ttl]))
                if verdict.outcome == "requeued":
                    moved += 1
                    self._emit("requeued", {"id": text(job_id), "queue": self.name,
                                            "func": known["func"]}, reason="manual")
                elif verdict.missing:   # its record expired: drop the entry
                    self.connection.zrem(self.qkeys.failed, text(job_id))
                else:
                    kept += 1
                if progress:
                    progress(1)
            done += moved

    def reprioritize(self, job_id: str, priority: int) -> Job[Any]:
        """Re-score a pending (queued or scheduled) job; refused otherwise."""
        check_priority(priority)
        verdict = replies.reprioritize(
            self.scripts.reprioritize(keys=[self.qkeys.base], args=[job_id, priority]))
        return self._changed(job_id, verdict, "reprioritized",
                             "; only a pending job can be reprioritized")

    def pause(self) -> None:
        """No worker anywhere claims from this queue until :meth:`unpause` (checked in claim)."""
        self.connection.set(self.qkeys.paused, str(time.time()))

    def unpause(self) -> None:
        self.connection.delete(self.qkeys.paused)
        self.connection.publish(self.qkeys.wake, "unpause")

    @property
    def is_paused(self) -> bool:
        return bool(self.connection.exists(self.qkeys.paused))

    def set_max_active(self, limit: int | None) -> None:
        """Cap the jobs running at once from this queue, across all workers (None = no cap).
        The cap is at least 1, as the CLI's and the API's: 0 would stop the queue without
        saying so (:meth:`pause` does that, and says so)."""
        if limit is None:
            self.connection.delete(self.qkeys.max_active)
            self.connection.publish(self.qkeys.wake, "cap")
            return
        if int(limit) < 1:
            raise ValueError(f"max_active must be >= 1 (None: no cap; to stop the queue, "
                             f"pause it), not {limit!r}")
        self.connection.set(self.qkeys.max_active, int(limit))
        self.connection.publish(self.qkeys.wake, "cap")

    @property
    def max_active(self) -> int | None:
        value = self.connection.get(self.qkeys.max_active)
        return int(value) if value is not None else None

    # -- rate limit ------------------------------------------------------------

    def set_rate_limit(self, limit: str | tuple[int, float] | None, *,
                       per_group: bool = False, group: str | None = None) -> None:
        """At most N starts in any window of W seconds, over every worker and host
        (``"10/s"``, ``"600/m"``, ``"1000/h"`` or ``(N, W)``; None removes the limit).

        By default the limit is the queue's. ``per_group=True``: every group of
        the queue (jobs enqueued with ``group=``) gets its own window of that
        size; ``group="G"``: a limit for group G only, in place of the
        per-group one. A start must fit every limit that applies to it. A job
        whose group's window is full waits (status ``scheduled``) until its
        group's next slot while the queue's other jobs go on.

        Enforced inside the claim script with the Redis server's clock (a
        sliding-window log, see docs/design.md).
        """
        if per_group or group is not None:
            self._set_group_rate_limit(limit, per_group, group)
            return
        if limit is None:
            self.connection.delete(self.qkeys.rate, self.qkeys.rate_log)
            self.connection.publish(self.qkeys.wake, "rate")
            return
        count, window = parse_rate(limit) if isinstance(limit, str) else _check_rate(*limit)
        self.connection.hset(self.qkeys.rate,
                             mapping={"limit": count, "window": repr(float(window))})
        # starts already logged stay counted for the new window (a longer one included)
        self.connection.pexpire(self.qkeys.rate_log, int(window * 1000) + 1000)
        self.connection.publish(self.qkeys.wake, "rate")

    def _set_group_rate_limit(self, limit: str | tuple[int, float] | None, per_group: bool,
                              group: str | None) -> None:
        """``fw:{q}:group_rate`` field ``every`` (per_group) or ``group:<G>``: "N W".

        Each group's starts are logged in ``fw:{q}:group_rate:log:<G>``, which
        expires a second after its window: a changed limit counts the starts
        logged under the old one while those live.
        """
        if per_group and group is not None:
            raise ValueError("give per_group=True or group=..., not both")
        if group is not None and (not isinstance(group, str) or not group):
            raise ValueError(f"group must be a non-empty string, got {group!r}")
        field_name = "every" if per_group else f"group:{group}"
        key = self.qkeys.group_rate
        if limit is None:
            self.connection.hdel(key, field_name)
            if not self.connection.exists(key):  # no group limit left: its totals go too
                self.connection.delete(self.qkeys.group_rate_held)
        else:
            count, window = parse_rate(limit) if isinstance(limit, str) else _check_rate(*limit)
            self.connection.hset(key, field_name, f"{count} {float(window)!r}")
        self.connection.publish(self.qkeys.wake, "rate")

    @property
    def rate_limit(self) -> dict[str, Any] | None:
        """``{"limit": N, "window": W, "held_seconds": S}`` or None; ``held_seconds``
        is how long, in total, the queue had jobs ready but was held by its limit."""
        return _rate_doc(text_hash(self.connection.hgetall(self.qkeys.rate)))

    @property
    def group_rate_limit(self) -> dict[str, Any] | None:
        """The per-group rate limits, or None without any: ``{"every": {"limit": N,
        "window": W} or None, "groups": {group: {"limit": N, "window": W}},
        "held_seconds": S, "held_jobs": J}``. ``held_jobs`` counts the times a job was
        set aside because its group's window was full, ``held_seconds`` sums how long
        each was set aside for (until its group's next slot)."""
        pipe = self.connection.pipeline(transaction=False)
        pipe.hgetall(self.qkeys.group_rate)
        pipe.hgetall(self.qkeys.group_rate_held)
        return _group_rate_doc(*pipe.execute())

    def empty(self, progress: Callable[[int], None] | None = None) -> int:
        """Delete every queued and scheduled job; returns how many. A job a worker
        claims meanwhile runs on (the script refuses it: it is no longer waiting)."""
        removed = 0
        for registry in (JobStatus.QUEUED, JobStatus.SCHEDULED):
            passed: set[str] = set()      # listed, and refused or gone: not listed again
            while True:
                ids = [i for i in map(text, self.job_ids(registry, 500 + len(passed)))
                       if i not in passed][:500]
                if not ids:
                    break
                # the events name each job's function, as a single delete's do
                funcs = job_reads.job_fields(self.connection, self.settings.prefix,
                                             [(self.name, i) for i in ids], ("func",))
                for job_id, known in zip(ids, funcs, strict=True):
                    verdict = replies.delete(self.scripts.delete(
                        keys=[self.qkeys.base], args=[job_id, "waiting"]))
                    if verdict.outcome != "deleted":
                        passed.add(job_id)
                        continue
                    self._emit("deleted", {"id": job_id, "queue": self.name,
                                           "func": known["func"]}, reason="emptied")
                    removed += 1
                    if progress:
                        progress(1)
        self._replay_notes()
        return removed


def forget_queue(connection: RedisClient, name: str, prefix: str | None = None) -> int:
    """Remove queue ``name``: its registration and every key under ``PREFIX:{name}:``.

    ``prefix``: the deployment's key prefix; by default the settings' (``FUSIONWORKER_PREFIX``,
    else ``fw``), as a ``Queue()`` made without settings uses.

    Sequence: pause the queue (no worker claims from it any more), refuse with
    :class:`InvalidOperation` while a job of it runs (``started``; the pause is
    undone unless it was paused before), set ``forgetting`` (from here until its end,
    an enqueue to the queue is refused with a ``QUEUEGONE`` error, before any write: a
    job written during the SCAN below could lose its record, or its place, to it while
    its producer was told it was queued), then delete the keys (job records,
    registries, cron entries, groups), delete ``paused`` and ``forgetting`` (one
    transaction), and last SREM the registration (docs/design.md, "Deleting a queue while
    producers enqueue"). Each step is idempotent: after a crash, calling it again finishes
    the work (until then the queue stays paused and refuses enqueues, saying so). A
    producer that enqueues to ``name`` afterwards makes a new, empty queue. Returns
    the number of keys deleted. Callers confirm first (the CLI asks, or --yes).
    """
    check_queue_name(name)
    if prefix is None:
        prefix = settings_from_env().prefix
    keys = Keys(prefix)
    qkeys = keys.queue(name)
    was_paused = connection.set(qkeys.paused, "1", get=True) is not None
    running = connection.zcard(qkeys.started)
    if running:
        if not was_paused:     # a claim meanwhile found it paused: wake it (unpause)
            connection.delete(qkeys.paused)
            connection.publish(qkeys.wake, "unpause")
        raise InvalidOperation(f"queue {name!r} has {running} running job(s); pause it "
                               "(`pause`), wait for them to end, and try again")
    connection.set(qkeys.forgetting, "1")
    deleted = 0
    batch: list[str] = []
    kept = (qkeys.paused, qkeys.forgetting)
    for key in connection.scan_iter(match=qkeys.match_all, count=1000):
        if text(key) in kept:
            continue
        batch.append(key)
        if len(batch) >= 500:
            deleted += connection.delete(*batch)
            batch = []
    if batch:
        deleted += connection.delete(*batch)
    # registered until the marks are gone: a delete killed before leaves a queue every
    # command names (paused, refusing enqueues) and `queue delete` finishes; killed
    # between, an empty queue stays listed (a Redis Cluster keeps fw:queues on another
    # slot: no transaction spans both). The end of the pause wakes a claim that found
    # the queue paused (quiet) meanwhile.
    pipe = connection.pipeline(transaction=True)     # the queue's slot only
    pipe.delete(qkeys.paused)
    pipe.delete(qkeys.forgetting)         # enqueues make a new queue from here
    deleted += int(pipe.execute()[0])
    connection.srem(keys.queues, name)
    connection.publish(qkeys.wake, "unpause")
    return deleted


#: seconds per unit of a rate limit ("10/s", "600/m", "1000/h")
RATE_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}


def _check_rate(count: Any, window: Any) -> tuple[int, float]:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"a rate limit allows at least 1 start, got {count!r}")
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not (
            0 < window <= 86400):
        raise ValueError(f"a rate-limit window is 0 < seconds <= 86400, got {window!r}")
    return count, float(window)


def parse_rate(spec: str) -> tuple[int, float]:
    """``"10/s"`` -> ``(10, 1.0)``; also ``/m`` and ``/h``. ValueError on anything else."""
    count, sep, unit = spec.strip().partition("/")
    if not sep or not count.strip().isdigit() or unit.strip() not in RATE_UNITS:
        raise ValueError(f"invalid rate {spec!r}: expected N/s, N/m or N/h (e.g. 10/s)")
    return _check_rate(int(count), RATE_UNITS[unit.strip()])
