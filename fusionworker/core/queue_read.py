"""Reads of a queue: one job, ids and jobs by status, the stats of ``info``.

Plain commands (no script). :class:`QueueReads` is a part of ``Queue``; the
module functions work on a client and need no ``Queue``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import redis

from ..exceptions import NoSuchJob
from . import admin
from .job import DONE_STATUSES, SEQ_LIMIT, Job, JobStatus
from .keys import Keys, QueueKeys
from .listing import Listing
from .queue_names import find_queue_of as find_queue_of
from .queue_names import known_queues as known_queues
from .redis_client import decoding, server_time, stored_count, stored_number, text_hash, texts

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .redis_client import RedisClient

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

    @property
    def job_ids(self) -> Listing[str]:
        """``q.job_ids(status, limit)``: ids by registry, queued (best first), scheduled
        (soonest first), started, deferred, held (oldest first), finished/failed/canceled
        and stopped (those of failed: :meth:`_stopped_ids`) (newest first); ``q.job_ids``
        uncalled: every queued id in run order, as RQ's property (listing.py)."""
        return Listing(self._job_ids, self._queued_ids)

    @property
    def jobs(self) -> Listing[Job[Any]]:
        """``q.jobs(status, limit)``: the jobs of :attr:`job_ids`; ``q.jobs`` uncalled:
        every queued job in run order, as RQ's property (listing.py)."""
        return Listing(self._jobs, lambda: self._records(self._queued_ids()))

    def _queued_ids(self) -> list[str]:
        return texts(self.connection.zrevrange(self.qkeys.pending, 0, -1))

    def _job_ids(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[str]:
        r, k = self.connection, self.qkeys
        stop = max(limit, 1) - 1
        try:
            status = JobStatus(status)
        except ValueError:
            raise ValueError(f"unknown status {status!r}") from None
        if status == JobStatus.QUEUED:
            return texts(r.zrevrange(k.pending, 0, stop))
        if status == JobStatus.STOPPED:
            return self._stopped_ids(stop + 1)
        if status in DONE_STATUSES:
            return texts(r.zrevrangebyscore(k.registry(status), "+inf", self._kept_since(status),
                                            start=0, num=stop + 1))
        return texts(r.zrange(k.registry(status), 0, stop))

    def _stopped_ids(self, limit: int, scan: int = 10_000) -> list[str]:
        """The stopped jobs, newest first. They are kept in the failed registry (as RQ
        keeps them), told apart by their records' status: read in pages of the failed
        ones, at most ``scan`` of them."""
        r, k = self.connection, self.qkeys
        since = self._kept_since(JobStatus.FAILED)
        found: list[str] = []
        for start in range(0, scan, 500):
            ids = texts(r.zrevrangebyscore(k.registry(JobStatus.FAILED), "+inf", since,
                                           start=start, num=500))
            pipe = r.pipeline(transaction=False)
            for job_id in ids:
                pipe.hget(k.job(job_id), "status")
            found += [i for i, st in zip(ids, pipe.execute()) if st == JobStatus.STOPPED]
            if len(found) >= limit or len(ids) < 500:
                break
        return found[:limit]

    def _jobs(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[Job[Any]]:
        return self._records(self._job_ids(status, limit))

    def _records(self, ids: list[str]) -> list[Job[Any]]:
        pipe = self.connection.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.qkeys.job(job_id))
        # a job key of another type (another program's) holds no record: left out
        found = [Job.from_hash(d) for d in pipe.execute(raise_on_error=False)
                 if d and not isinstance(d, Exception)]
        for job in found:
            job._queue = self
        return found

    def stats(self, heartbeats: list[dict[str, str]] | None = None) -> dict[str, Any]:
        """Depths of every registry and band, pause state, cap, age of the oldest job,
        and ``awaiting_compute`` (:func:`awaiting_compute`)
        from the workers' ``heartbeats`` (read here when not given)."""
        doc = stats_many(self.connection, self.settings, [self.name], heartbeats)[0]
        if "unreadable" in doc:          # asked of this queue alone: Redis's answer
            raise redis.ResponseError(doc["unreadable"])
        return doc


def kept_since(settings: Settings, status: JobStatus) -> str:
    """The lowest score of a finished/failed registry entry whose record is still
    kept by the settings' retention (older ones wait for a prune: not listed)."""
    ttl = (settings.result_ttl if status == JobStatus.FINISHED
           else settings.failed_ttl if status == JobStatus.FAILED else 0)
    return f"{time.time() - ttl:.6f}" if ttl > 0 else "-inf"


def stats_many(connection: RedisClient, settings: Settings, names: list[str],
               heartbeats: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """``Queue.stats()`` of each queue of ``names``, in a few pipelines whatever their
    number, each asking only about the queues the one before found something in:

    1. two ``EXISTS`` a queue: any of its registries (the depths), any of its settings
       (paused, cap, rate limits). A queue with neither costs these two commands;
    2. the queues with a registry: the head of ``pending`` (up to
       :data:`WHOLE_PENDING` + 1 jobs, with their scores: a short queue's bands, band
       heads and tail come from it), its live failed and finished counts, one
       ``EXISTS`` of the rarer registries (started, scheduled, deferred, batches, held,
       groups); the queues with a setting: the settings;
    3. the rarer registries' depths where that ``EXISTS`` found any; each band's count
       and head and the tail of a longer ``pending``;
    4. one ``TIME``, then the ``enqueued_at`` of the heads and tails (the oldest
       pending job's age) and the due count of the queues with scheduled jobs.

    Then the workers' ``heartbeats`` (read here when not given). A queue whose keys
    Redis refuses to read (a key of another type, written by another program) does not
    cost the others theirs: they are read again one queue at a time, and its stats are
    empty with ``unreadable`` saying what Redis answered (``Queue.stats()`` raises it)."""
    try:
        return _stats_all(connection, settings, names, heartbeats)
    except redis.ResponseError:
        pass
    if heartbeats is None:
        heartbeats = admin.workers(connection, settings.prefix)
    return [_stats_alone(connection, settings, name, heartbeats) for name in names]


def _stats_alone(connection: RedisClient, settings: Settings, name: str,
                 heartbeats: list[dict[str, str]]) -> dict[str, Any]:
    try:
        return _stats_all(connection, settings, [name], heartbeats)[0]
    except redis.ResponseError as exc:
        doc = _empty_doc(name)
        del doc["_ids"]
        doc["awaiting_compute"] = 0
        doc["unreadable"] = f"Redis refused a command: {str(exc)[:200]}"
        return doc


def _stats_all(connection: RedisClient, settings: Settings, names: list[str],
               heartbeats: list[dict[str, str]] | None) -> list[dict[str, Any]]:
    """:func:`stats_many`'s pipelines, every queue at once."""
    connection = decoding(connection)
    keys = Keys(settings.prefix)
    qkeys = [keys.queue(name) for name in names]
    docs = [_empty_doc(name) for name in names]
    found = _present(connection, qkeys)
    deep = _first_reads(connection, settings, qkeys, docs, found)
    _second_reads(connection, qkeys, docs, deep)
    if any(d["pending"] or d["scheduled"] for d in docs):
        # not pipelined: a cluster pipeline refuses TIME
        _waiting(connection, qkeys, docs, server_time(connection))
    for doc in docs:
        del doc["_ids"]
    if heartbeats is None and docs:
        heartbeats = admin.workers(connection, settings.prefix)
    for doc in docs:
        doc["awaiting_compute"] = awaiting_compute(doc, heartbeats or [])
    return docs


#: a ``pending`` of up to this many jobs is read whole (ids and scores: one command)
#: for its band counts, band heads and tail; a longer one by a count and a head a band
WHOLE_PENDING = 32


def _empty_doc(name: str) -> dict[str, Any]:
    """The stats of a queue with no job and no setting (``_ids``: the ids whose
    ``enqueued_at`` give the oldest pending job's age)."""
    return {
        "queue": name, "pending": 0, "bands": {b[0]: 0 for b in BANDS}, "started": 0,
        "scheduled": 0, "failed": 0, "finished": 0, "paused": False, "max_active": None,
        "busy_groups": 0, "oldest_age": None, "rate_limit": None, "group_rate_limit": None,
        "deferred": 0, "open_batches": 0, "held": 0, "due": 0, "_ids": [],
    }


def _rare_keys(k: QueueKeys) -> tuple[str, ...]:
    """The registries most queues have empty most of the time (order: ``_RARE``)."""
    return k.started, k.scheduled, k.deferred, k.batches, k.held, k.groups


#: the fields of ``_rare_keys``
_RARE = ("started", "scheduled", "deferred", "open_batches", "held", "busy_groups")


def _present(connection: RedisClient, qkeys: list[QueueKeys]) -> list[tuple[int, int]]:
    """One round trip: (registries, settings) found of each queue (two ``EXISTS``; a
    queue's keys share its hash tag: one slot)."""
    if not qkeys:
        return []
    pipe = connection.pipeline(transaction=False)
    for k in qkeys:
        pipe.exists(k.pending, k.failed, k.finished, *_rare_keys(k))
        pipe.exists(k.paused, k.max_active, k.rate, k.group_rate, k.group_rate_held)
    replies = pipe.execute()
    return list(zip(replies[::2], replies[1::2], strict=True))


def _first_reads(connection: RedisClient, settings: Settings, qkeys: list[QueueKeys],
                 docs: list[dict[str, Any]], found: list[tuple[int, int]],
                 ) -> list[tuple[int, bool, bool]]:
    """One round trip (step 2 of :func:`stats_many`): sets what it read on the docs;
    returns (n, rarer registries found, ``pending`` longer than
    :data:`WHOLE_PENDING`) of the queues step 3 reads more of."""
    since = (kept_since(settings, JobStatus.FAILED), kept_since(settings, JobStatus.FINISHED))
    pipe = connection.pipeline(transaction=False)
    asked: list[tuple[int, bool, bool]] = []
    for n, (k, (registries, configured)) in enumerate(zip(qkeys, found, strict=True)):
        if registries:
            pipe.zrange(k.pending, 0, WHOLE_PENDING, withscores=True)
            pipe.zcount(k.failed, since[0], "+inf")
            pipe.zcount(k.finished, since[1], "+inf")
            pipe.exists(*_rare_keys(k))
        if configured:
            pipe.exists(k.paused)
            pipe.get(k.max_active)
            for key in (k.rate, k.group_rate, k.group_rate_held):
                pipe.hgetall(key)
        if registries or configured:
            asked.append((n, bool(registries), bool(configured)))
    replies = iter(pipe.execute() if asked else [])
    deep: list[tuple[int, bool, bool]] = []
    for n, registries, configured in asked:
        if registries:
            deep += _depths_read(docs[n], n, [next(replies) for _ in range(4)])
        if configured:
            _settings_read(docs[n], [next(replies) for _ in range(5)])
    return deep


def _depths_read(doc: dict[str, Any], n: int, reply: list[Any]) -> list[tuple[int, bool, bool]]:
    """Sets step 2's depths on ``doc``; what step 3 reads more of (none or one entry)."""
    head, doc["failed"], doc["finished"], rare = reply
    long = len(head) > WHOLE_PENDING
    if not long:
        _whole_pending(doc, head)
    return [(n, bool(rare), long)] if rare or long else []


def _settings_read(doc: dict[str, Any], reply: list[Any]) -> None:
    paused, cap, rate, group_rate, group_held = reply
    cap_n = stored_number(cap)      # a cap Redis holds that is no number: shown as none
    doc.update(paused=bool(paused), max_active=int(cap_n) if cap_n is not None else None,
               rate_limit=_rate_doc(rate), group_rate_limit=_group_rate_doc(group_rate, group_held))


def _in_band(score: float) -> int:
    """The index in ``BANDS`` of the band holding ``score`` (-1: none)."""
    for b, (_, low, high) in enumerate(BANDS):
        lo, hi = _band_range(low, high)
        if lo <= score <= hi:
            return b
    return -1


def _whole_pending(doc: dict[str, Any], entries: list[tuple[str, float]]) -> None:
    """The depth, band counts, band heads and tail of a ``pending`` read whole (in
    ``ZRANGE`` order: by score, then id)."""
    doc["pending"] = len(entries)
    heads: list[str | None] = [None] * len(BANDS)
    for job_id, score in entries:
        b = _in_band(score)
        if b >= 0:
            doc["bands"][BANDS[b][0]] += 1
            heads[b] = heads[b] or job_id
    tail = [entries[-1][0]] if entries else []
    doc["_ids"] = list(dict.fromkeys([h for h in heads if h] + tail))


def _second_reads(connection: RedisClient, qkeys: list[QueueKeys], docs: list[dict[str, Any]],
                  deep: list[tuple[int, bool, bool]]) -> None:
    """One round trip (step 3 of :func:`stats_many`): the depths of the rarer registries
    of the queues that have any, and the depth, each band's count and head, and the tail
    of a ``pending`` longer than :data:`WHOLE_PENDING`."""
    if not deep:
        return
    pipe = connection.pipeline(transaction=False)
    for n, rare, long in deep:
        k = qkeys[n]
        if rare:
            for key in _rare_keys(k)[:-1]:
                pipe.zcard(key)
            pipe.hlen(k.groups)
        if long:
            pipe.zcard(k.pending)
            for _, low, high in BANDS:
                pipe.zcount(k.pending, *_band_range(low, high))
                pipe.zrangebyscore(k.pending, *_band_range(low, high), start=0, num=1)
            pipe.zrange(k.pending, -1, -1)
    replies = iter(pipe.execute())
    for n, rare, long in deep:
        doc = docs[n]
        if rare:
            for field in _RARE:
                doc[field] = next(replies)
        if long:
            doc["pending"] = next(replies)
            heads: list[str] = []
            for band, _, _ in BANDS:
                doc["bands"][band] = next(replies)
                heads += next(replies)
            doc["_ids"] = list(dict.fromkeys(heads + next(replies)))


def _waiting(connection: RedisClient, qkeys: list[QueueKeys], docs: list[dict[str, Any]],
             server_now: float) -> None:
    """One round trip (step 4 of :func:`stats_many`): the count of due scheduled jobs of
    each queue with scheduled ones, and the age of each queue's oldest pending job. The
    oldest is the one with the lowest seq, not the lowest score: the head of each band
    and the tail are looked at, and the oldest ``enqueued_at`` taken."""
    timed = [n for n, doc in enumerate(docs) if doc["scheduled"]]
    busy = [n for n, doc in enumerate(docs) if doc["_ids"]]
    pipe = connection.pipeline(transaction=False)
    for n in timed:
        pipe.zcount(qkeys[n].scheduled, "-inf", f"{server_now:.6f}")
    for n in busy:
        for job_id in docs[n]["_ids"]:
            pipe.hget(qkeys[n].job(job_id), "enqueued_at")
    replies = iter(pipe.execute(raise_on_error=False) if timed or busy else [])
    for n in timed:
        due = next(replies)
        if isinstance(due, Exception):    # the queue's own key: the queue cannot be read
            raise due
        docs[n]["due"] = int(due)
    for n in busy:
        stamps = [next(replies) for _ in docs[n]["_ids"]]
        docs[n]["oldest_age"] = _oldest_age(stamps, server_now)


def _oldest_age(stamps: list[Any], server_now: float) -> float | None:
    """The age of the oldest of ``stamps`` (``enqueued_at`` values; None: record gone,
    an error: a job key of another type, which holds no record either)."""
    found = [number for x in stamps
             if not isinstance(x, Exception) and (number := stored_number(x)) is not None]
    return max(0.0, server_now - min(found)) if found else None


#: worker states in which a free slot claims (not started yet, suspended or throttled)
_CLAIMING = ("idle", "busy")


def free_slots(queue: str, heartbeats: list[dict[str, str]]) -> int:
    """Slots free now, by their heartbeats, in the live workers that serve ``queue`` and
    claim (idle or busy, not suspended, throttled or starting; a busy one the governor
    holds claims nothing either, nor does one silent past its lease): each worker's
    ``concurrency`` minus its running jobs. A free slot of a worker that serves several
    queues counts for each of them (it takes the next ready job of any)."""
    free = 0
    for data in heartbeats:
        if queue not in (data.get("queues") or "").split(","):
            continue
        # shown_state: "silent" past its lease (aged on the Redis clock by admin.workers)
        if admin.shown_state(data, time.time()) not in _CLAIMING or data.get("throttle"):
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


def _rate_doc(data: dict[str, Any]) -> dict[str, Any] | None:
    data = text_hash(data or {})
    limit, window = stored_number(data.get("limit")), stored_number(data.get("window"))
    if limit is None or window is None or window <= 0:    # none, or none a page can show
        return None
    return {"limit": int(limit), "window": window,
            "held_seconds": round(stored_number(data.get("held_seconds")) or 0.0, 6)}


def _group_rate_doc(limits: dict[str, Any], held: dict[str, Any]) -> dict[str, Any] | None:
    limits = text_hash(limits or {})
    if not limits:
        return None
    held = text_hash(held or {})

    def spec(value: str) -> dict[str, Any] | None:
        count, _, window = value.partition(" ")
        limit, seconds = stored_number(count), stored_number(window)
        if limit is None or seconds is None or seconds <= 0:   # none a page can show
            return None
        return {"limit": int(limit), "window": seconds}

    groups = {k[len("group:"):]: spec(v) for k, v in sorted(limits.items())
              if k.startswith("group:")}
    return {
        "every": spec(limits["every"]) if "every" in limits else None,
        "groups": {name: given for name, given in groups.items() if given is not None},
        "held_seconds": round(stored_number(held.get("held_seconds")) or 0.0, 6),
        "held_jobs": stored_count(held.get("held_jobs")),
    }


