"""RQ habits of the second hour: duration strings, ``unique=``, ``enqueue_in``/``enqueue_at``
with ``args=``/``kwargs=``, ``Queue(default_timeout=)``, ``Queue(is_async=False)``, and
the worker's ``-n NAME`` and ``--with-scheduler``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fusionworker import Queue, Retry
from fusionworker.core.job import JobStatus
from tests import jobs
from tests.cli.test_cli import cli  # noqa: F401 - the fixture


@pytest.mark.parametrize(("given", "seconds"), [("30s", 30), ("10m", 600), ("1h", 3600),
                                                ("2d", 172800), ("45", 45)])
def test_duration_strings_of_rq(queue, given, seconds):
    q = queue()
    job = q.enqueue(jobs.add, 1, 2, job_timeout=given, result_ttl=given, failure_ttl=given,
                    ttl=given)
    stored = q.fetch_job(job.id)
    assert (stored.timeout, stored.result_ttl, stored.failure_ttl, stored.ttl) == (
        seconds, seconds, seconds, seconds)


def test_a_bad_duration_is_named(queue):
    q = queue()
    with pytest.raises(ValueError, match="'30s', '10m', '1h'"):
        q.enqueue(jobs.add, 1, 2, job_timeout="1 hour")
    assert q.count == 0


def test_unique_is_refused_naming_job_id_not_passed_to_the_job(queue):
    q = queue()
    with pytest.raises(TypeError, match="unique=.*job_id="):
        q.enqueue(jobs.echo, "x", unique=True)
    assert q.count == 0


def test_enqueue_in_and_at_take_args_and_kwargs(queue, work):
    q = queue()
    later = q.enqueue_in(0, jobs.echo, args=[1, 2], kwargs={"a": 3}, priority=4)
    at = q.enqueue_at(datetime.now(UTC) - timedelta(seconds=1), jobs.echo, args=(5,))
    assert (later.args, later.kwargs, later.priority) == ([1, 2], {"a": 3}, 4)
    assert (at.args, at.kwargs) == ([5], {})
    with pytest.raises(TypeError, match="not both"):
        q.enqueue_in(5, jobs.echo, 1, args=[2])
    with pytest.raises(TypeError, match="inside kwargs="):
        q.enqueue_in(5, jobs.echo, args=[2], stray=1)
    work()
    assert later.refresh().result == {"args": [1, 2], "kwargs": {"a": 3}}
    assert at.refresh().result == {"args": [5], "kwargs": {}}


def test_queue_default_timeout(r, settings):
    q = Queue("default", r, settings=settings, default_timeout="10m")
    assert q.enqueue(jobs.add, 1, 2).timeout == 600
    assert q.enqueue(jobs.add, 1, 2, job_timeout=5).timeout == 5
    assert Queue("default", r, settings=settings, default_timeout=7).enqueue(
        jobs.add, 1, 2).timeout == 7
    with pytest.raises(ValueError):
        Queue("default", r, settings=settings, default_timeout=-3)


def test_queue_is_async_false_runs_the_job_at_enqueue(r, settings):
    q = Queue("default", r, settings=settings, is_async=False)
    job = q.enqueue(jobs.add, 2, 3)
    assert (job.status, job.result) == (JobStatus.FINISHED, 5)
    failed = q.enqueue(jobs.boom, "no")
    assert failed.status == JobStatus.FAILED and failed.error == "ValueError: no"


def test_worker_n_is_rqs_name_and_with_scheduler_is_accepted(cli, r, settings):  # noqa: F811
    q = Queue("default", r, settings=settings)
    job = q.enqueue(jobs.add, 1, 1)
    result = cli("worker", "-n", "rq-style-name", "--with-scheduler", "-q", "default", "-b")
    assert "--with-scheduler is not needed" in result.stderr
    assert job.refresh().worker_name == "rq-style-name"


def test_rqs_prepare_data_goes_to_enqueue_many(queue, work):
    """RQ's bulk spelling, ``q.enqueue_many([Queue.prepare_data(f, args, ...)])``: it was
    an AttributeError. Its options are checked before anything is written."""
    q = queue()
    jobs_ = q.enqueue_many([
        Queue.prepare_data("tests.jobs:add", (1, 2), job_id="pd-1", timeout=30),
        Queue.prepare_data("tests.jobs:add", [3], {"b": 4}, result_ttl=600, at_front=True),
        q.prepare("tests.jobs:add", 5, 6)])
    assert jobs_[0].id == "pd-1" and jobs_[0].timeout == 30
    assert q.job_ids[0] == jobs_[1].id                     # at_front
    with pytest.raises(TypeError, match="group_id"):
        q.enqueue_many([Queue.prepare_data("tests.jobs:add", (1, 1), job_id="never"),
                        Queue.prepare_data("tests.jobs:add", (1, 1), group_id="g")])
    assert q.fetch_job("never") is None                    # nothing written
    work()
    assert [j.return_value() for j in jobs_] == [3, 7, 11]


def test_rqs_retries_left(queue, work):
    """RQ's ``job.retries_left``: ``max_retries`` less the failed attempts; 0 once the
    job failed for good."""
    q = queue()
    job = q.enqueue("tests.jobs:boom", retry=Retry(max=2, interval=0))
    assert job.retries_left == 2
    work()
    job.refresh()
    assert (job.status, job.attempts, job.retries_left) == ("failed", 3, 0)
    fine = q.enqueue("tests.jobs:add", 1, 2, max_retries=3)
    work()
    assert fine.refresh().retries_left == 3


def test_rqs_get_current_job_from_fusionworker(queue, work):
    q = queue()
    job = q.enqueue("tests.compat.rq_jobs:access_self_as_rq_does")
    work()
    assert job.refresh().return_value() == job.id
