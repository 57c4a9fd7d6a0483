"""core/job_reads.py: the web's reads of job records, named by the record's attributes."""

from __future__ import annotations

import pytest
import redis

from fusionworker.core import job_reads, record
from fusionworker.core.job import JobStatus


def test_fields_are_read_as_the_record_reads_them(queue, r, redis_url, settings):
    q = queue("reads")
    job = q.enqueue("tests.jobs:noop", 1)
    r.hset(q.qkeys.job(job.id), mapping={"attempts": "2", "started_at": "12.5",
                                         "progress": "nan", "worker": "w.1"})
    refs = [("reads", job.id), ("reads", "gone")]
    names = ("func", "status", "attempts", "started_at", "progress", "worker_name")
    for client in (r, redis.Redis.from_url(redis_url)):     # text or bytes replies
        found = job_reads.job_fields(client, settings.prefix, refs, names)
        assert found[0] == {"func": "tests.jobs:noop", "status": JobStatus.QUEUED,
                            "attempts": 2, "started_at": 12.5, "progress": None,
                            "worker_name": "w.1"}
        assert found[1] == dict.fromkeys(names)     # no record: every field absent
        jobs = job_reads.jobs(client, settings.prefix, refs)
        assert jobs[1] is None and jobs[0] is not None
        assert (jobs[0].id, jobs[0].queue, jobs[0].args) == (job.id, "reads", [1])


def test_the_key_names_the_job_of_a_record_written_by_hand(r, settings):
    key = f"{settings.prefix}:{{byhand}}:job:j1"
    r.hset(key, mapping={"func": "m:f", "id": "other", "queue": "elsewhere"})
    job = job_reads.jobs(r, settings.prefix, [("byhand", "j1")])[0]
    assert job is not None and (job.id, job.queue, job.func) == ("j1", "byhand", "m:f")
    assert job_reads.job_hashes(r, settings.prefix, [("byhand", "j1")]) == [
        {"func": "m:f", "id": "other", "queue": "elsewhere"}]


def test_a_name_that_is_no_field_read_alone_is_refused():
    with pytest.raises(ValueError, match="worker"):
        record.some_fields(("worker",))         # the hash's name, not the record's
    with pytest.raises(ValueError, match="args"):
        record.some_fields(("args",))           # a payload field: Job.from_hash reads it
    fields, _ = record.some_fields(("worker_name", "description"))
    assert fields == ["worker", "description"]
