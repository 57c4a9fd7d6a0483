"""Reads across queues: search by job id or function, the failed jobs of every
queue with filters, retries apart from delayed jobs, batches. Every read is
bounded: a window of ``WINDOW`` ids per registry, their fields read with one
pipelined ``HMGET`` of the few fields a filter needs, then full records only for
the page shown."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..core.connection import texts
from ..core.job import Job, JobStatus
from ..core.keys import Keys
from .service import STATUSES, job_summary

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: ids read per registry and queue by a search or a cross-queue filter
WINDOW = 2000
#: what a search shows at most
SEARCH_LIMIT = 100
_JOB_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


def looks_like_job_id(text: str) -> bool:
    return bool(_JOB_ID.match(text))


def _window(r: RedisClient, key: str, newest_first: bool, size: int = WINDOW) -> list[str]:
    ids = r.zrevrange(key, 0, size - 1) if newest_first else r.zrange(key, 0, size - 1)
    return texts(list(ids))


def records(r: RedisClient, prefix: str, refs: list[tuple[str, str]]) -> list[Job[Any]]:
    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    for queue, job_id in refs:
        pipe.hgetall(keys.queue(queue).job(job_id))
    return [Job.from_hash(d) for d in pipe.execute() if d]


def search_functions(r: RedisClient, prefix: str, queues: list[str], text: str,
                     limit: int = SEARCH_LIMIT) -> dict[str, Any]:
    """Jobs whose function contains ``text``: the newest ``WINDOW`` of each registry of
    each queue are looked at (their ``func`` field only), at most ``limit`` shown."""
    keys = Keys(prefix)
    refs: list[tuple[str, str]] = []
    for queue in queues:
        k = keys.queue(queue)
        for status in STATUSES:
            newest = status not in (JobStatus.SCHEDULED, JobStatus.STARTED, JobStatus.DEFERRED)
            refs.extend((queue, i) for i in _window(r, k.registry(status), newest, 500))
    found: list[tuple[str, str]] = []
    for start in range(0, len(refs), 1000):
        part = refs[start:start + 1000]
        pipe = r.pipeline(transaction=False)
        for queue, job_id in part:
            pipe.hget(keys.queue(queue).job(job_id), "func")
        for ref, func in zip(part, pipe.execute(), strict=True):
            func = func.decode() if isinstance(func, bytes) else func
            if func and text in func:
                found.append(ref)
        if len(found) >= limit:
            break
    return {"query": text, "looked_at": len(refs), "truncated": len(found) > limit,
            "jobs": [job_summary(j) for j in records(r, prefix, found[:limit])]}
