"""``info --json`` carries each worker's event-sink counters (docs/observability.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, worker_env
from tests.waiting import wait_for


def info(settings) -> dict:
    proc = subprocess.run([sys.executable, "run_worker.py", "info", "--json"],
                          env=worker_env(settings), cwd=str(ROOT), capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_info_json_shows_the_event_sink_counters_of_each_worker(r, settings, queue, processes):
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2)
    processes.worker("-q", "default")
    wait_for(lambda: q.fetch_job(job.id).status == "finished")
    [worker] = wait_for(lambda: info(settings)["workers"], timeout=20)
    assert worker["events_dropped"] == 0 and worker["events_errors"] == 0
    assert isinstance(worker["events_buffered"], int) and worker["events_buffered"] >= 0
