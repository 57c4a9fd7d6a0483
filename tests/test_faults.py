"""Issue 18: faults and bad data never kill a worker, never run a job twice at once."""

from __future__ import annotations

import os
import time

import pytest

from tests.conftest import wait_for


def test_lone_surrogates_in_errors_and_results_are_recorded_not_fatal(queue, burst, r):
    q = queue()
    bad = q.enqueue("tests.jobs:surrogate_error")
    weird = q.enqueue("tests.jobs:surrogate_result")
    broken = q.enqueue("tests.jobs:bad_str_error")
    after = q.enqueue("tests.jobs:add", 1, 2)
    w = burst()
    assert w.failed == 2 and w.successful == 2
    job = q.fetch_job(bad.id)
    assert job.status == "failed" and job.failure_reason == "exception"
    assert job.error_type == "ValueError"
    assert job.error_message == "cannot parse caf\\udce9.csv"
    assert "caf\\udce9" in job.traceback
    assert q.fetch_job(weird.id).result == "caf\udce9"
    job = q.fetch_job(broken.id)
    assert job.status == "failed" and job.error_type == "_BadStr"
    assert "str() failed" in job.error_message
    assert q.fetch_job(after.id).result == 3


@pytest.mark.parametrize("field", ["id", "queue"])
def test_a_record_disagreeing_with_its_key_fails_as_malformed_and_never_runs(
        field, queue, burst, r, prefix, redis_url):
    q = queue()
    job = q.enqueue("tests.jobs:record", redis_url, f"{prefix}:ran", "x")
    jkey = f"{prefix}:{{default}}:job:{job.id}"
    assert r.exists(jkey)
    r.hset(jkey, field, "someone-else")
    w = burst()
    assert w.failed == 1
    assert r.lrange(f"{prefix}:ran", 0, -1) == []          # it never ran
    data = r.hgetall(jkey)
    assert data["status"] == "failed" and data["failure_reason"] == "malformed"
    assert f"field '{field}'" in data["error_message"]
    assert r.zscore(f"{prefix}:{{default}}:failed", job.id) is not None
    assert r.zcard(f"{prefix}:{{default}}:started") == 0
    assert not r.exists(f"{prefix}:{{default}}:job:someone-else")


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("kill_children", [True, False])
def test_a_jobs_child_processes_die_with_its_horse_unless_disabled(
        kill_children, queue, burst, r, prefix, redis_url, settings):
    q = queue()
    job = q.enqueue("tests.jobs:spawn_sleeper", redis_url, f"{prefix}:child")
    w = burst(settings=settings.replace(kill_job_children=kill_children))
    assert w.successful == 1
    child = int(r.lrange(f"{prefix}:child", 0, -1)[0])
    assert q.fetch_job(job.id).result == child
    try:
        if kill_children:
            wait_for(lambda: not _alive(child), timeout=5)
        else:
            time.sleep(0.3)
            assert _alive(child)
    finally:
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass
