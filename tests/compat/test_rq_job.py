"""RQ's tests/test_job.py, case by case, as fusionworker behaviours (see
docs/from-rq.md for the cases done differently on purpose)."""

from __future__ import annotations

import time

import pytest
from fusionworker.registries import CanceledJobRegistry

from fusionworker import Job, current_job
from fusionworker.exceptions import InvalidFunction, InvalidOperation, NoSuchJob
from tests.compat import rq_jobs

HELLO = "tests.compat.rq_jobs:say_hello"


def test_unicode_description(queue):
    job = queue().enqueue_call("tests.jobs:echo", args=[12, "☃"],
                               kwargs={"null": None, "snowman": "☃"})
    assert job.description == "tests.jobs:echo(12, '☃', null=None, snowman='☃')"


def test_a_job_built_by_hand_holds_nothing_else():
    job: Job[None] = Job(id="x", queue="", func=HELLO)
    assert (job.origin, job.enqueued_at, job.started_at, job.ended_at, job.result) == (
        "", None, None, None, None)
    assert job.get_position() is None


def test_create_param_errors(queue):
    q = queue()
    with pytest.raises((TypeError, ValueError)):
        q.enqueue_call(HELLO, kwargs="string")     # type: ignore[arg-type]
    with pytest.raises(InvalidFunction):
        q.enqueue_call(42)                         # type: ignore[arg-type]
    assert q.count == 0


def test_create_job_from_string_function_and_callable(queue, work):
    q = queue()
    by_name = q.enqueue(HELLO, "World")
    by_callable = q.enqueue(rq_jobs.say_hello, "World")
    assert by_name.func == by_callable.func == HELLO and by_name.args == ["World"]
    work()
    assert by_name.return_value() == by_callable.return_value() == "Hi there, World!"


def test_fetch_and_fetch_many(queue, r, settings):
    q = queue()
    a = q.enqueue(HELLO, 3, timeout=3600)
    b = q.enqueue(HELLO, 4)
    fetched = Job.fetch(a.id, connection=r, settings=settings)
    assert (fetched.func_name, fetched.args, fetched.kwargs, fetched.timeout) == (
        HELLO, [3], {}, 3600)
    many = Job.fetch_many([a.id, b.id, "invalid_id"], r, settings=settings)
    assert [j.id if j else None for j in many] == [a.id, b.id, None]


def test_fetching_can_fail(r, settings):
    with pytest.raises(NoSuchJob):
        Job.fetch("b4a44d44-da16-4620-90a6-798e8cd72ca0", connection=r, settings=settings)


def test_dependency_is_stored_and_bad_dependency_types_are_refused(queue, r, settings):
    q = queue()
    parent = q.enqueue(HELLO)
    for given in (parent, parent.id):
        child = q.enqueue(HELLO, depends_on=given)
        stored = Job.fetch(child.id, r, settings=settings)
        assert stored.depends_on == [f"default:{parent.id}"]
    with pytest.raises(TypeError):
        q.enqueue(HELLO, depends_on=[{"id": "not-a-job"}, parent.id])
    with pytest.raises(TypeError):
        q.enqueue(HELLO, depends_on=[parent, 12345])


def test_fetching_unreadable_data_fails_the_job_not_the_worker(queue, work, r):
    q = queue()
    job = q.enqueue(HELLO, "x")
    r.hset(q.qkeys.job(job.id), "args", "this is no JSON")
    assert q.fetch_job(job.id) is not None            # reading the record still works
    work()
    assert job.is_failed and job.refresh().failure_reason == "malformed"


def test_job_is_unimportable(queue, work, r):
    q = queue()
    job = q.enqueue(HELLO, "Lionel")
    r.hset(q.qkeys.job(job.id), "func", "tests.compat.rq_jobs:nay_hello")
    work()
    assert job.is_failed and "nay_hello" in (job.refresh().error_message or "")


def test_custom_meta_is_persisted_and_get_meta(queue, r, settings):
    q = queue()
    job = q.enqueue(HELLO)
    before = q.fetch_job(job.id).to_dict()
    job.meta["foo"] = "bar"
    job.save_meta()
    again = Job.fetch(job.id, r, settings=settings)
    assert again.meta == {"foo": "bar"}
    after = again.to_dict()
    assert {k: v for k, v in after.items() if k != "meta"} == {
        k: v for k, v in before.items() if k != "meta"}        # nothing else changed
    r.hset(q.qkeys.job(job.id), "meta", '{"fee":"boo"}')
    assert job.get_meta(refresh=False) == {"foo": "bar"}
    assert job.get_meta() == {"fee": "boo"}


