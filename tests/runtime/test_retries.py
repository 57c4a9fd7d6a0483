"""Retries: backoff schedule, retry then success, exhaustion -> dead-letter, Retry(delay=)."""

from __future__ import annotations

import pytest

from fusionworker.core.config import load_settings
from fusionworker.worker import backoff_delay
from tests.waiting import wait_for


def run_until(burst, q, job_id, statuses, timeout=10.0):
    """Burst workers exit while a retry waits in `scheduled`: run them until the job ends."""
    def ended():
        burst(q.name)
        job = q.fetch_job(job_id)
        return job if job.status in statuses else None
    return wait_for(ended, timeout=timeout, what=f"job {job_id} {'/'.join(statuses)}")


def test_backoff_schedule_initial_5_times_2_capped():
    s = load_settings(environ={}, retry_jitter=0.0)
    assert [backoff_delay(s, n) for n in range(1, 8)] == [5, 10, 20, 40, 80, 160, 320]
    assert backoff_delay(s, 12) == 3600            # 5 * 2**11 = 10240, capped at 1 h
    assert backoff_delay(s, 3, initial=1.5) == 6   # per-job first delay
    s = load_settings(environ={}, retry_jitter=0.0, retry_backoff=3.0, retry_max_delay=100.0)
    assert [backoff_delay(s, n) for n in (1, 2, 3, 4)] == [5, 15, 45, 100]


def test_backoff_jitter_stays_within_its_fraction():
    s = load_settings(environ={}, retry_jitter=0.1)
    values = [backoff_delay(s, 2) for _ in range(200)]
    assert all(10 <= v <= 11 for v in values)
    assert len(set(values)) > 100                  # actually random


def test_retry_settings_from_environment():
    s = load_settings(environ={
        "FUSIONWORKER_MAX_RETRIES": "3", "FUSIONWORKER_RETRY_DELAY": "1.5",
        "FUSIONWORKER_RETRY_BACKOFF": "4", "FUSIONWORKER_RETRY_MAX_DELAY": "60",
        "FUSIONWORKER_REAPER_INTERVAL": "2", "FUSIONWORKER_FAILED_TTL": "100",
    })
    assert (s.max_retries, s.retry_delay, s.retry_backoff, s.retry_max_delay) == (3, 1.5, 4, 60)
    assert (s.reaper_interval, s.failed_ttl) == (2, 100)
    defaults = load_settings(environ={})
    assert (defaults.max_retries, defaults.retry_delay, defaults.retry_backoff,
            defaults.retry_max_delay, defaults.failed_ttl) == (10, 5.0, 2.0, 3600.0, 604800)


def test_retry_then_success(queue, burst, r, prefix, redis_url):
    q = queue()
    job = q.enqueue("tests.jobs:flaky", redis_url, f"{prefix}:n", 2, max_retries=3,
                    retry_delay=0.01)
    job = run_until(burst, q, job.id, ("finished", "failed"))
    assert job.status == "finished" and job.result == 3 and job.attempts == 3
    assert job.error_type is None and job.failure_reason is None
    assert q.job_ids("failed") == []


def test_retry_exhausted_goes_to_failed_registry(queue, burst, r, prefix, redis_url):
    q = queue()
    job = q.enqueue("tests.jobs:flaky", redis_url, f"{prefix}:n", 99, max_retries=2,
                    retry_delay=0.01)
    job = run_until(burst, q, job.id, ("finished", "failed"))
    assert job.status == "failed" and job.attempts == 3        # first run + 2 retries
    assert job.error_type == "ConnectionError" and "transient failure 3" in job.error_message
    assert q.job_ids("failed") == [job.id]
    assert r.ttl(q.qkeys.job(job.id)) > 0                      # retention (failed_ttl)


def test_retry_exception_with_delay_and_per_job_delay(queue, burst, r):
    q = queue()
    asked = q.enqueue("tests.jobs:retry_me", 0.7, max_retries=1)
    burst()
    job = q.fetch_job(asked.id)
    assert job.status == "scheduled" and job.error_type == "Retry"
    assert job.scheduled_for - job.ended_at == pytest.approx(0.7, abs=0.01)
    assert q.job_ids("scheduled") == [job.id]
    burst()                                       # not due yet: nothing runs
    assert q.fetch_job(job.id).attempts == 1
    job = run_until(burst, q, job.id, ("failed",))  # second Retry: attempts used up
    assert job.attempts == 2 and job.error_type == "Retry"

    per_job = q.enqueue("tests.jobs:conn_error", max_retries=4, retry_delay=2)
    burst()
    job = q.fetch_job(per_job.id)
    assert job.status == "scheduled"
    assert 2.0 <= job.scheduled_for - job.ended_at <= 2.0 * 1.1 + 0.01   # jitter 10 %


def test_non_retryable_error_fails_at_once_and_retryable_is_configurable(
        queue, burst, settings):
    q = queue()
    job = q.enqueue("tests.jobs:boom", max_retries=5)
    burst()
    job = q.fetch_job(job.id)
    assert job.status == "failed" and job.attempts == 1 and job.failure_reason == "exception"

    job = q.enqueue("tests.jobs:boom", max_retries=5, retry_delay=0.01)
    burst(settings=settings.replace(retryable=("builtins.ValueError",)))
    assert q.fetch_job(job.id).status == "scheduled"


def test_global_max_retries_default_applies(queue, burst, settings):
    q = queue()
    job = q.enqueue("tests.jobs:conn_error")     # settings fixture: max_retries=0
    burst()
    assert q.fetch_job(job.id).status == "failed"
    s = settings.replace(max_retries=2, retry_delay=0.01)
    from fusionworker.core.queue import Queue
    job = Queue("default", q.connection, settings=s).enqueue("tests.jobs:conn_error")
    assert job.max_retries == 2
    job = run_until(lambda name: burst(name, settings=s), q, job.id, ("failed",))
    assert job.attempts == 3


def test_cli_enqueue_max_retries_and_retry_delay(settings, queue, r):
    from click.testing import CliRunner

    from fusionworker.cli import main

    result = CliRunner().invoke(main, [
        "--redis-url", settings.redis_url, "enqueue", "cli", "tests.jobs:noop",
        "--max-retries", "7", "--retry-delay", "1.25",
    ], env={"FUSIONWORKER_PREFIX": settings.prefix, "FUSIONWORKER_ALLOWED_MODULES": "tests"},
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    q = queue("cli")
    job = q.fetch_job(q.job_ids()[0])
    assert job.max_retries == 7 and job.retry_delay == 1.25
