"""``--max-horse-memory`` end to end: a real worker, a real horse that grows past the
ceiling while its job runs, killed, and the job's failure saying what to change."""

from __future__ import annotations

import time

from fusionworker.core.job import FailureReason
from fusionworker.middleware.horse_memory import HorseMemoryLimit


def test_a_horse_over_the_ceiling_is_killed_and_its_job_names_the_setting(queue, burst, settings):
    q = queue()
    limited = settings.replace(max_horse_memory=60)
    job = q.enqueue("tests.jobs:allocate", 200, 60, timeout=120, max_retries=0)
    began = time.monotonic()
    burst(settings=limited, middleware=[HorseMemoryLimit(limited)])
    took = time.monotonic() - began
    done = q.fetch_job(job.id)
    assert (done.status, done.failure_reason) == ("failed", FailureReason.MEMORY)
    assert done.error_type == "HorseMemoryExceeded"
    assert "--max-horse-memory" in done.error_message
    assert "FUSIONWORKER_MAX_HORSE_MEMORY" in done.error_message
    assert took < 30, f"killed after {took:.1f} s: the ceiling is checked about once a second"