def test_default_description_is_the_call(queue):
    assert queue().enqueue(HELLO, "Lionel").description == f"{HELLO}('Lionel')"


def test_get_status_fails_when_job_deleted_from_redis(queue, r):
    q = queue()
    job = q.enqueue(HELLO)
    r.delete(q.qkeys.job(job.id))
    with pytest.raises(NoSuchJob):
        job.get_status(refresh=True)


def test_job_access_outside_and_within_a_job(queue, work):
    assert current_job() is None
    job = queue().enqueue("tests.compat.rq_jobs:access_self")
    work()
    assert job.get_status() == "finished" and job.return_value() == job.id


def test_job_get_position(queue):
    q = queue()
    a, b = q.enqueue(HELLO), q.enqueue(HELLO)
    assert (a.get_position(), b.get_position()) == (0, 1)
    a.cancel()
    assert (a.get_position(), b.get_position()) == (None, 0)


def test_job_delete_removes_itself_from_registries(queue, work):
    q = queue()
    failed = q.enqueue("tests.jobs:boom")
    finished = q.enqueue(HELLO)
    scheduled = q.enqueue_in(600, HELLO)
    deferred = q.enqueue(HELLO, depends_on=scheduled)
    canceled = q.enqueue(HELLO)
    canceled.cancel()
    work()
    # the dependent first: deleting its parent cancels it at once (it waits on nothing)
    regs = [q.failed_job_registry, q.finished_job_registry, q.deferred_job_registry,
            q.scheduled_job_registry, q.canceled_job_registry]
    jobs = [failed, finished, deferred, scheduled, canceled]
    for job, reg in zip(jobs, regs):
        assert job in reg
        job.delete()
        assert job not in reg and reg.count == 0


def test_create_job_with_id(queue, work):
    q = queue()
    job = q.enqueue(HELLO, job_id="1234")
    assert job.id == "1234"
    work()
    assert job.return_value() == "Hi there, Stranger!"
    with pytest.raises((TypeError, ValueError)):
        q.enqueue(HELLO, job_id=1234)


def test_create_job_with_async_function(queue, work):
    q = queue()
    async_job = q.enqueue("tests.jobs:async_add", 1, 2, job_id="async_job")
    sync_job = q.enqueue("tests.jobs:add", 1, 2, job_id="sync_job")
    work()
    assert async_job.return_value() == sync_job.return_value() == 3


def test_call_string_with_unicode_keyword_arguments(queue, work):
    job = queue().enqueue("tests.jobs:echo", arg_with_unicode="Ünïcode ☃")
    assert "Ünïcode ☃" in job.description
    work()
    assert job.return_value() == {"args": [], "kwargs": {"arg_with_unicode": "Ünïcode ☃"}}


def test_create_job_from_static_method(queue, work):
    job = queue().enqueue(rq_jobs.WithStatic.static_method, 4)
    assert job.func == "tests.compat.rq_jobs:WithStatic.static_method"
    work()
    assert job.return_value() == 8


def test_create_and_cancel_job(queue):
    q = queue()
    job = q.enqueue(HELLO, job_id="fake_job_id")
    assert len(q.get_jobs()) == 1
    job.cancel()
    assert q.get_jobs() == []
    registry = CanceledJobRegistry(queue=q)
    assert job in registry and job.get_status() == "canceled"
    with pytest.raises(InvalidOperation, match="canceled"):
        job.cancel()                                  # a second cancel is refused
    job.delete()
    assert job not in registry


@pytest.mark.slow
def test_blocking_result_fetch(queue, processes):
    q = queue("blocking")
    job = q.enqueue("tests.jobs:sleep", 1)
    started = time.monotonic()
    processes.worker("-q", "blocking", "--burst")
    result = job.latest_result(timeout=20)
    blocked_for = time.monotonic() - started
    assert result is not None and result.type == "successful" and result.return_value == 1
    assert 1 <= blocked_for < 20 and job.get_status() == "finished"


def test_latest_result_timeout_without_an_outcome(queue):
    job = queue().enqueue(HELLO)
    started = time.monotonic()
    assert job.latest_result(timeout=0.3) is None
    assert 0.3 <= time.monotonic() - started < 5


def test_a_result_that_cannot_be_stored_fails_the_job(queue, work):
    """RQ stores 'Unserializable return value' and finishes the job; here the job fails
    (reason exception, the type named), so no result is silently lost."""
    job = queue().enqueue("tests.jobs:not_serializable")
    work()
    job.refresh()
    assert job.status == "failed" and "object" in (job.error_message or "")
