"""RQ's tests/test_dependencies.py, case by case (see docs/from-rq.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fusionworker import Job
from fusionworker.exceptions import NoSuchJob

HELLO = "tests.compat.rq_jobs:say_hello"


def test_allow_failure_is_persisted(queue, r, settings):
    parent = queue("p").enqueue(HELLO)
    job = queue().enqueue(HELLO, depends_on=parent, allow_dependency_failure=True)
    assert Job.fetch(job.id, r, settings=settings).allow_dependency_failure
    other = queue().enqueue(HELLO, depends_on=parent)
    assert not Job.fetch(other.id, r, settings=settings).allow_dependency_failure


def test_deferred_job_not_enqueued_while_dependencies_are_not_finished(queue, work):
    a, b = queue("a").enqueue(HELLO), queue("b").enqueue(HELLO)
    q = queue()
    c = q.enqueue(HELLO, depends_on=[a, b])
    work("a")
    assert c.get_status() == "deferred" and q.get_job_ids() == []
    work("b")
    assert c.get_status() == "queued"


def test_job_dependency_failed_parent_cancels_the_dependent(queue, work):
    q = queue()
    parent = q.enqueue("tests.jobs:boom")
    child = q.enqueue(HELLO, depends_on=parent)
    tolerant = q.enqueue(HELLO, depends_on=parent, allow_dependency_failure=True)
    work()
    assert parent.is_failed and child.get_status() == "canceled"
    assert child.refresh().failure_reason == "dependency"
    assert tolerant.is_finished


def test_job_dependency_finished_parent_runs_the_dependent(queue, work):
    q = queue()
    parent = q.enqueue(HELLO)
    child = q.enqueue(HELLO, "child", depends_on=parent)
    work()
    assert parent.is_finished and child.return_value() == "Hi there, child!"


def test_multiple_jobs_with_dependencies(queue, work):
    q = queue()
    parent = q.enqueue(HELLO)
    children = [q.enqueue(HELLO, depends_on=parent) for _ in range(3)]
    assert all(c.is_deferred for c in children)
    work()
    assert all(c.is_finished for c in children)


def test_dependency_list_in_depends_on(queue, work):
    q = queue()
    parents = [q.enqueue(HELLO) for _ in range(2)]
    child = q.enqueue(HELLO, depends_on=[parents[0], parents[1].id, ("default", parents[1].id)])
    work()
    assert child.is_finished


def test_dependency_accepts_a_single_job(queue):
    parent = queue().enqueue_in(60, HELLO)
    child = queue().enqueue(HELLO, depends_on=parent)
    assert child.depends_on == [f"default:{parent.id}"]


def test_deferred_job_score_is_its_creation_time(queue):
    parent = queue().enqueue_in(600, HELLO)
    before = datetime.now(UTC)
    child = queue().enqueue(HELLO, depends_on=parent)
    scored = queue().deferred_job_registry.get_expiration_time(child)
    assert scored is not None and abs((scored - before).total_seconds()) < 2


def test_a_canceled_parent_counts_as_failed(queue, work):
    q = queue()
    parent = q.enqueue_in(600, HELLO)
    child = q.enqueue(HELLO, depends_on=parent)
    tolerant = q.enqueue(HELLO, depends_on=parent, allow_dependency_failure=True)
    parent.cancel()
    work()
    assert child.get_status() == "canceled" and tolerant.get_status() == "finished"


def test_a_dependency_that_does_not_exist_is_refused(queue):
    """RQ enqueues a job whose dependency is gone; here the id must name a job."""
    q = queue()
    gone = q.enqueue(HELLO)
    gone.delete()
    with pytest.raises(NoSuchJob):
        q.enqueue(HELLO, depends_on=gone.id)
    assert q.count == 0


@pytest.mark.slow
def test_allow_failure_when_the_horse_is_killed(queue, work):
    q = queue()
    parent = q.enqueue("tests.jobs:kill_self")
    child = q.enqueue(HELLO, depends_on=parent, allow_dependency_failure=True)
    strict = q.enqueue(HELLO, depends_on=parent)
    work()
    assert parent.is_failed and parent.refresh().failure_reason == "killed"
    assert child.is_finished and strict.get_status() == "canceled"


def test_deleting_a_parent_cancels_its_dependents_at_once(queue, work):
    """RQ enqueues the dependents of a deleted job; here a deleted job never finished:
    its dependents are canceled (run if they allow a failed dependency), by the next
    worker, not at a reaper's sweep."""
    q = queue()
    parent = q.enqueue_in(600, HELLO)
    child = q.enqueue(HELLO, depends_on=parent)
    tolerant = q.enqueue(HELLO, depends_on=parent, allow_dependency_failure=True)
    parent.delete()
    work()
    assert child.get_status() == "canceled" and tolerant.get_status() == "finished"
