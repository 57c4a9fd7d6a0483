"""RQ's tests/test_decorator.py and tests/test_results.py, case by case (see
docs/from-rq.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fusionworker import Job, job
from fusionworker.core.job import JobResult
from fusionworker.exceptions import NoSuchJob
from fusionworker.testing import run_burst
from tests.compat import rq_jobs


def test_decorator_preserves_functionality():
    assert rq_jobs.decorated_add(1, 2) == 3


def test_decorator_adds_delay_and_enqueue(r, settings):
    handle = rq_jobs.decorated_add.options(connection=r, settings=settings)
    by_delay, by_enqueue = handle.delay(1, 2), handle.enqueue(3, 4)
    assert isinstance(by_delay, Job) and isinstance(by_enqueue, Job)
    assert (by_delay.args, by_enqueue.args) == ([1, 2], [3, 4])


def test_decorator_accepts_queue_name_positional_or_by_keyword(r, settings):
    for handle in (rq_jobs.decorated_add, rq_jobs.decorated_hello):
        assert handle.queue == "rq_decorated"
        queued = handle.options(connection=r, settings=settings)
        job_ = queued.enqueue(1, 2) if handle is rq_jobs.decorated_add else queued.enqueue()
        assert job_.origin == "rq_decorated"
    with pytest.raises(TypeError, match="twice"):
        job("a", queue="b")


def test_decorator_options_reach_the_job(r, settings):
    q_job = rq_jobs.decorated_add.options(connection=r, settings=settings).enqueue(1, 2)
    assert q_job.max_retries == 2


def test_decorator_accepts_depends_on(queue, r, settings):
    q = queue("rq_decorated")
    first = rq_jobs.decorated_hello.options(queue=q).enqueue()
    second = rq_jobs.decorated_hello.options(queue=q, depends_on=first).enqueue()
    assert first.depends_on is None and second.depends_on == [f"rq_decorated:{first.id}"]


def test_an_option_given_to_enqueue_is_refused_with_the_way_to_give_it(queue):
    q = queue("rq_decorated")
    first = rq_jobs.decorated_hello.options(queue=q).enqueue()
    with pytest.raises(TypeError, match=r"options\(depends_on=\.\.\.\)"):
        rq_jobs.decorated_hello.options(queue=q).enqueue(depends_on=first)  # type: ignore[call-arg]
    assert q.count == 1


def test_decorate_with_a_queue_instance(queue):
    q = queue("given")
    handle = job(q)(rq_jobs.decorated_by_a_test)
    assert handle.enqueue("x").origin == "given"


def test_save_and_get_result(queue, work):
    job_ = queue().enqueue("tests.jobs:add", 1, 2)
    work()
    result = job_.latest_result()
    assert isinstance(result, JobResult) and result.type == "successful"
    assert result.return_value == 3 and result.job_id == job_.id and result.created_at


def test_create_failure_result(queue, work):
    job_ = queue().enqueue("tests.jobs:boom", "bad")
    work()
    result = job_.latest_result()
    assert result is not None and result.type == "failed" and result.return_value is None
    assert result.exc_string is not None and "ValueError: bad" in result.exc_string


def test_job_return_value(queue, work):
    job_ = queue().enqueue("tests.jobs:add", 2, 2)
    assert job_.return_value() is None
    work()
    assert job_.return_value() == 4
    failed = queue().enqueue("tests.jobs:boom")
    work()
    assert failed.return_value() is None


def test_job_result_and_exc_info_are_read_again_until_the_job_ended(queue, work, r):
    """RQ's first example: ``job.result`` is None, later the result, on the job kept from
    ``enqueue`` with no ``refresh()``; ``exc_info`` likewise. Once ended, no more reads."""
    done, failed = queue().enqueue("tests.jobs:add", 2, 3), queue().enqueue("tests.jobs:boom")
    assert done.result is None and failed.exc_info is None and not done.is_stopped
    work()
    assert done.result == 5 and done.status == "finished"
    assert failed.exc_info and "Traceback" in failed.exc_info and failed.status == "failed"
    r.hset(queue().qkeys.job(done.id), "result", "99")       # ended: read no more
    assert done.result == 5 and done.to_dict()["result"] == 5
    gone = queue().enqueue("tests.jobs:add", 1, 1)
    gone.delete()
    assert gone.result is None                                # gone: what was read


def test_rqs_call_string_created_at_and_dependent_ids(queue, work):
    q = queue()
    parent = q.enqueue("tests.jobs:add", 2, 3)
    child = q.enqueue("tests.jobs:echo", "x" * 300, depends_on=parent)
    assert parent.get_call_string() == "tests.jobs:add(2, 3)"
    assert len(child.get_call_string()) == 200 and child.get_call_string().endswith("...")
    assert parent.created_at == parent.enqueued_at and parent.created_at is not None
    assert parent.dependent_ids == [child.id] and child.dependent_ids == []
    work()
    assert parent.dependent_ids == [] and child.refresh().status == "finished"


def test_job_return_value_in_this_process(queue):
    job_ = queue().enqueue("tests.jobs:add", 5, 5)
    run_burst(queue())
    assert job_.return_value() == 10


def test_result_ttl_zero_deletes_the_record(queue, work, settings):
    """RQ answers None; here the record is gone and reading it says so."""
    job_ = queue().enqueue("tests.jobs:add", 1, 1)
    work(settings=settings.replace(result_ttl=0))
    assert queue().fetch_job(job_.id) is None
    with pytest.raises(NoSuchJob):
        job_.return_value()


def test_handle_enqueue_in_takes_a_timedelta(queue):
    from datetime import timedelta

    q = queue("rq_decorated")
    job_ = rq_jobs.decorated_hello.options(queue=q).enqueue_in(timedelta(minutes=5))
    due = q.scheduled_job_registry.get_scheduled_time(job_)
    assert job_.get_status() == "scheduled" and due is not None
    assert 290 < (due - datetime.now(UTC)).total_seconds() <= 301
