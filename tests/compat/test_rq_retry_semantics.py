"""RQ's retry semantics for RQ's spelling: ``retry=Retry(max=N)`` retries on any
exception (at once without an interval); ``retry_on=`` (Celery's ``autoretry_for``)
names what is retried, per job or per function; a final failure says why it was
not retried. ``max_retries=`` with FUSIONWORKER_RETRYABLE stays as it was."""

from __future__ import annotations

import logging

import pytest

from fusionworker import Retry
from fusionworker.core.job import JobStatus
from tests import jobs
from tests.compat import rq_jobs


def test_rq_retry_retries_any_exception_at_once(queue, work):
    q = queue()
    job = q.enqueue(jobs.boom, retry=Retry(max=2))        # ValueError: not "retryable"
    later = q.enqueue(jobs.noop)
    work()
    job.refresh()
    assert job.status == JobStatus.FAILED and job.attempts == 3
    assert job.retry_on == ["*"] and job.retry_intervals == [0.0]
    # at once: the retries ran before the worker's burst ended, no backoff was waited
    assert later.refresh().is_finished


def test_rq_retry_also_retries_a_timeout(queue, work):
    job = queue().enqueue(jobs.sleep, 5, retry=Retry(max=1), timeout=0.3)
    work()
    job.refresh()
    assert (job.status, job.failure_reason, job.attempts) == ("failed", "timeout", 2)


def test_rq_retry_with_an_interval_waits_it(queue, work):
    import time

    job = queue().enqueue(jobs.boom, retry=Retry(max=2, interval=30))
    work()
    job.refresh()
    assert job.status == JobStatus.SCHEDULED and job.attempts == 1
    assert 25 < job.scheduled_for - time.time() <= 30.5


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_retry_max_must_be_at_least_one(bad):
    with pytest.raises(ValueError, match="at least 1"):
        Retry(max=bad)


def test_retry_repr_shows_the_policy():
    assert repr(Retry(max=2, interval=5)) == "Retry(max=2, interval=5)"
    assert repr(Retry(max=3, interval=[1, 2])) == "Retry(max=3, interval=[1, 2])"
    assert repr(Retry(max=1)) == "Retry(max=1)"
    assert repr(Retry("busy", 5)) == "Retry('busy', delay=5)"


def test_max_retries_keeps_the_worker_list(queue, work):
    job = queue().enqueue(jobs.boom, max_retries=3, retry_delay=0)
    work()
    assert job.refresh().attempts == 1 and job.status == JobStatus.FAILED


def test_retry_on_per_job(queue, work):
    q = queue()
    retried = q.enqueue(jobs.boom, max_retries=2, retry_delay=0, retry_on=ValueError)
    by_name = q.enqueue(jobs.boom, max_retries=1, retry_delay=0, retry_on=["ValueError"])
    narrowed = q.enqueue(jobs.boom, retry=Retry(max=2), retry_on="builtins.KeyError")
    celery = q.enqueue(jobs.boom, max_retries=1, retry_delay=0, autoretry_for=(ValueError,))
    work()
    assert retried.refresh().attempts == 3
    assert by_name.refresh().attempts == 2 and by_name.retry_on == ["builtins.ValueError"]
    assert narrowed.refresh().attempts == 1
    assert celery.refresh().attempts == 2


def test_a_retry_the_job_raises_is_honoured_whatever_retry_on_says(queue, work):
    """``raise Retry(...)`` asks for a retry (Celery's ``self.retry()``): a ``retry_on``
    that names other exceptions, or a worker list without it, does not refuse it; its
    ``max_retries`` still caps it."""
    q = queue()
    asked = q.enqueue(jobs.retry_me, max_retries=2, retry_delay=0, retry_on=["KeyError"])
    capped = q.enqueue(jobs.retry_me, max_retries=0, retry_on=["KeyError"])
    work()
    assert asked.refresh().attempts == 3 and asked.status == JobStatus.FAILED
    assert "retries are used up" in (asked.not_retried or "")
    assert capped.refresh().attempts == 1


def test_retry_on_per_function(r, settings, work):
    for handle in (rq_jobs.decorated_key_error, rq_jobs.celery_autoretry):
        job = handle.options(connection=r, settings=settings).enqueue()
        assert job.retry_on == ["builtins.KeyError"]
        work("rq_decorated")
        assert job.refresh().attempts == 2 and job.status == JobStatus.FAILED


@pytest.mark.parametrize("bad", [3, "not a name", [], [ValueError, 4], object])
def test_a_bad_retry_on_is_refused_before_anything_is_written(queue, bad):
    q = queue()
    with pytest.raises(TypeError, match="retry_on"):
        q.enqueue(jobs.boom, max_retries=1, retry_on=bad)
    assert q.count == 0


def test_a_final_failure_says_why_it_was_not_retried(queue, work, caplog):
    q = queue()
    plain = q.enqueue(jobs.boom, max_retries=3)
    other = q.enqueue(jobs.boom, max_retries=3, retry_on=KeyError)
    used_up = q.enqueue(jobs.boom, retry=Retry(max=1))
    none = q.enqueue(jobs.boom, max_retries=0)      # what a Celery user's max_retries=0 asks
    with caplog.at_level(logging.ERROR, logger="fusionworker"):
        work()
    lines = {rec.getMessage() for rec in caplog.records}

    def line(job):
        return next(text for text in lines if job.id in text and "failed" in text)
    assert "ValueError is not in FUSIONWORKER_RETRYABLE" in line(plain)
    assert "retry=Retry(max=N)" in line(plain)
    assert "not among its retry_on (builtins.KeyError)" in line(other)
    assert "its 1 retries are used up" in line(used_up)
    assert "not retried: max_retries is 0" in line(none)
