"""A worker SIGKILLed (or frozen, or cut off from Redis) while it ran a job: its heartbeat
hash lives on until its TTL (minutes), still saying ``busy``. Every reader shows it
``silent`` once its last heartbeat is older than its lease, as ``health`` and the reaper
judge it: ``info``, the worker listings, the exporter's ``fusionworker_workers``."""

from __future__ import annotations

import signal

from prometheus_client import CollectorRegistry, generate_latest

from fusionworker.core import admin
from fusionworker.core.worker_list import live_workers
from fusionworker.middleware.metrics import QueueCollector
from tests.waiting import wait_for


def test_a_killed_busy_worker_reads_silent_after_its_lease(processes, queue, r, settings):
    q = queue()
    proc = processes.worker("-q", "default", "--name", "w-killed",
                            env={"FUSIONWORKER_LEASE": "2"})
    job = q.enqueue("tests.jobs:sleep", 60)
    wait_for(lambda: q.fetch_job(job.id).status == "started", timeout=30)

    def state() -> str:
        [w] = [w for w in admin.workers(r, settings.prefix) if w.get("name") == "w-killed"]
        return admin.describe_worker(w, admin.server_time(r))["state"]

    wait_for(lambda: state() == "busy", timeout=10, what="the hash says busy")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_for(lambda: state() == "silent", timeout=10, what="silent after its 2 s lease")
    assert [w.state for w in live_workers(r, settings=settings) if w.name == "w-killed"] == [
        "silent"]
    registry = CollectorRegistry()
    registry.register(QueueCollector(r, settings, ["default"]))
    scraped = generate_latest(registry).decode()
    assert 'fusionworker_workers{state="silent"} 1.0' in scraped
    assert 'fusionworker_workers{state="busy"} 0.0' in scraped
