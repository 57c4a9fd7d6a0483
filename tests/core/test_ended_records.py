"""An ended attempt's token is blanked in the outcome's own HSET (no HDEL of its own) and
the error fields go only when there are some: what every reader sees of the record, and
the fences that must still refuse a late write of an ended or reaped attempt."""

from __future__ import annotations

import pytest
import redis

from fusionworker.core.job import Job
from fusionworker.core.scripts import replies

FIELDS = ["func", "tests.jobs:noop", "args", "[]", "kwargs", "{}", "queue", "ended",
          "max_retries", "3"]
ERROR = ["error_type", "ValueError", "error_message", "bad", "traceback", "Traceback ...",
         "failure_reason", "exception"]


def _enqueue(q, job_id):
    q.scripts.enqueue(keys=[q.qkeys.base, q.keys.queues],
                      args=[job_id, 0, "now", 0, "", 0, "", "", *FIELDS])


def _claim(q, token):
    got = replies.claim(q.scripts.claim(keys=[q.qkeys.base], args=["w1", token, 30, 60]))
    return got.jobs[0].job_id if got.jobs else None


def _finish(q, job_id, token, outcome="finished", fields=("result", "1")):
    return replies.finish(q.scripts.finish(keys=[q.qkeys.base], args=[
        job_id, token, outcome, 500, 60, 0, 0, "", *fields]))


def _state(r, q):
    out = {}
    for key in sorted(r.scan_iter(match=q.qkeys.base + "*")):
        kind = r.type(key)
        out[key] = (kind, r.hgetall(key) if kind == "hash" else r.zrange(key, 0, -1, withscores=True)
                    if kind == "zset" else r.dump(key))
    return out


def test_a_finished_job_reads_as_before_its_token_blank(queue, r):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "tok") == "a"
    assert _finish(q, "a", "tok").outcome == "finished"
    raw = r.hgetall(q.qkeys.job("a"))
    assert raw["token"] == "" and raw["status"] == "finished" and raw["result"] == "1"
    assert not {"error_type", "error_message", "traceback", "failure_reason"} & set(raw)
    job = q.fetch_job("a")
    assert job is not None and job.token is None and job.error_type is None
    assert "token" not in job.to_dict() and job.to_dict()["status"] == "finished"
    assert Job.from_hash({k: v for k, v in raw.items() if k != "token"}).to_dict() == job.to_dict()


def test_a_retry_then_a_finish_drops_the_earlier_attempts_error(queue, r):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "t1") == "a"
    assert _finish(q, "a", "t1", "retry", ERROR).outcome == "retry"
    raw = r.hgetall(q.qkeys.job("a"))
    assert raw["status"] == "scheduled" and raw["token"] == "" and raw["error_type"] == "ValueError"
    assert q.fetch_job("a").token is None
    r.zadd(q.qkeys.scheduled, {"a": 1.0})                 # due now
    assert _claim(q, "t2") == "a" and r.hget(q.qkeys.job("a"), "token") == "t2"
    assert _finish(q, "a", "t2").outcome == "finished"
    job = q.fetch_job("a")
    assert job.status == "finished" and job.attempts == 2 and job.result == 1
    assert job.error_type is job.error_message is job.traceback is job.failure_reason is None
    assert not {"error_type", "error_message", "traceback", "failure_reason"} & set(
        r.hgetall(q.qkeys.job("a")))


def test_error_fields_a_finished_outcome_carries_are_dropped_as_before(queue, r):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "tok") == "a"
    assert _finish(q, "a", "tok", fields=("result", "1", *ERROR)).outcome == "finished"
    raw = r.hgetall(q.qkeys.job("a"))
    assert raw["result"] == "1" and "error_type" not in raw and "traceback" not in raw


def test_a_failed_job_reads_without_a_token(queue, r):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "tok") == "a"
    assert _finish(q, "a", "tok", "failed", ERROR).outcome == "failed"
    job = q.fetch_job("a")
    assert job.status == "failed" and job.token is None and job.error_type == "ValueError"
    assert r.zscore(q.qkeys.failed, "a") is not None


def test_a_late_finish_of_a_reaped_attempt_is_refused_with_nothing_written(queue, r):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "t1") == "a"
    r.zadd(q.qkeys.started, {"a": 1.0})                   # its lease is over
    assert replies.requeue(q.scripts.requeue(keys=[q.qkeys.base], args=[
        "a", "reap", "t1", 60])).outcome == "requeued"
    assert _claim(q, "t2") == "a"
    before = _state(r, q)
    assert _finish(q, "a", "t1").stale                    # the reaped attempt, late
    assert _state(r, q) == before
    assert _finish(q, "a", "t2").outcome == "finished"
    before = _state(r, q)
    for token in ("t1", "t2", ""):                        # after the outcome: every one
        assert _finish(q, "a", token).stale
    assert _state(r, q) == before and r.hget(q.qkeys.job("a"), "token") == ""


def test_the_other_fences_refuse_an_ended_attempt(queue, r):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "tok") == "a"
    assert _finish(q, "a", "tok", "retry", ERROR).outcome == "retry"
    before = _state(r, q)
    for token in ("tok", ""):
        assert replies.touch_many(q.scripts.touch_many(keys=[q.qkeys.base], args=[
            30, "a", token])) == [False]
        assert not replies.touch(q.scripts.touch(keys=[q.qkeys.base], args=["a", token, 30]))
        assert replies.progress(q.scripts.progress(keys=[q.qkeys.base], args=[
            "a", token, "", "progress", "0.5"])) == (False, None)
    assert replies.requeue(q.scripts.requeue(keys=[q.qkeys.base], args=[
        "a", "return", "tok", 60])).outcome == "skipped"
    assert _state(r, q) == before


@pytest.mark.parametrize("registry", ["finished", "started"])
def test_a_refused_finish_of_a_retried_job_writes_nothing(queue, r, registry):
    q = queue("ended")
    _enqueue(q, "a")
    assert _claim(q, "t1") == "a"
    assert _finish(q, "a", "t1", "retry", ERROR).outcome == "retry"
    r.zadd(q.qkeys.scheduled, {"a": 1.0})
    assert _claim(q, "t2") == "a"
    r.delete(q.qkeys.registry(registry))
    r.set(q.qkeys.registry(registry), "not a zset")
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        _finish(q, "a", "t2")
    assert _state(r, q) == before
    assert r.hget(q.qkeys.job("a"), "error_type") == "ValueError"
