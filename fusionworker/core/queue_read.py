"""Reads of a queue: one job, ids and jobs by status, the stats of ``info``.

Plain commands (no script). :class:`QueueReads` is a part of ``Queue``; the
module functions work on a client and need no ``Queue``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from ..exceptions import NoSuchJob
from .connection import decoding, server_time, text_hash, texts
from .job import DONE_STATUSES, SEQ_LIMIT, Job, JobStatus
from .keys import Keys, QueueKeys
from .queue_names import find_queue_of as find_queue_of
from .queue_names import known_queues as known_queues

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .connection import RedisClient

#: Priority bands reported by ``stats()`` / ``info``: name, lowest, highest priority.
BANDS = (("high", 10, 1023), ("normal", 0, 9), ("low", -1023, -1))


def _band_range(low: int, high: int) -> tuple[int, int]:
    """Score range of the priorities low..high (see job.score): a priority's jobs lie
    within half a step of ``priority * 2**42`` (``at_front`` jobs above it)."""
    half = SEQ_LIMIT // 2
    return low * SEQ_LIMIT - half + 1, high * SEQ_LIMIT + half


class QueueReads:
    """The reading methods of ``Queue``."""

    name: str
    connection: RedisClient
    qkeys: QueueKeys
    settings: Settings

    def _kept_since(self, status: JobStatus) -> str:
        return kept_since(self.settings, status)

    def fetch_job(self, job_id: str) -> Job[Any] | None:
        """The job, or None when unknown (or expired)."""
        # the queue's client decodes (``decoding``): the reply is text already
        data = cast("dict[str, str]", self.connection.hgetall(self.qkeys.job(job_id)))
        if not data:
            return None
        job: Job[Any] = Job.from_hash(data)
        job._queue = self
        return job

    def _require(self, job_id: str) -> Job[Any]:
        job = self.fetch_job(job_id)
        if job is None:
            raise NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")
        return job

    @property
    def count(self) -> int:
        """Jobs pending (ready to run)."""
        return int(self.connection.zcard(self.qkeys.pending))

    def __len__(self) -> int:
        return self.count

    def job_ids(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[str]:
        """Ids by registry: queued (best first), scheduled (soonest first), started,
        deferred (oldest first), finished/failed/canceled (newest first)."""
        r, k = self.connection, self.qkeys
        stop = max(limit, 1) - 1
        try:
            status = JobStatus(status)
        except ValueError:
            raise ValueError(f"unknown status {status!r}") from None
        if status == JobStatus.QUEUED:
            return texts(r.zrevrange(k.pending, 0, stop))
        if status in DONE_STATUSES:
            return texts(r.zrevrangebyscore(k.registry(status), "+inf", self._kept_since(status),
                                            start=0, num=stop + 1))
        return texts(r.zrange(k.registry(status), 0, stop))

    def jobs(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[Job[Any]]:
        ids = self.job_ids(status, limit)
        pipe = self.connection.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.qkeys.job(job_id))
        found = [Job.from_hash(d) for d in pipe.execute() if d]
        for job in found:
            job._queue = self
        return found

    def stats(self, heartbeats: list[dict[str, str]] | None = None) -> dict[str, Any]:
        """Depths of every registry and band, pause state, cap, age of the oldest job,
        and ``awaiting_compute`` (:func:`awaiting_compute`)
        from the workers' ``heartbeats`` (read here when not given)."""
        return stats_many(self.connection, self.settings, [self.name], heartbeats)[0]


def kept_since(settings: Settings, status: JobStatus) -> str:
    """The lowest score of a finished/failed registry entry whose record is still
    kept by the settings' retention (older ones wait for a prune: not listed)."""
    ttl = (settings.result_ttl if status == JobStatus.FINISHED
           else settings.failed_ttl if status == JobStatus.FAILED else 0)
    return f"{time.time() - ttl:.6f}" if ttl > 0 else "-inf"


