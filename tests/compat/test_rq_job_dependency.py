"""RQ's tests/test_job_dependency.py, the user-visible cases (see docs/from-rq.md)."""

from __future__ import annotations

import pytest

HELLO = "tests.compat.rq_jobs:say_hello"


def test_multiple_dependencies_are_accepted_and_persisted(queue):
    p = queue("p")
    a, c = p.enqueue(HELLO), p.enqueue(HELLO)
    b = queue().enqueue(HELLO)                  # a bare id names a job of the same queue
    child = queue().enqueue(HELLO, depends_on=[a, b.id, ("p", c.id)])
    assert child.dependency_ids == [a.id, b.id, c.id]
    assert queue().fetch_job(child.id).dependency_ids == [a.id, b.id, c.id]


def test_dependency_parameter_constraints(queue):
    p = queue().enqueue(HELLO)
    for bad in (1, [{"id": p.id}], [p, 2.5]):
        with pytest.raises(TypeError):
            queue().enqueue(HELLO, depends_on=bad)
    assert queue().count == 1


def test_canceling_a_dependent_keeps_it_from_running(queue, work):
    q = queue()
    parent = q.enqueue(HELLO)
    kept, canceled = q.enqueue(HELLO, depends_on=parent), q.enqueue(HELLO, depends_on=parent)
    canceled.cancel()
    work()
    assert kept.is_finished and canceled.get_status() == "canceled"


def test_fetch_dependencies(queue):
    p = queue("p")
    parents = [p.enqueue_in(600, HELLO) for _ in range(2)]
    child = queue().enqueue(HELLO, depends_on=parents)
    assert [j.id for j in child.fetch_dependencies()] == [j.id for j in parents]
    assert queue().enqueue(HELLO).fetch_dependencies() == []
    parents[0].delete()
    assert [j.id for j in child.fetch_dependencies()] == [parents[1].id]


def test_dependencies_are_met(queue, work):
    q = queue()
    assert q.enqueue(HELLO).dependencies_are_met()            # no dependency
    first, second = queue("a").enqueue(HELLO), queue("b").enqueue(HELLO)
    child = q.enqueue(HELLO, depends_on=[first, second])
    assert not child.dependencies_are_met()
    work("a")
    assert not child.dependencies_are_met()                     # one still queued
    work("b")
    assert child.dependencies_are_met()


def test_execution_order_with_dependencies(queue, work):
    q = queue()
    slow = q.enqueue("tests.jobs:sleep", 0.2)
    a = q.enqueue(HELLO, "A", depends_on=slow)
    b = q.enqueue(HELLO, "B")
    work()
    order = sorted([slow, a, b], key=lambda j: j.refresh().started_at)
    assert [j.id for j in order] == [slow.id, b.id, a.id]        # A waited for slow
