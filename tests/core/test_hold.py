"""Hold and release (issue 34, seed 003's "disable an entry"): a held job leaves the
claimable sets in one script call, is listed as held, is never claimed (by a burst
worker, a concurrent claim, a due-time promotion) and gets its place back on release."""

from __future__ import annotations

import time
import uuid

import pytest

from fusionworker.core.job import JobStatus
from fusionworker.exceptions import InvalidOperation, NoSuchJob


def pending(q) -> list[str]:
    return q.connection.zrevrange(q.qkeys.pending, 0, -1)


def claim(q):
    reply = q.scripts.claim(keys=[q.qkeys.base],
                            args=["ghost", uuid.uuid4().hex, 30, q.settings.failed_ttl])
    return reply[3] if reply[0] == "job" else None


def test_a_held_job_survives_a_burst_worker_and_runs_after_release(queue, burst):
    q = queue()
    held = q.enqueue("tests.jobs:noop")
    other = q.enqueue("tests.jobs:noop")
    assert held.hold().status == JobStatus.HELD
    burst("default")
    assert q.fetch_job(other.id).status == "finished"
    assert q.fetch_job(held.id).status == "held"
    assert q.job_ids("held") == [held.id] and q.count == 0
    assert held.release().status == JobStatus.QUEUED
    burst("default")
    assert q.fetch_job(held.id).status == "finished"


def test_a_held_job_keeps_its_place_and_is_never_claimed(queue):
    q = queue()
    a, b, c = (q.enqueue("tests.jobs:noop").id for _ in range(3))
    urgent = q.enqueue("tests.jobs:noop", priority=5).id
    before = pending(q)
    assert before == [urgent, a, b, c]
    q.hold(a)
    q.hold(urgent)
    q.hold(urgent)                    # holding a held job changes nothing
    assert pending(q) == [b, c]
    assert claim(q) == b
    q.release(urgent)
    q.release(a)
    assert pending(q) == [urgent, a, c]           # both back at their places
    assert q.fetch_job(a).status == "queued"
    assert not q.connection.exists(q.qkeys.held)
    assert "held_score" not in q.connection.hgetall(q.qkeys.job(a))


def test_a_held_scheduled_job_is_not_promoted_and_keeps_its_due_time(queue):
    q = queue()
    job = q.enqueue_in(0.2, "tests.jobs:noop")
    due = q.connection.zscore(q.qkeys.scheduled, job.id)
    q.hold(job.id)
    time.sleep(0.3)                   # its due time passes while it is held
    assert claim(q) is None           # the claim promotes due jobs: not this one
    assert q.fetch_job(job.id).status == "held"
    q.release(job.id)
    assert q.connection.zscore(q.qkeys.scheduled, job.id) == due
    assert q.fetch_job(job.id).status == "scheduled"
    assert claim(q) == job.id         # due: promoted and taken


def test_hold_refuses_what_is_not_ready_and_release_what_is_not_held(queue):
    q = queue()
    started = q.enqueue("tests.jobs:noop").id
    claim(q)
    with pytest.raises(InvalidOperation, match="is started; only a queued or scheduled"):
        q.hold(started)
    first = q.enqueue("tests.jobs:noop", group="g").id
    second = q.enqueue("tests.jobs:noop", group="g").id
    with pytest.raises(InvalidOperation, match="queued behind its group's running job"):
        q.hold(second)
    q.hold(first)                     # the group's holder: the group waits with it
    with pytest.raises(InvalidOperation, match="is queued, not held"):
        q.release(second)
    with pytest.raises(NoSuchJob):
        q.hold("nope")
    with pytest.raises(NoSuchJob):
        q.release("nope")


def test_cancel_and_delete_take_a_held_job_out_of_held(queue):
    q = queue()
    a, b = (q.enqueue("tests.jobs:noop").id for _ in range(2))
    q.hold(a)
    q.hold(b)
    assert q.cancel(a).status == "canceled"
    q.delete(b)
    assert q.connection.zcard(q.qkeys.held) == 0
    assert "held_from" not in q.connection.hgetall(q.qkeys.job(a))


def test_a_held_job_is_live_for_unique_keys_and_job_ids(queue):
    q = queue()
    job = q.enqueue("tests.jobs:noop", job_id="one", unique_key="k")
    q.hold(job.id)
    again = q.enqueue("tests.jobs:noop", job_id="one")
    assert again.id == "one" and q.fetch_job("one").status == "held"
