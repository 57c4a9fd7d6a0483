"""The result cap (``FUSIONWORKER_MAX_RESULT_BYTES``, default 16 MiB): a job whose
return value is larger fails as ``ResultTooLarge`` and nothing of it is stored in
Redis; a value at the cap is stored."""

from __future__ import annotations

import psutil
import pytest

from fusionworker.core.config import Settings
from tests.waiting import wait_for


def test_the_default_cap_is_16_mib():
    assert Settings().max_result_bytes == 16 * 1024 * 1024


def test_a_result_over_the_cap_fails_the_job_and_stores_nothing(queue, burst, r, settings):
    q = queue("default")
    encoded = 100_000                   # "x" * n is n + 2 bytes of JSON
    at_cap = q.enqueue("tests.jobs:sized_result", encoded - 2)
    over = q.enqueue("tests.jobs:sized_result", encoded - 1, max_retries=3)
    burst("default", settings=settings.replace(max_result_bytes=encoded))
    assert q.fetch_job(at_cap.id).status == "finished"
    assert q.fetch_job(at_cap.id).result == "x" * (encoded - 2)
    job = q.fetch_job(over.id)
    assert job.status == "failed" and job.attempts == 1        # not retried: same value
    assert job.error_type == "ResultTooLarge"
    assert "100001 bytes" in job.error_message and "FUSIONWORKER_MAX_RESULT_BYTES" in job.error_message
    assert job.result is None
    assert r.hget(q.qkeys.job(over.id), "result") in (None, "")
    assert r.memory_usage(q.qkeys.job(over.id)) < encoded


@pytest.mark.slow
def test_a_worker_refuses_a_result_over_the_default_cap(queue, r, processes):
    q = queue("default")
    job = q.enqueue("tests.jobs:sized_result", 16 * 1024 * 1024 + 1)
    processes.worker("-q", "default")
    wait_for(lambda: q.fetch_job(job.id).status == "failed")
    assert q.fetch_job(job.id).error_type == "ResultTooLarge"
    assert r.memory_usage(q.qkeys.job(job.id)) < 1024 * 1024


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), bytes."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@pytest.mark.slow
def test_the_horse_refuses_a_result_over_the_cap_before_it_crosses_the_pipe(
        queue, r, processes):
    """The cap is checked in the horse: a 64 MiB result never reaches the fork server or
    the worker (their peak memory does not grow by it)."""
    q = queue("default")
    first = q.enqueue("tests.jobs:sized_result", 10)
    worker = processes.worker("-q", "default", env={"FUSIONWORKER_MAX_RESULT_BYTES": "1000000"})
    wait_for(lambda: q.fetch_job(first.id).status == "finished")
    server = wait_for(lambda: [c.pid for c in psutil.Process(worker.pid).children()
                               if "fork server" in " ".join(c.cmdline())], what="fork server")[0]
    before = {pid: _peak_rss(pid) for pid in (worker.pid, server)}
    big = q.enqueue("tests.jobs:sized_result", 64 * 1024 * 1024)
    wait_for(lambda: q.fetch_job(big.id).status == "failed", timeout=60)
    job = q.fetch_job(big.id)
    assert job.error_type == "ResultTooLarge" and "the limit is 1000000 bytes" in job.error_message
    grown = {pid: _peak_rss(pid) - before[pid] for pid in before}
    assert all(g < 16 * 1024 * 1024 for g in grown.values()), grown
