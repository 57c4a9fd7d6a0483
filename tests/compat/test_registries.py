"""A queue's registries as objects (RQ's ``FailedJobRegistry`` & co), and the
Queue's RQ names (``Queue()``, ``Queue.all``, ``get_job_ids``, ``is_empty``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fusionworker.registries import (
    CanceledJobRegistry,
    DeferredJobRegistry,
    FailedJobRegistry,
    FinishedJobRegistry,
    ScheduledJobRegistry,
    StartedJobRegistry,
)

from fusionworker import Queue
from fusionworker.exceptions import InvalidOperation, NoSuchJob


def test_each_registry_lists_the_jobs_of_its_status(queue, burst, r):
    q = queue()
    ok = q.enqueue("tests.jobs:noop")
    bad = q.enqueue("tests.jobs:boom")
    later = q.enqueue_in(600, "tests.jobs:noop")
    parent = q.enqueue_in(600, "tests.jobs:noop")
    child = q.enqueue("tests.jobs:noop", depends_on=parent)
    gone = q.enqueue("tests.jobs:noop")
    gone.cancel()
    burst()
    assert q.finished_job_registry.get_job_ids() == [ok.id]
    assert q.failed_job_registry.get_job_ids() == [bad.id]
    assert q.scheduled_job_registry.get_job_ids() == [later.id, parent.id]
    assert q.deferred_job_registry.get_job_ids() == [child.id]
    assert q.canceled_job_registry.get_job_ids() == [gone.id]
    assert q.started_job_registry.get_job_ids() == []
    assert (len(q.failed_job_registry), q.scheduled_job_registry.count) == (1, 2)
    assert bad.id in q.failed_job_registry and bad in q.failed_job_registry
    assert ok.id not in q.failed_job_registry and 3 not in q.failed_job_registry
    assert [j.id for j in q.failed_job_registry.get_jobs()] == [bad.id]


def test_registry_by_name_and_connection_is_the_same_as_the_queues(queue, r, settings):
    q = queue("mail")
    job = q.enqueue("tests.jobs:noop")
    job.cancel()
    reg = CanceledJobRegistry("mail", connection=r, settings=settings)
    assert reg.get_job_ids() == [job.id] and reg.name == "mail"
    assert repr(reg) == "CanceledJobRegistry('mail')"
    assert FinishedJobRegistry(queue=q).count == 0
    for cls in (StartedJobRegistry, DeferredJobRegistry):
        assert cls(queue=q).get_job_ids() == []
    with pytest.raises(ValueError, match="no registry"):
        q.registry("queued")


def test_failed_registry_requeues_one_or_all(queue, burst):
    q = queue()
    a, b, c = (q.enqueue("tests.jobs:boom") for _ in range(3))
    burst()
    reg = FailedJobRegistry(queue=q)
    assert reg.count == 3
    requeued = reg.requeue(a.id)
    assert requeued.status == "queued" and a.id not in reg
    assert reg.requeue_all() == 2 and reg.count == 0
    assert sorted(q.get_job_ids()) == sorted([a.id, b.id, c.id])
    with pytest.raises(InvalidOperation):
        reg.requeue(a)                       # queued now, not failed


def test_remove_takes_an_ended_entry_off_or_deletes_the_job(queue, burst):
    q = queue()
    done = q.enqueue("tests.jobs:noop")
    failed = q.enqueue("tests.jobs:boom")
    later = q.enqueue_in(600, "tests.jobs:noop")
    burst()
    q.finished_job_registry.remove(done)
    assert q.finished_job_registry.count == 0 and q.fetch_job(done.id) is not None
    with pytest.raises(InvalidOperation, match="delete_job=True"):
        q.scheduled_job_registry.remove(later)
    assert later.id in q.scheduled_job_registry
    q.scheduled_job_registry.remove(later, delete_job=True)
    assert later.id not in q.scheduled_job_registry and q.fetch_job(later.id) is None
    q.failed_job_registry.remove(failed.id, delete_job=True)
    assert q.fetch_job(failed.id) is None
    with pytest.raises(NoSuchJob):
        q.failed_job_registry.remove(failed.id, delete_job=True)


def test_ids_of_expired_records_are_left_out_and_cleaned(queue, burst, r):
    q = queue()
    jobs = [q.enqueue("tests.jobs:noop") for _ in range(4)]
    burst()
    reg = q.finished_job_registry
    r.delete(q.qkeys.job(jobs[0].id), q.qkeys.job(jobs[2].id))   # as if their TTL ran out
    assert reg.count == 4                       # ZCARD: until something cleans
    assert reg.get_job_ids(desc=True) == [jobs[3].id, jobs[1].id]
    assert reg.count == 2
    r.delete(q.qkeys.job(jobs[1].id))
    assert reg.cleanup() == 1 and reg.get_job_ids() == [jobs[3].id]
    assert q.scheduled_job_registry.cleanup() == 0


def test_scheduled_time_is_when_the_job_is_due(queue):
    q = queue()
    job = q.enqueue_in(3600, "tests.jobs:noop")
    due = ScheduledJobRegistry(queue=q).get_scheduled_time(job)
    assert due is not None and due.tzinfo is UTC
    assert 3590 < (due - datetime.now(UTC)).total_seconds() < 3610
    assert q.scheduled_job_registry.get_scheduled_time("nosuch") is None


def test_queue_defaults_to_default_and_lists_every_queue(r, settings):
    q = Queue(connection=r, settings=settings)
    assert q.name == "default"
    q.enqueue("tests.jobs:noop")
    Queue("mail", r, settings=settings).enqueue("tests.jobs:noop")
    assert [x.name for x in Queue.all(r, settings=settings)] == ["default", "mail"]


def test_queued_ids_and_jobs_in_run_order(queue):
    q = queue()
    assert q.is_empty() and q.get_job_ids() == []
    low = q.enqueue("tests.jobs:noop", priority=-1)
    first = q.enqueue("tests.jobs:noop")
    second = q.enqueue("tests.jobs:noop")
    assert not q.is_empty()
    assert q.get_job_ids() == [first.id, second.id, low.id]
    assert q.get_job_ids(1, 1) == [second.id] and q.get_job_ids(1) == [second.id, low.id]
    assert [j.id for j in q.get_jobs(0, 2)] == [first.id, second.id]
