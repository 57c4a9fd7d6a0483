#!/usr/bin/env python3
"""Bulk enqueue from one producer process: fusionworker against RQ, side by side.

    python bench/enqueue.py [--jobs 20000] [--repeats 5] [--redis-url redis://127.0.0.1:6379/14]

Each repeat runs every system once, alternating which goes first, so drift of
the machine hits both; the figures are medians over the repeats (min-max
shown). A figure is N / (wall time of preparing AND writing N jobs), measured
with ``time.perf_counter`` in this process; the job is ``bench.jobs:noop``
with one small argument, and both systems return their Job objects.

* ``fw``: ``[q.prepare(...) for ...]`` then one ``q.enqueue_many(...)`` call
  (one Lua script per 500-job chunk, two chunks in flight), with the default
  event log on: a "queued" event per job, XADDed to the Redis event stream
  by the chunk's script itself (checked after the timing: N entries).
* ``fw-noevents``: the same with ``Queue(..., events=False)`` (RQ has no event
  log, so this is the like-for-like line).
* ``rq``: ``[Queue.prepare_data(...) for ...]`` then one
  ``rq_queue.enqueue_many(...)`` call (RQ writes them in one pipeline).
* ``fw-single``: ``q.enqueue(...)`` N/10 times, a reference line.
* ``fw-byname``: the same for a job of an allowed module this producer cannot
  import (``bench_workers_only.sms:send``: the job code deployed on the workers
  only), checked by name.

Only this run's keys are deleted afterwards (its fusionworker prefix, its RQ
queue and jobs); nothing is flushed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fusionworker.core.config import load_settings  # noqa: E402
from fusionworker.core.queue import Queue  # noqa: E402
from fusionworker.events import flush_default_sinks  # noqa: E402

SYSTEMS = ("fw", "fw-noevents", "rq", "fw-single", "fw-byname")


def run_fw(url: str, prefix: str, n: int, events: bool = True) -> float:
    r = redis.Redis.from_url(url, decode_responses=True)
    q = Queue("bulk", r, settings=load_settings(environ={}, redis_url=url, prefix=prefix,
                                                          allowed_modules=("bench",)),
              events=None if events else False)
    start = time.perf_counter()
    jobs = q.enqueue_many([q.prepare("bench.jobs:noop", i) for i in range(n)])
    elapsed = time.perf_counter() - start
    assert len(jobs) == n and q.count == n, (len(jobs), q.count)
    if events:  # every "queued" event is in the stream when the call returns
        assert r.xlen(q.keys.events) == n, r.xlen(q.keys.events)
    _delete(r, f"{prefix}:*")
    r.close()
    return n / elapsed


def run_fw_single(url: str, prefix: str, n: int, func: str = "bench.jobs:noop") -> float:
    r = redis.Redis.from_url(url, decode_responses=True)
    q = Queue("single", r, settings=load_settings(
        environ={}, redis_url=url, prefix=prefix,
        allowed_modules=("bench", "bench_workers_only")))
    n = max(1, n // 10)
    start = time.perf_counter()
    for i in range(n):
        q.enqueue(func, i)
    elapsed = time.perf_counter() - start
    assert q.count == n
    flush_default_sinks(30.0)  # the sink thread's events land before the clean-up
    _delete(r, f"{prefix}:*")
    r.close()
    return n / elapsed


def run_rq(url: str, prefix: str, n: int) -> float:
    from rq import Queue as RQQueue

    r = redis.Redis.from_url(url)  # RQ wants bytes
    name = f"{prefix}-rq"
    rq_queue = RQQueue(name, connection=r)
    start = time.perf_counter()
    jobs = rq_queue.enqueue_many([RQQueue.prepare_data("bench.jobs.noop", (i,))
                                  for i in range(n)])
    elapsed = time.perf_counter() - start
    assert len(jobs) == n and rq_queue.count == n, (len(jobs), rq_queue.count)
    pipe = r.pipeline(transaction=False)
    for job in jobs:
        pipe.delete(f"rq:job:{job.id}")
    pipe.delete(f"rq:queue:{name}")
    pipe.srem("rq:queues", f"rq:queue:{name}")
    pipe.execute()
    r.close()
    return n / elapsed


def _delete(r: redis.Redis, pattern: str) -> None:
    batch = list(r.scan_iter(match=pattern, count=1000))
    for i in range(0, len(batch), 500):
        r.delete(*batch[i:i + 500])


def run_fw_noevents(url: str, prefix: str, n: int) -> float:
    return run_fw(url, prefix, n, events=False)


def run_fw_byname(url: str, prefix: str, n: int) -> float:
    return run_fw_single(url, prefix, n, func="bench_workers_only.sms:send")


RUNNERS = {"fw": run_fw, "fw-noevents": run_fw_noevents, "rq": run_rq,
           "fw-single": run_fw_single, "fw-byname": run_fw_byname}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    opts = parser.parse_args()
    systems = [s for s in opts.systems.split(",") if s]
    prefix = f"fwbenchenq{uuid.uuid4().hex[:8]}"
    rates: dict[str, list[float]] = {s: [] for s in systems}
    for repeat in range(opts.repeats):
        order = systems if repeat % 2 == 0 else systems[::-1]
        for system in order:
            rates[system].append(RUNNERS[system](opts.redis_url, prefix, opts.jobs))
        print(f"repeat {repeat + 1}: " + ", ".join(f"{s} {rates[s][-1]:,.0f}/s" for s in systems),
              file=sys.stderr)
    print(f"\n{opts.jobs:,} jobs per run, {opts.repeats} repeats, median (min-max) jobs/s")
    for system in systems:
        values = rates[system]
        print(f"  {system:<10} {statistics.median(values):>9,.0f}   "
              f"({min(values):,.0f}-{max(values):,.0f})")
    for fw in ("fw", "fw-noevents"):
        if fw in rates and "rq" in rates:
            ratios = [f / r for f, r in zip(rates[fw], rates["rq"])]
            print(f"  {fw + ' / rq':<18} {statistics.median(ratios):.2f}x  (median of per-repeat "
                  f"ratios; {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
