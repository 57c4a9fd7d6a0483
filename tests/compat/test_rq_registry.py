"""RQ's tests/test_registry.py, case by case (see docs/from-rq.md for the cases done
differently on purpose)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from fusionworker.registries import (
    DeferredJobRegistry,
    FailedJobRegistry,
    FinishedJobRegistry,
    StartedJobRegistry,
)

from fusionworker.exceptions import InvalidOperation

HELLO = "tests.compat.rq_jobs:say_hello"


def test_init_with_queue_or_name_and_connection(queue, r, settings):
    q = queue("mail")
    by_queue = FinishedJobRegistry(queue=q)
    by_name = FinishedJobRegistry("mail", connection=r, settings=settings)
    assert by_queue.name == by_name.name == "mail" and by_queue == by_name
    assert by_queue.connection is q.connection and by_queue.queue is q    # get_queue
    assert FinishedJobRegistry(connection=r, settings=settings).name == "default"


def test_contains(queue, work):
    q = queue()
    job = q.enqueue(HELLO)
    reg = q.finished_job_registry
    assert job not in reg and job.id not in reg
    work()
    assert job in reg and job.id in reg


def test_get_job_ids_and_count(queue, work):
    q = queue()
    ids = [q.enqueue(HELLO).id for _ in range(3)]
    work()
    reg = q.finished_job_registry
    assert reg.count == len(reg) == 3
    assert reg.get_job_ids() == ids and reg.get_job_ids(desc=True) == ids[::-1]
    assert reg.get_job_ids(1, 1) == [ids[1]]


def test_get_job_count_does_not_clean(queue, work, r):
    q = queue()
    job = q.enqueue(HELLO)
    work()
    r.delete(q.qkeys.job(job.id))
    assert q.finished_job_registry.count == 1       # counting does not clean


def test_cleanup_of_expired_records(queue, work, r):
    q = queue()
    jobs = [q.enqueue(HELLO), q.enqueue("tests.jobs:boom")]
    work()
    for job in jobs:
        r.delete(q.qkeys.job(job.id))              # as their TTL would
    assert q.finished_job_registry.cleanup() == 1 and q.failed_job_registry.cleanup() == 1
    assert q.finished_job_registry.count == q.failed_job_registry.count == 0


def test_jobs_are_put_in_the_registry_of_their_outcome(queue, work):
    q = queue()
    ok, bad = q.enqueue(HELLO), q.enqueue("tests.jobs:boom")
    work()
    assert q.finished_job_registry.get_job_ids() == [ok.id]
    assert FailedJobRegistry(queue=q).get_job_ids() == [bad.id]
    assert q.started_job_registry.count == 0         # no longer started once run


def test_deferred_score_is_the_enqueue_time(queue):
    parent = queue("p").enqueue_in(600, HELLO)
    q = queue()
    before = datetime.now(UTC)
    child = q.enqueue(HELLO, depends_on=parent)
    scored = DeferredJobRegistry(queue=q).get_expiration_time(child)
    assert scored is not None and abs((scored - before).total_seconds()) < 2


def test_register_dependency_and_delete(queue):
    parent = queue("p").enqueue(HELLO)
    q = queue()
    child = q.enqueue(HELLO, depends_on=parent)
    reg = q.deferred_job_registry
    assert reg.get_job_ids() == [child.id]
    child.delete()
    assert reg.get_job_ids() == [] and reg.cleanup() == 0      # cleanup: nothing to do


def test_failed_record_keeps_for_the_failure_ttl(queue, work, r, settings):
    q = queue()
    job = q.enqueue("tests.jobs:boom")
    work()
    ttl = r.ttl(q.qkeys.job(job.id))
    assert settings.failed_ttl - 10 < ttl <= settings.failed_ttl


def test_failed_registry_requeue(queue, work):
    q = queue()
    job = q.enqueue("tests.jobs:boom")
    work()
    reg = q.failed_job_registry
    assert job in reg
    reg.requeue(job)
    assert job not in reg and job.get_status() == "queued" and q.get_job_ids() == [job.id]


def test_requeue_of_a_job_not_failed_is_refused(queue):
    q = queue()
    job = q.enqueue(HELLO)
    with pytest.raises(InvalidOperation):
        q.failed_job_registry.requeue(job)
    assert job.get_status() == "queued"


def test_started_registry_holds_the_running_job_and_deletion_removes_it(queue, r):
    q = queue()
    job = q.enqueue(HELLO)
    r.zadd(q.qkeys.started, {job.id: time.time() + 60})   # as a claim would
    r.hset(q.qkeys.job(job.id), "status", "started")
    reg = StartedJobRegistry(queue=q)
    assert job in reg and reg.count == 1
    with pytest.raises(InvalidOperation):
        reg.remove(job)                   # a live entry belongs to the worker
    job.delete()
    assert job not in reg and reg.count == 0
