"""Reads of many job records for the dashboard and the API, by ``(queue, job id)``.

Each call is one pipeline. Fields are named by the record's attributes
(record.py) and read as ``Job.from_hash`` reads them, so a reader never spells a
hash field nor parses its text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .job import Job
from .keys import Keys
from .record import some_fields
from .redis_client import text_hash

if TYPE_CHECKING:  # pragma: no cover
    from .redis_client import RedisClient

#: a job named by its queue and its id
Ref = tuple[str, str]


def job_hashes(r: RedisClient, prefix: str, refs: Sequence[Ref]) -> list[dict[str, str]]:
    """The text of each job's record, ``{}`` for one that does not exist."""
    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    for queue, job_id in refs:
        pipe.hgetall(keys.queue(queue).job(job_id))
    # a client that decodes answers text already: converted only when it is bytes; a
    # key of another type there (another program's) holds no record: {}
    return [{} if isinstance(d, Exception) else
            d if not d or isinstance(next(iter(d)), str) else text_hash(d)
            for d in pipe.execute(raise_on_error=False)]


def keyed(data: dict[str, str], queue: str, job_id: str) -> Job[Any]:
    """The record of key ``job:<job_id>`` of ``queue``: the key says its id and queue
    (a record written by something else may lack or contradict them)."""
    job = Job.from_hash(data)
    job.id, job.queue = job_id, queue
    return job


def jobs(r: RedisClient, prefix: str, refs: Sequence[Ref]) -> list[Job[Any] | None]:
    """Each job's record (None for one that does not exist), in the order of ``refs``."""
    return [keyed(d, queue, job_id) if d else None
            for (queue, job_id), d in zip(refs, job_hashes(r, prefix, refs), strict=True)]


def job_fields(r: RedisClient, prefix: str, refs: Sequence[Ref],
               names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Fields ``names`` (record attributes, not the payload's) of each job: name ->
    value, None when absent (every one, for a job that does not exist)."""
    fields, read = some_fields(names)
    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    if len(fields) == 1:    # HGET: a third cheaper than an HMGET of one field
        field = fields[0]
        for queue, job_id in refs:
            pipe.hget(keys.queue(queue).job(job_id), field)
        return [read((None if isinstance(value, Exception) else value,))
                for value in pipe.execute(raise_on_error=False)]
    for queue, job_id in refs:
        pipe.hmget(keys.queue(queue).job(job_id), fields)
    none = [None] * len(fields)      # a key of another type holds no record: no fields
    return [read(none if isinstance(values, Exception) else values)
            for values in pipe.execute(raise_on_error=False)]
