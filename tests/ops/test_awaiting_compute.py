"""Awaiting compute (issue 34, seed 003's awaitingCompute): per queue, the jobs ready now
that no free slot of a live worker serving the queue will take, in ``info --json``,
the ``info`` table, and the exporter's gauge (docs/operations.md defines it)."""

from __future__ import annotations

import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest

from fusionworker.core.keys import Keys
from fusionworker.middleware.metrics import QueueCollector
from tests.conftest import ROOT, worker_env
from tests.ops.test_info_events import info
from tests.waiting import wait_for


def by_queue(settings) -> dict[str, dict]:
    return {q["queue"]: q for q in info(settings)["queues"]}


def scrape(r, settings) -> str:
    registry = CollectorRegistry()
    registry.register(QueueCollector(r, settings))
    return generate_latest(registry).decode()


def test_ready_jobs_beyond_the_free_slots_await_compute(r, settings, queue, processes):
    busy, idle = queue("busy"), queue("nobody")
    processes.worker("-q", "busy", "--concurrency", "2")
    key = Keys(settings.prefix).worker
    name = wait_for(lambda: next(iter(r.smembers(Keys(settings.prefix).workers)), None))
    running = [busy.enqueue("tests.jobs:sleep", 60) for _ in range(2)]
    wait_for(lambda: all(busy.fetch_job(j.id).status == "started" for j in running))
    wait_for(lambda: len(r.hget(key(name), "current_jobs").split(",")) == 2)
    waiting = [busy.enqueue("tests.jobs:noop") for _ in range(3)]
    later = busy.enqueue_in(3600, "tests.jobs:noop")
    for _ in range(2):
        idle.enqueue("tests.jobs:noop")              # no worker serves it at all
    doc = by_queue(settings)
    assert doc["busy"]["pending"] == 3 and doc["busy"]["started"] == 2
    assert doc["busy"]["awaiting_compute"] == 3      # both slots taken: all three wait
    assert doc["nobody"]["awaiting_compute"] == 2
    busy.hold(waiting[0].id)
    busy.hold(later.id)
    doc = by_queue(settings)
    assert doc["busy"]["awaiting_compute"] == 2 and doc["busy"]["held"] == 2
    assert doc["busy"]["scheduled"] == 0
    metrics = scrape(r, settings)
    assert 'fusionworker_queue_awaiting_compute{queue="busy"} 2.0' in metrics
    assert 'fusionworker_queue_held{queue="busy"} 2.0' in metrics
    table = subprocess.run([sys.executable, "run_worker.py", "info", "-Q"],
                           env=worker_env(settings), cwd=str(ROOT), capture_output=True,
                           text=True, timeout=60, check=True).stdout
    header, *rows = table.splitlines()[2:5]
    assert header.split()[5:8] == ["AWAIT", "SCHED", "HELD"]
    assert [row.split()[5] for row in rows if row.startswith("busy")] == ["2"]
    idle.pause()                                     # waits for unpause, not for compute
    assert by_queue(settings)["nobody"]["awaiting_compute"] == 0


def test_a_free_slot_takes_a_ready_job_so_it_does_not_await(r, settings, queue):
    """No worker process: the heartbeat of a live idle worker with a free slot (as its
    loop writes it) makes the ready job 'about to be taken', capped by max_active."""
    q = queue("solo")
    q.enqueue("tests.jobs:noop")
    q.enqueue("tests.jobs:noop")
    keys = Keys(settings.prefix)
    r.sadd(keys.workers, "w.1")
    r.hset(keys.worker("w.1"), mapping={"name": "w.1", "queues": "solo", "state": "idle",
                                        "concurrency": "1", "current_jobs": ""})
    assert q.stats()["awaiting_compute"] == 1        # one free slot, two ready jobs
    r.hset(keys.worker("w.1"), "state", "suspended")
    assert q.stats()["awaiting_compute"] == 2        # a suspended worker claims nothing
    r.hset(keys.worker("w.1"), mapping={"state": "idle", "concurrency": "4"})
    assert q.stats()["awaiting_compute"] == 0
    q.set_max_active(1)
    assert q.stats()["awaiting_compute"] == 1        # the cap leaves room for one
    q.set_max_active(None)
    # a busy worker the governor holds claims nothing with its free slots (it was counted:
    # AWAIT 1 for 2 ready jobs; found by a trial)
    r.hset(keys.worker("w.1"), mapping={"state": "busy", "concurrency": "2",
                                        "current_jobs": "x", "throttle": "RAM at 16.4%"})
    assert q.stats()["awaiting_compute"] == 2
    # nor does one silent past its lease (dead or frozen: its key lives on for worker_ttl)
    r.hset(keys.worker("w.1"), mapping={"throttle": "", "worker_ttl": "420", "lease": "30"})
    r.expire(keys.worker("w.1"), 420)
    assert q.stats()["awaiting_compute"] == 1
    r.expire(keys.worker("w.1"), 420 - 31)
    assert q.stats()["awaiting_compute"] == 2
