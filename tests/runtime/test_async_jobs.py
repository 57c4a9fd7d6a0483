"""``async def`` jobs under the death penalty beyond tests/runtime/test_async_and_path.py: a timeout
cancels the coroutine (its cleanup runs), a coroutine that blocks its own loop still times out,
and a real worker process awaits, fails and times out async jobs."""

from __future__ import annotations

import os


def _run_one(queue, burst, func, *args, **options):
    q = queue()
    job = q.enqueue(func, *args, **options)
    burst()
    return q.fetch_job(job.id)


def test_async_job_over_its_timeout_fails_by_the_death_penalty(queue, burst, tmp_path):
    marker = tmp_path / "cancelled"
    job = _run_one(queue, burst, "tests.async_jobs:touch_on_cancel", str(marker), 30,
                   timeout=0.3)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert job.error_type == "JobTimeoutError" and "0.3" in job.error_message
    # asyncio.run cancelled the task on the way out: its cleanup ran, in the horse
    assert marker.exists() and int(marker.read_text()) != os.getpid()


def test_async_job_that_blocks_its_loop_still_times_out(queue, burst):
    job = _run_one(queue, burst, "tests.async_jobs:block", 30, timeout=0.3)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert job.error_type == "JobTimeoutError"


def test_async_jobs_in_a_real_worker_process(queue, processes):
    q = queue("asyncq")
    ok = q.enqueue("tests.async_jobs:add", 20, 22)
    bad = q.enqueue("tests.async_jobs:boom", "from a real worker")
    slow = q.enqueue("tests.async_jobs:sleep", 30, timeout=0.5)
    proc = processes.worker("--customq", "asyncq", "--burst")
    assert proc.wait(60) == 0, processes.output(proc)
    done = {j.id: j for j in (q.fetch_job(ok.id), q.fetch_job(bad.id), q.fetch_job(slow.id))}
    assert done[ok.id].status == "finished" and done[ok.id].result["sum"] == 42
    assert done[bad.id].failure_reason == "exception"
    assert "from a real worker" in done[bad.id].error and "in boom" in done[bad.id].traceback
    assert done[slow.id].failure_reason == "timeout"
