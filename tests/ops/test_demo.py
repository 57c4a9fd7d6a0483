"""``demo`` runs under its own key prefix, emptied first: an earlier run never mixes in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fusionworker.core.queue import Queue
from fusionworker.ops.demo import clear, demo_prefix
from tests.conftest import ROOT, worker_env


def test_clear_deletes_the_demo_prefix_only(r, settings):
    own = demo_prefix(settings.prefix)
    Queue("sms", r, settings=settings.replace(prefix=own)).enqueue(
        "fusionworker.ops.demo:send_sms", "+1", "x")
    kept = Queue("sms", r, settings=settings).enqueue("fusionworker.ops.demo:send_sms", "+1", "x")
    assert clear(r, own) > 0
    assert list(r.scan_iter(match=f"{own}:*")) == []
    assert Queue("sms", r, settings=settings).fetch_job(kept.id) is not None


@pytest.mark.slow  # a real demo: two worker processes, a job that times out after 2 s
def test_the_demo_summary_counts_this_run_only(r, settings):
    own = demo_prefix(settings.prefix)
    earlier = Queue("email", r, settings=settings.replace(prefix=own))
    for i in range(5):       # an earlier run's leftovers
        earlier.enqueue("fusionworker.ops.demo:send_email", f"u{i}@example.com", "old")
    proc = subprocess.run(
        [sys.executable, "-m", "fusionworker", "demo", "--jobs", "3", "--workers", "2"],
        env=worker_env(settings), cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(prefix {own})" in proc.stdout
    stats = [Queue(n, r, settings=settings.replace(prefix=own)).stats()
             for n in ("sms", "email", "webhook")]
    # 3 sample jobs, then one that fails, one that times out and one that retries (at
    # random: it may finish or use up its retries); the 5 earlier jobs are gone
    assert sum(s["finished"] + s["failed"] for s in stats) == 6
    assert 2 <= sum(s["failed"] for s in stats) <= 3
    assert Queue("email", r, settings=settings).stats()["pending"] == 0   # the real prefix
