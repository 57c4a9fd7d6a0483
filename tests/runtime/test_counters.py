"""The worker hash's counters (successful, failed, total_working_time) are counted in
the worker and written by its heartbeat and when it stops (runtime/counters.py), not
by every job's finish pipeline: at most one heartbeat interval behind."""

from __future__ import annotations

from typing import Any

import pytest

from fusionworker.core.hooks import Middleware, Outcome, WorkerContext
from fusionworker.core.job import Job
from fusionworker.core.keys import Keys
from tests.runtime.test_minute_counts import _totals
from tests.waiting import heartbeats, wait_for


class _Reads(Middleware):
    """The worker hash's counters as each job ends and as the worker stops."""

    def __init__(self, r: Any) -> None:
        self.r = r
        self.after: list[dict[str, str]] = []
        self.at_stop: dict[str, str] = {}

    def _counters(self, worker: WorkerContext) -> dict[str, str]:
        return self.r.hgetall(worker.keys.worker(worker.name))

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        self.after.append(self._counters(worker))

    def on_stop(self, worker: WorkerContext) -> None:
        self.at_stop = self._counters(worker)


def test_a_burst_worker_writes_its_counters_before_it_stops(queue, burst, r, settings):
    q = queue()
    for _ in range(2):
        q.enqueue("tests.jobs:noop")
    q.enqueue("tests.jobs:boom")
    reads = _Reads(r)
    # no heartbeat during the run but the first (at the start): only the stop writes them
    w = burst(settings=settings.replace(heartbeat_interval=60.0, lease=180.0),
              middleware=[reads])
    assert (w.successful, w.failed) == (2, 1)
    assert [(a["successful"], a["failed"]) for a in reads.after] == [("0", "0")] * 3
    assert (reads.at_stop["successful"], reads.at_stop["failed"]) == ("2", "1")
    assert float(reads.at_stop["total_working_time"]) == pytest.approx(w.total_working_time)
    assert float(reads.at_stop["total_working_time"]) > 0
    assert r.ttl(w.key) == -2                            # deregistered: the hash is gone


@pytest.mark.slow
def test_a_running_worker_writes_its_counters_with_its_heartbeat(processes, queue, r, prefix):
    # the worker's counters and the chart's per-minute counts (runtime/minutes.py) alike
    q = queue()
    proc = processes.worker("-q", "default", "--name", "counted")
    key = Keys(prefix).worker("counted")
    wait_for(lambda: r.hget(key, "state") == "idle")
    jobs = [q.enqueue("tests.jobs:noop") for _ in range(3)] + [q.enqueue("tests.jobs:boom")]
    wait_for(lambda: all(q.fetch_job(j.id).status in ("finished", "failed") for j in jobs))
    heartbeats(r, key)                                    # one heartbeat after the last end
    assert (r.hget(key, "successful"), r.hget(key, "failed")) == ("3", "1")
    assert float(r.hget(key, "total_working_time")) > 0
    assert _totals(r, prefix) == {"finished": 3, "failed": 1}
    assert proc.poll() is None
