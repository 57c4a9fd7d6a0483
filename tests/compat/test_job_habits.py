"""RQ's names on a job: ``Job.fetch``, ``get_status``, ``is_*``, ``return_value``,
``latest_result``, ``cancel``/``requeue``/``delete``, producer ``save_meta``, repr."""

from __future__ import annotations

import pytest

from fusionworker import Job
from fusionworker.core.job import JobResult, JobStatus
from fusionworker.exceptions import InvalidOperation, MetaTooLarge, NoSuchJob


def test_fetch_finds_the_job_in_any_queue_by_id(queue, r, settings):
    queue("default").enqueue("tests.jobs:noop")
    job = queue("emails").enqueue("tests.jobs:add", 1, 2)
    found = Job.fetch(job.id, connection=r, settings=settings)
    assert (found.id, found.origin, found.func_name, found.args) == (
        job.id, "emails", "tests.jobs:add", [1, 2])
    assert Job.fetch(job.id, r, queue="emails", settings=settings).id == job.id
    with pytest.raises(NoSuchJob):
        Job.fetch("nosuch", connection=r, settings=settings)
    with pytest.raises(NoSuchJob):
        Job.fetch(job.id, r, queue="default", settings=settings)
    assert Job.exists(job.id, r, settings=settings) and not Job.exists("x", r, settings=settings)
    many = Job.fetch_many([job.id, "nosuch"], r, settings=settings)
    assert many[0] is not None and many[0].id == job.id and many[1] is None


def test_status_properties_follow_the_worker(queue, burst):
    q = queue()
    job = q.enqueue("tests.jobs:add", 2, 3)
    assert job.get_id() == job.id
    assert job.get_status() == JobStatus.QUEUED and job.is_queued and not job.is_finished
    assert job.return_value() is None and job.latest_result() is None
    burst()
    # the same object, not refreshed by hand: the properties read Redis again
    assert job.is_finished and not job.is_queued and not job.is_failed
    assert job.get_status(refresh=False) == "finished"
    assert job.return_value() == 5
    result = job.latest_result()
    assert isinstance(result, JobResult)
    assert (result.type, result.return_value, result.exc_string) == ("successful", 5, None)
    assert result.created_at is not None and result.job_id == job.id


def test_the_status_read_first_then_result_or_exc_info(queue, burst):
    """RQ's idiom ``if job.is_finished: job.result``: the status, read first, brings what
    the end wrote with it. It read None: ``result`` trusts an ended job's fields, and
    the status check had made the held job ended without reading them."""
    q = queue()
    ok, bad, ok2 = (q.enqueue("tests.jobs:add", 2, 3), q.enqueue("tests.jobs:boom", "bad"),
                    q.enqueue("tests.jobs:add", 1, 1))
    burst()
    assert ok.is_finished and ok.result == 5
    assert bad.is_failed and bad.exc_info is not None and "bad" in bad.exc_info
    assert ok2.get_status() == JobStatus.FINISHED and ok2.result == 2
    # the status read leaves an unsaved local change of meta alone, as RQ's does
    late = q.enqueue("tests.jobs:add", 2, 2)
    late.meta["owner"] = "bob"
    burst()
    assert late.get_status() == JobStatus.FINISHED and late.result == 4
    assert late.meta == {"owner": "bob"}


def test_failed_job_reports_its_error_as_the_latest_result(queue, burst):
    q = queue()
    job = q.enqueue("tests.jobs:boom", "bad input")
    burst()
    assert job.is_failed and job.return_value() is None
    result = job.latest_result()
    assert result is not None and result.type == "failed"
    assert result.exc_string is not None and "bad input" in result.exc_string


def test_scheduled_deferred_and_started_states(queue, r):
    q = queue()
    later = q.enqueue_in(3600, "tests.jobs:noop")
    assert later.is_scheduled and not later.is_queued
    parent = q.enqueue("tests.jobs:noop")
    child = q.enqueue("tests.jobs:noop", depends_on=parent)
    assert child.is_deferred
    r.hset(q.qkeys.job(parent.id), "status", "started")
    assert parent.is_started


def test_get_status_raises_once_the_record_is_gone(queue):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    job.delete()
    assert q.fetch_job(job.id) is None
    with pytest.raises(NoSuchJob):
        job.get_status()
    with pytest.raises(NoSuchJob):
        assert job.is_queued
    assert job.get_status(refresh=False) == "queued"


