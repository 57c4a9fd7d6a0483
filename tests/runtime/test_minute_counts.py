"""The queues' per-minute outcome counts (the dashboard's chart, ``info``'s last hour) are
counted in the worker, in the server minute finish.lua answers, and written by its
heartbeat and when it stops (runtime/minutes.py, minutes.lua), not by every finish."""

from __future__ import annotations

import time
from typing import Any

import redis

from fusionworker.core import admin
from fusionworker.core.hooks import Middleware, Outcome, WorkerContext
from fusionworker.core.job import Job
from fusionworker.core.keys import Keys
from fusionworker.core.queue import scripts_for
from fusionworker.runtime.minutes import MinuteCounts
from fusionworker.testing import run_burst
from tests.redis_servers import redis_single  # noqa: F401 - fixture


def _totals(r: Any, prefix: str, queue: str = "default") -> dict[str, int]:
    rows = admin.minute_counts(r, [queue], prefix, minutes=5)
    return {k: sum(row[k] for row in rows) for k in ("finished", "failed")}


class _Reads(Middleware):
    """The chart's counts as each job ends and as the worker stops."""

    def __init__(self, r: Any, prefix: str) -> None:
        self.r, self.prefix = r, prefix
        self.after: list[dict[str, int]] = []
        self.at_stop: dict[str, int] = {}

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        self.after.append(_totals(self.r, self.prefix))

    def on_stop(self, worker: WorkerContext) -> None:
        self.at_stop = _totals(self.r, self.prefix)


def test_a_burst_worker_writes_the_chart_counts_before_it_stops(queue, burst, r, settings):
    q = queue()
    for _ in range(2):
        q.enqueue("tests.jobs:noop")
    q.enqueue("tests.jobs:boom")
    q.enqueue("tests.jobs:retry_me", max_retries=1, retry_delay=600)
    reads = _Reads(r, settings.prefix)
    # no heartbeat during the run but the first (at the start): only the stop writes them
    burst(settings=settings.replace(heartbeat_interval=60.0, lease=180.0), middleware=[reads])
    assert reads.after == [{"finished": 0, "failed": 0}] * 4
    assert reads.at_stop == {"finished": 2, "failed": 1}
    keys = list(r.scan_iter(match=q.qkeys.base + "minute:*"))
    counts: dict[str, int] = {}
    for key in keys:
        assert 7000 < r.ttl(key) <= 7200
        for outcome, n in r.hgetall(key).items():
            counts[outcome] = counts.get(outcome, 0) + int(n)
    assert counts == {"finished": 2, "failed": 1, "retry": 1}


def test_run_burst_leaves_the_chart_counted(queue, r, settings):
    q = queue("charted")
    q.enqueue("tests.jobs:add", 1, 2)
    q.enqueue("tests.jobs:boom")
    ran = run_burst(q)
    assert [j.status for j in ran] == ["finished", "failed"]
    assert _totals(r, settings.prefix, "charted") == {"finished": 1, "failed": 1}
    # in the minute of the outcome's server time (the record's ended_at)
    minute = int(ran[0].ended_at // 60)
    assert r.hget(q.qkeys.minute(minute), "finished") == "1"


class _Steal(Middleware):
    """Another attempt owns the job once it is claimed: its finish is refused (stale)."""

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        worker.connection.hset(worker.keys.queue(job.queue).job(job.id), "token", "another")


def test_a_refused_outcome_is_not_counted(queue, burst, r, settings):
    q = queue()
    q.enqueue("tests.jobs:noop")
    burst(middleware=[_Steal()])
    assert _totals(r, settings.prefix) == {"finished": 0, "failed": 0}
    assert not list(r.scan_iter(match=q.qkeys.base + "minute:*"))


def test_counts_not_taken_are_given_back_and_old_ones_dropped(queue, r, settings):
    q = queue()
    minutes = MinuteCounts(scripts_for(r), Keys(settings.prefix), 500)
    now = float(r.time()[0])
    for outcome in ("failed", "finished", "finished", "retry"):
        minutes.count("default", now, outcome)
    minutes.count("default", now - 3 * 3600, "finished")  # older than the keys live
    minutes.count("other", None, "failed")                 # this host's clock
    pipe = r.pipeline(transaction=False)
    calls = minutes.queue(pipe)
    assert [c[1] for c in calls] == [[q.qkeys.base], [Keys(settings.prefix).queue("other").base]]
    pipe.reset()
    # the first call took its first triple only (refused after it), the second nothing
    minutes.settle(calls, [1, RuntimeError("OOM")])
    minute = int(now // 60)
    assert {k: n for k, n in minutes.unwritten.items() if k[0] == "default"} == {
        ("default", minute, "finished"): 2, ("default", minute, "retry"): 1}
    [(other, n)] = [(k, n) for k, n in minutes.unwritten.items() if k[0] == "other"]
    assert other[2] == "failed" and n == 1 and abs(other[1] - time.time() // 60) <= 1
    minutes.flush(r)
    assert not minutes.unwritten
    assert r.hgetall(q.qkeys.minute(minute)) == {"finished": "2", "retry": "1"}


def test_a_flush_whose_script_redis_forgot_loads_it_and_counts_once(redis_single):  # noqa: F811
    r = redis.Redis(port=redis_single, decode_responses=True)   # a private server
    minutes = MinuteCounts(scripts_for(r), Keys("fw"), 500)
    minutes.count("default", time.time(), "finished")
    r.script_flush()
    minutes.flush(r)
    key = Keys("fw").queue("default").minute(int(time.time() // 60))
    assert r.hgetall(key) == {"finished": "1"} and not minutes.unwritten
    r.close()
