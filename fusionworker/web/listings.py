"""Reads across queues: search by job id or function, the failed jobs of every
queue with filters, retries apart from delayed jobs, batches. Every read is
bounded: a window of ``WINDOW`` ids per registry, their fields read with one
pipelined ``HMGET`` of the few fields a filter needs, then full records only for
the page shown."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..core import job_reads
from ..core.batch import batch_doc, unreadable_batch
from ..core.connection import text_hash, texts
from ..core.job import Job, JobStatus
from ..core.keys import Keys
from .service import STATUSES, job_summary

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: ids read per registry and queue by a search or a cross-queue filter
WINDOW = 1000
#: what a search shows at most
SEARCH_LIMIT = 100
_JOB_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


def looks_like_job_id(text: str) -> bool:
    return bool(_JOB_ID.match(text))


def records(r: RedisClient, prefix: str, refs: list[tuple[str, str]]) -> list[Job[Any]]:
    return [job for job in job_reads.jobs(r, prefix, refs) if job is not None]


def search_functions(r: RedisClient, prefix: str, queues: list[str], text: str,
                     limit: int = SEARCH_LIMIT) -> dict[str, Any]:
    """Jobs whose function contains ``text``: the newest ``WINDOW`` of each registry of
    each queue are looked at (their ``func`` field only), at most ``limit`` shown."""
    keys = Keys(prefix)
    refs = _windows(r, keys, queues)
    found: list[tuple[str, str]] = []
    for start in range(0, len(refs), 1000):
        part = refs[start:start + 1000]
        for ref, job in zip(part, job_reads.job_fields(r, prefix, part, ("func",)), strict=True):
            if job["func"] and text in job["func"]:
                found.append(ref)
        if len(found) >= limit:
            break
    return {"query": text, "looked_at": len(refs), "truncated": len(found) > limit,
            "jobs": [job_summary(j) for j in records(r, prefix, found[:limit])]}


def _windows(r: RedisClient, keys: Keys, queues: list[str]) -> list[tuple[str, str]]:
    """``(queue, id)`` of the first 500 of each registry of each queue (soonest for the
    scheduled, started and deferred, newest for the others), 1,000 queues a pipeline."""
    refs: list[tuple[str, str]] = []
    for start in range(0, len(queues), 1000):
        names = queues[start:start + 1000]
        pipe = r.pipeline(transaction=False)
        for queue in names:
            k = keys.queue(queue)
            for status in STATUSES:
                if status in (JobStatus.SCHEDULED, JobStatus.STARTED, JobStatus.DEFERRED):
                    pipe.zrange(k.registry(status), 0, 499)
                else:
                    pipe.zrevrange(k.registry(status), 0, 499)
        windows = iter(pipe.execute())
        for queue in names:
            for _ in STATUSES:
                refs.extend((queue, i) for i in texts(list(next(windows))))
    return refs


# -- failed jobs of every queue ---------------------------------------------------------

#: the time filter of the failed page: label -> seconds back from now
SINCE = {"": None, "15m": 900, "1h": 3600, "24h": 86400, "7d": 7 * 86400}


def failed(r: RedisClient, prefix: str, queues: list[str], *, function: str = "",
           error_type: str = "", since: float | None = None, before: float | None = None,
           size: int = 50) -> dict[str, Any]:
    """Failed jobs of ``queues``, newest first, merged by failure time.

    Paged by a cursor: ``before`` (a failure time, exclusive) -> ``next_before``. Each
    queue's registry is read with ``ZREVRANGEBYSCORE (before since LIMIT``: ``size``
    ids without a filter; with a function or error-type filter ``WINDOW`` ids, whose
    ``func`` and ``error_type`` fields only are read. A page lists only jobs above
    the deepest point every queue was read to, so none is skipped."""
    keys = Keys(prefix)
    top = f"({before!r}" if before is not None else "+inf"
    low = repr(since) if since is not None else "-inf"
    filtered = bool(function or error_type)
    take = WINDOW if filtered else size
    rows, floor, total = _failed_windows(r, keys, queues, top, low, take)
    if filtered:
        rows = _filter(r, prefix, rows, function, error_type)
    rows.sort(key=lambda row: row[0], reverse=True)
    shown = [row for row in rows if row[0] >= floor][:size]
    if len(shown) == size:
        next_before: float | None = shown[-1][0]
    else:
        next_before = floor if floor > float("-inf") else None
    jobs = records(r, prefix, [(queue, job_id) for _, queue, job_id in shown])
    return {"jobs": [job_summary(j) for j in jobs], "total": None if filtered else total,
            "next_before": next_before, "before": before, "size": size}


def _failed_windows(r: RedisClient, keys: Keys, queues: list[str], top: str, low: str,
                    take: int) -> tuple[list[tuple[float, str, str]], float, int]:
    """One pipeline: ``(failed at, queue, id)`` of up to ``take`` failed jobs of each
    queue between ``top`` and ``low``, the deepest score every queue was read down to
    (exclusive), and how many failed jobs lie in that time range in all."""
    pipe = r.pipeline(transaction=False)
    for queue in queues:
        pipe.zrevrangebyscore(keys.queue(queue).failed, top, low, start=0, num=take,
                              withscores=True)
        pipe.zcount(keys.queue(queue).failed, low, top)
    answers = pipe.execute()
    rows: list[tuple[float, str, str]] = []
    floor = float("-inf")
    total = 0
    for n, queue in enumerate(queues):
        window = [(float(score), member.decode() if isinstance(member, bytes) else member)
                  for member, score in answers[2 * n]]
        total += int(answers[2 * n + 1])
        if len(window) == take:
            floor = max(floor, window[-1][0])
        rows.extend((score, queue, job_id) for score, job_id in window)
    return rows, floor, total


def _filter(r: RedisClient, prefix: str, rows: list[tuple[float, str, str]], function: str,
            error_type: str) -> list[tuple[float, str, str]]:
    kept = []
    for start in range(0, len(rows), 1000):
        part = rows[start:start + 1000]
        found = job_reads.job_fields(r, prefix, [(queue, job_id) for _, queue, job_id in part],
                                     ("func", "error_type"))
        for row, job in zip(part, found, strict=True):
            func, etype = job["func"] or "", job["error_type"] or ""
            if function and function not in func:
                continue
            if error_type and error_type.lower() not in etype.lower():
                continue
            kept.append(row)
    return kept


# -- scheduled: delayed jobs and retries ---------------------------------------------------

def scheduled(r: RedisClient, prefix: str, queues: list[str], retries: bool,
              size: int = 100) -> dict[str, Any]:
    """The soonest ``WINDOW`` scheduled ids of each queue, split by their ``attempts``
    field: a retry waits out its backoff after a failed attempt (attempts > 0), a
    delayed job has not run yet. At most ``size`` shown per queue."""
    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    for queue in queues:
        pipe.zrange(keys.queue(queue).scheduled, 0, WINDOW - 1)
        pipe.zcard(keys.queue(queue).scheduled)
    answers = pipe.execute()
    out = []
    for n, queue in enumerate(queues):
        ids = texts(list(answers[2 * n]))
        if not ids:
            continue
        found = job_reads.job_fields(r, prefix, [(queue, i) for i in ids], ("attempts",))
        picked = [job_id for job_id, job in zip(ids, found, strict=True)
                  if ((job["attempts"] or 0) > 0) == retries]
        if picked:
            out.append({"queue": queue, "count": len(picked), "looked_at": len(ids),
                        "scheduled": int(answers[2 * n + 1]),
                        "jobs": [job_summary(j) for j in
                                 records(r, prefix, [(queue, i) for i in picked[:size]])]})
    return {"retries": retries, "queues": out}


# -- batches -----------------------------------------------------------------------------

def batches(r: RedisClient, prefix: str, queues: list[str], before: float | None = None,
            size: int = 50) -> dict[str, Any]:
    """Batches whose callbacks have not fired yet (the ``batches`` set of each queue),
    newest first, merged by creation time, paged by ``before`` like :func:`failed`."""
    keys = Keys(prefix)
    top = f"({before!r}" if before is not None else "+inf"
    pipe = r.pipeline(transaction=False)
    for queue in queues:
        pipe.zrevrangebyscore(keys.queue(queue).batches, top, "-inf", start=0,
                              num=size, withscores=True)
        pipe.zcard(keys.queue(queue).batches)
    answers = pipe.execute(raise_on_error=False)
    rows: list[tuple[float, str, str]] = []
    total = 0
    unreadable: list[dict[str, str]] = []     # a queue's index of another type: said, skipped
    for n, queue in enumerate(queues):
        listed, count = answers[2 * n], answers[2 * n + 1]
        if isinstance(listed, Exception) or isinstance(count, Exception):
            error = listed if isinstance(listed, Exception) else count
            unreadable.append({"queue": queue, "error": str(error)[:200]})
            continue
        total += int(count)
        rows.extend((float(score), queue, member.decode() if isinstance(member, bytes)
                     else member) for member, score in listed)
    rows.sort(key=lambda row: row[0], reverse=True)
    rows = rows[:size]
    docs = batch_docs(r, prefix, [(queue, batch_id) for _, queue, batch_id in rows])
    return {"batches": docs, "total": total, "before": before,
            "next_before": rows[-1][0] if len(rows) == size else None,
            "unreadable": unreadable}


def batch_docs(r: RedisClient, prefix: str, refs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """``batch_status`` of each batch, in one pipeline (HGETALL and SCARD each); one whose
    keys Redis refuses to read is shown as such (:func:`unreadable_batch`)."""
    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    for queue, batch_id in refs:
        qkeys = keys.queue(queue)
        pipe.hgetall(qkeys.batch(batch_id))
        pipe.scard(qkeys.batch_ended(batch_id))
    answers = pipe.execute(raise_on_error=False)
    docs = []
    for n, (queue, batch_id) in enumerate(refs):
        data, ended = answers[2 * n], answers[2 * n + 1]
        if isinstance(data, Exception) or (data and isinstance(ended, Exception)):
            doc = unreadable_batch(batch_id, data if isinstance(data, Exception) else ended)
        else:
            doc = batch_doc(batch_id, text_hash(data), 0 if not data else int(ended))
        docs.append({"queue": queue, **doc})
    return docs
