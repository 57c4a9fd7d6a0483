"""RQ's tests/test_retry.py with fusionworker's retries: ``max_retries`` and
``retry_delay`` per job, ``raise Retry(...)`` from the job (see docs/from-rq.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fusionworker import Job
from fusionworker.core.config import Settings


@pytest.fixture
def retrying(settings: Settings) -> Settings:
    """RQ retries whatever the job raised; here only the FUSIONWORKER_RETRYABLE classes
    (and ``Retry``) are: ValueError (``tests.jobs:boom``) is made one."""
    return settings.replace(retryable=("builtins.ValueError",))


def test_retry_data_is_persisted(queue, r, settings):
    job = queue().enqueue("tests.jobs:boom", max_retries=3, retry_delay=5)
    stored = Job.fetch(job.id, r, settings=settings)
    assert (stored.max_retries, stored.retry_delay) == (3, 5)


def test_retry_with_a_delay_is_scheduled(queue, work, retrying):
    q = queue()
    job = q.enqueue("tests.jobs:boom", max_retries=1, retry_delay=60)
    work(settings=retrying)
    assert job.get_status() == "scheduled" and job.refresh().attempts == 1
    assert job.id in q.scheduled_job_registry
    due = q.scheduled_job_registry.get_scheduled_time(job)
    assert due is not None and 50 < (due - datetime.now(UTC)).total_seconds() <= 67  # +10% jitter


def test_worker_retries_then_fails_after_max_retries(queue, work, retrying):
    q = queue()
    job = q.enqueue("tests.jobs:boom", max_retries=2, retry_delay=0)
    work(settings=retrying)
    job.refresh()
    assert job.status == "failed" and job.attempts == 3
    assert job in q.failed_job_registry


def test_job_asking_for_a_retry(queue, work):
    q = queue()
    job = q.enqueue("tests.jobs:retry_me", max_retries=1, retry_delay=0)
    work()
    job.refresh()
    assert job.attempts == 2 and job.status == "failed"


def test_job_asking_for_a_retry_with_a_delay(queue, work):
    q = queue()
    job = q.enqueue("tests.jobs:retry_me", 60, max_retries=3)
    work()
    assert job.get_status() == "scheduled" and job.refresh().attempts == 1


def test_a_retried_job_keeps_its_place_before_later_jobs(queue, work, retrying):
    """RQ's enqueue_at_front_on_retry: here a retry without a delay always goes back at
    its original priority and FIFO place, ahead of the jobs enqueued after it."""
    q = queue()
    first = q.enqueue("tests.jobs:boom", max_retries=1, retry_delay=0)
    later = [q.enqueue("tests.jobs:noop") for _ in range(2)]
    work(settings=retrying)
    first.refresh()
    assert first.attempts == 2 and all(j.is_finished for j in later)
    assert all(first.started_at < j.refresh().started_at for j in later)


def test_an_error_that_is_not_retryable_fails_at_once(queue, work):
    """Deliberately different from RQ: ``max_retries`` retries only the retryable
    errors (FUSIONWORKER_RETRYABLE) and ``Retry``; a bug (ValueError) fails at once."""
    job = queue().enqueue("tests.jobs:boom", max_retries=3, retry_delay=0)
    work()
    assert job.get_status() == "failed" and job.refresh().attempts == 1
