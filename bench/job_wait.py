"""Cost of ``job.wait()`` from a web request: on a finished job, and end to end.

    PYTHONPATH=. python bench/job_wait.py [-n 300]

1. ``wait()`` on a job that is already finished (what a request pays when the
   job was quick): SUBSCRIBE on a pooled pub/sub connection + one HGETALL.
2. enqueue -> ``wait()`` returns, with one idle in-process-started worker
   process serving the queue (pick-up + run + the finish PUBLISH wake-up).

Uses ``REDIS_URL`` (default 127.0.0.1:6379); keys under a random prefix are
deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=300)
    args = parser.parse_args(argv)
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"jw{uuid.uuid4().hex[:8]}"
    from fusionworker import Queue
    from fusionworker.core.config import load_settings

    settings = load_settings(environ={}, redis_url=url, prefix=prefix, allowed_modules=("bench",))
    client = redis.Redis.from_url(url)
    q = Queue("wait", client, settings=settings, events=False)
    env = {**os.environ, "REDIS_URL": url, "FUSIONWORKER_PREFIX": prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "bench", "FUSIONWORKER_LOG_LEVEL": "WARNING",
           "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, str(ROOT / "run_worker.py"), "worker",
                               "--customq", "wait"], env=env)
    try:
        q.enqueue("bench.jobs:noop").wait(30)            # worker up, fork server warm
        done = q.enqueue("bench.jobs:noop").wait(30)
        finished = []
        for _ in range(args.n):
            t0 = time.perf_counter()
            done.wait(5)
            finished.append(time.perf_counter() - t0)
        round_trip = []
        for _ in range(args.n):
            t0 = time.perf_counter()
            q.enqueue("bench.jobs:noop").wait(30)
            round_trip.append(time.perf_counter() - t0)

        def p(xs: list[float], q_: float) -> float:
            return sorted(xs)[min(len(xs) - 1, int(q_ * len(xs)))] * 1000

        print(f"{'':<34}{'median ms':>10}{'p99 ms':>10}")
        print(f"{'wait() on a finished job':<34}{statistics.median(finished) * 1000:>10.3f}"
              f"{p(finished, 0.99):>10.3f}")
        print(f"{'enqueue -> wait() returns':<34}{statistics.median(round_trip) * 1000:>10.3f}"
              f"{p(round_trip, 0.99):>10.3f}")
    finally:
        worker.terminate()
        worker.wait(30)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])


if __name__ == "__main__":
    main()