def test_description_func_name_and_origin(queue):
    job = queue("mail").enqueue("tests.jobs:echo", 1, "two", body="hi")
    assert job.description == "tests.jobs:echo(1, 'two', body='hi')"
    assert (job.func_name, job.origin) == ("tests.jobs:echo", "mail")
    long = queue("mail").enqueue("tests.jobs:echo", "x" * 500)
    assert len(long.description) == 200 and long.description.endswith("...")


def test_description_field_of_the_record_wins(queue, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    r.hset(q.qkeys.job(job.id), "description", "nightly report")
    assert job.refresh().description == "nightly report"


def test_cancel_requeue_and_delete_through_the_job(queue, burst):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    assert job.cancel() is job and job.status == "canceled"
    assert q.count == 0
    failed = q.enqueue("tests.jobs:boom")
    burst()
    assert failed.is_failed
    assert failed.requeue() is failed and failed.status == "queued"
    assert q.job_ids() == [failed.id]
    with pytest.raises(InvalidOperation):
        failed.requeue()             # queued, not failed: refused, nothing changes
    failed.delete()
    assert q.fetch_job(failed.id) is None and q.count == 0
    with pytest.raises(NoSuchJob):
        failed.delete()


def test_a_job_not_read_through_a_queue_says_how_to_get_one():
    job: Job[None] = Job(id="x", queue="default", func="tests.jobs:noop")
    with pytest.raises(ValueError, match="Job.fetch"):
        job.cancel()
    assert job.get_status() == "queued"       # answers from what it holds


def test_requeued_job_forgets_the_times_of_its_failed_attempt(queue, burst):
    q = queue()
    job = q.enqueue("tests.jobs:boom")
    burst()
    job.refresh()
    assert job.started_at is not None and job.ended_at is not None
    job.requeue()
    assert job.started_at is None and job.ended_at is None and job.duration is None
    assert job.wait_time is None and job.attempts == 0


def test_producer_meta_reaches_the_job_and_is_kept(queue, burst):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    job.meta["tenant"] = "acme"
    job.meta["ids"] = [1, 2]
    job.save_meta()
    assert q.fetch_job(job.id).meta == {"tenant": "acme", "ids": [1, 2]}
    burst()
    assert job.refresh().meta == {"tenant": "acme", "ids": [1, 2]}


def test_save_meta_refuses_bad_meta_before_writing(queue):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    job.meta["bad"] = object()
    with pytest.raises(TypeError):
        job.save_meta()
    job.meta = {"big": "x" * (65 * 1024)}
    with pytest.raises(MetaTooLarge):
        job.save_meta()
    assert q.fetch_job(job.id).meta == {}
    job.meta = {"ok": 1}
    job.delete()
    with pytest.raises(NoSuchJob):
        job.save_meta()
    assert not q.connection.exists(q.qkeys.job(job.id))   # no record of one field left


def test_enqueue_refuses_a_meta_larger_than_save_meta_takes_and_writes_nothing(queue):
    q = queue()
    with pytest.raises(MetaTooLarge, match="meta is .* bytes"):
        q.enqueue("tests.jobs:noop", meta={"big": "x" * (65 * 1024)}, job_id="big-meta")
    assert not q.connection.exists(q.qkeys.job("big-meta")) and q.count == 0
    job = q.enqueue("tests.jobs:noop", meta={"ok": "x" * (63 * 1024)})
    assert q.fetch_job(job.id).meta == {"ok": "x" * (63 * 1024)}


def test_repr_is_short(queue):
    job = queue().enqueue("tests.jobs:noop", job_id="j1")
    assert repr(job) == "Job('j1', queue='default', func='tests.jobs:noop', status='queued')"


def test_connection_of_a_job(queue, r):
    job = queue().enqueue("tests.jobs:noop")
    assert job.connection is job._queue.connection
    by_hand: Job[None] = Job(id="x", queue="default", func="tests.jobs:noop")
    assert getattr(by_hand, "connection", None) is None


def test_dependencies_and_exc_info(queue, burst):
    a, b = queue("a").enqueue("tests.jobs:noop"), queue("b").enqueue("tests.jobs:boom")
    child = queue().enqueue("tests.jobs:noop", depends_on=[a, b])
    assert child.dependency_ids == [a.id, b.id]
    assert [j.id for j in child.fetch_dependencies()] == [a.id, b.id]
    b.delete()
    assert [j.id for j in child.fetch_dependencies()] == [a.id]
    assert queue().enqueue("tests.jobs:noop").dependency_ids == []
    failed = queue("c").enqueue("tests.jobs:boom", "told you")
    burst("c")
    assert failed.refresh().exc_info is not None and "told you" in failed.exc_info