def stats_many(connection: RedisClient, settings: Settings, names: list[str],
               heartbeats: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """``Queue.stats()`` of each queue of ``names``, in a few pipelines whatever their
    number (the depths of all; the head of each band of those with pending jobs and
    the due count of those with scheduled ones; the ``enqueued_at`` of those heads),
    one ``TIME`` and the workers' ``heartbeats`` (read here when not given)."""
    connection = decoding(connection)
    keys = Keys(settings.prefix)
    failed_since = kept_since(settings, JobStatus.FAILED)
    finished_since = kept_since(settings, JobStatus.FINISHED)
    pipe = connection.pipeline(transaction=False)
    for name in names:
        k = keys.queue(name)
        pipe.zcard(k.pending)
        for _, low, high in BANDS:
            pipe.zcount(k.pending, *_band_range(low, high))
        for reg in (k.started, k.scheduled):
            pipe.zcard(reg)
        pipe.zcount(k.failed, failed_since, "+inf")
        pipe.zcount(k.finished, finished_since, "+inf")
        pipe.exists(k.paused)
        pipe.get(k.max_active)
        pipe.zrange(k.pending, -1, -1)
        pipe.hlen(k.groups)
        pipe.hgetall(k.rate)
        pipe.zcard(k.deferred)
        pipe.zcard(k.batches)
        pipe.zcard(k.held)
        pipe.hgetall(k.group_rate)
        pipe.hgetall(k.group_rate_held)
    answers = pipe.execute() if names else []
    size = len(answers) // max(len(names), 1)
    docs = [_stats_doc(name, answers[n * size:(n + 1) * size]) for n, name in enumerate(names)]
    if any(d["pending"] or d["scheduled"] for d in docs):
        # not pipelined: a cluster pipeline refuses TIME
        _waiting(connection, keys, docs, server_time(connection))
    for doc in docs:
        del doc["_tail"]
    if heartbeats is None and docs:
        heartbeats = read_heartbeats(connection, settings.prefix)
    for doc in docs:
        doc["awaiting_compute"] = awaiting_compute(doc, heartbeats or [])
    return docs


def _stats_doc(name: str, reply: list[Any]) -> dict[str, Any]:
    pending, *rest = reply
    group_rate = _group_rate_doc(*rest[-2:])
    del rest[-2:]
    held = rest.pop()
    bands = dict(zip((b[0] for b in BANDS), rest[:len(BANDS)]))
    open_batches = rest.pop()
    deferred = rest.pop()
    rate = rest.pop()
    started, scheduled, failed, finished, paused, cap, tail, groups = rest[len(BANDS):]
    return {
        "queue": name, "pending": pending, "bands": bands, "started": started,
        "scheduled": scheduled, "failed": failed, "finished": finished,
        "paused": bool(paused), "max_active": int(cap) if cap is not None else None,
        "busy_groups": groups, "oldest_age": None,
        "rate_limit": _rate_doc(rate), "group_rate_limit": group_rate,
        "deferred": deferred, "open_batches": open_batches, "held": held, "due": 0,
        "_tail": list(tail),
    }


def _waiting(connection: RedisClient, keys: Keys, docs: list[dict[str, Any]],
             server_now: float) -> None:
    """The age of each queue's oldest pending job and the count of its due scheduled
    jobs. The oldest is the one with the lowest seq, not the lowest score: the tail of
    each band is looked at, and the oldest ``enqueued_at`` taken."""
    busy = [d for d in docs if d["pending"]]
    heads = _heads_and_dues(connection, keys, busy, docs, server_now)
    _oldest_ages(connection, keys, busy, heads, server_now)


def _heads_and_dues(connection: RedisClient, keys: Keys, busy: list[dict[str, Any]],
                    docs: list[dict[str, Any]], server_now: float) -> list[Any]:
    """One round trip: each band's head of the ``busy`` queues (returned, band by band)
    and the count of due scheduled jobs of each queue (set as ``due``)."""
    timed = [d for d in docs if d["scheduled"]]
    pipe = connection.pipeline(transaction=False)
    for doc in busy:
        for _, lo, hi in BANDS:
            pipe.zrangebyscore(keys.queue(doc["queue"]).pending, *_band_range(lo, hi),
                               start=0, num=1)
    for doc in timed:
        pipe.zcount(keys.queue(doc["queue"]).scheduled, "-inf", f"{server_now:.6f}")
    replies = pipe.execute()
    for doc, due in zip(timed, replies[len(busy) * len(BANDS):], strict=True):
        doc["due"] = int(due)
    return list(replies[:len(busy) * len(BANDS)])


def _oldest_ages(connection: RedisClient, keys: Keys, busy: list[dict[str, Any]],
                 heads: list[Any], server_now: float) -> None:
    """One round trip: ``oldest_age`` of each ``busy`` queue, from the ``enqueued_at``
    of its bands' heads and its tail."""
    pipe = connection.pipeline(transaction=False)
    asked: list[tuple[dict[str, Any], int]] = []
    for n, doc in enumerate(busy):
        ids = [h[0] for h in heads[n * len(BANDS):(n + 1) * len(BANDS)] if h] + doc["_tail"]
        for job_id in ids:
            pipe.hget(keys.queue(doc["queue"]).job(job_id), "enqueued_at")
        asked.append((doc, len(ids)))
    stamps = pipe.execute() if any(count for _, count in asked) else []
    at = 0
    for doc, count in asked:
        found = [float(x) for x in stamps[at:at + count] if x]
        at += count
        if found:
            doc["oldest_age"] = max(0.0, server_now - min(found))


#: worker states in which a free slot claims (not started yet, suspended or throttled)
_CLAIMING = ("idle", "busy")


def free_slots(queue: str, heartbeats: list[dict[str, str]]) -> int:
    """Slots free now, by their heartbeats, in the live workers that serve ``queue`` and
    claim (idle or busy, not suspended, throttled or starting): each worker's
    ``concurrency`` minus its running jobs. A free slot of a worker that serves several
    queues counts for each of them (it takes the next ready job of any)."""
    free = 0
    for data in heartbeats:
        if queue not in (data.get("queues") or "").split(","):
            continue
        if data.get("state") not in _CLAIMING:
            continue
        try:
            slots = max(1, int(data.get("concurrency") or 1))
        except ValueError:
            slots = 1
        running = [j for j in (data.get("current_jobs") or "").split(",") if j]
        free += max(0, slots - len(running))
    return free


def awaiting_compute(stats: dict[str, Any], heartbeats: list[dict[str, str]]) -> int:
    """Seed 003's *awaitingCompute* of one queue: its jobs ready now (``pending``, plus
    ``due``: scheduled jobs whose time has come, promoted by the next claim) that no
    free slot will take: the ready jobs beyond the free slots of the workers serving
    the queue (:func:`free_slots`), and beyond its ``max_active`` cap's room. A paused
    queue's jobs wait for ``unpause``, not for compute: 0. Held and deferred jobs are
    not ready. ``pending`` = ``awaiting_compute`` + the jobs a free slot is about to
    take; seed 003's *computing* is ``started``."""
    if stats.get("paused"):
        return 0
    ready = int(stats.get("pending") or 0) + int(stats.get("due") or 0)
    free = free_slots(str(stats["queue"]), heartbeats)
    cap = stats.get("max_active")
    if cap is not None:
        free = min(free, max(0, int(cap) - int(stats.get("started") or 0)))
    return max(0, ready - free)


def read_heartbeats(connection: RedisClient, prefix: str = "fw") -> list[dict[str, str]]:
    """The heartbeat hashes of the registered workers whose key lives (read-only; as
    ``admin.workers``, which ``info`` uses)."""
    connection = decoding(connection)
    keys = Keys(prefix)
    pipe = connection.pipeline(transaction=False)
    for name in sorted(texts(connection.smembers(keys.workers))):
        pipe.hgetall(keys.worker(name))
    return [text_hash(data) for data in pipe.execute() if data]


def _rate_doc(data: dict[str, Any]) -> dict[str, Any] | None:
    data = text_hash(data or {})
    if "limit" not in data:
        return None
    return {"limit": int(data["limit"]), "window": float(data["window"]),
            "held_seconds": round(float(data.get("held_seconds") or 0.0), 6)}


def _group_rate_doc(limits: dict[str, Any], held: dict[str, Any]) -> dict[str, Any] | None:
    limits = text_hash(limits or {})
    if not limits:
        return None
    held = text_hash(held or {})

    def spec(value: str) -> dict[str, Any]:
        count, _, window = value.partition(" ")
        return {"limit": int(count), "window": float(window)}

    return {
        "every": spec(limits["every"]) if "every" in limits else None,
        "groups": {k[len("group:"):]: spec(v) for k, v in sorted(limits.items())
                   if k.startswith("group:")},
        "held_seconds": round(float(held.get("held_seconds") or 0.0), 6),
        "held_jobs": int(held.get("held_jobs") or 0),
    }


