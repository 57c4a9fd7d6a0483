#!/usr/bin/env python3
"""What the views of every queue cost at thousands of queues: time and Redis commands.

    python bench/queues_scale.py [--counts 1000,10000] [--jobs 3] [--runs 3]

Runs on a PRIVATE redis-server (``bench/redis_server.py``: a free loopback port, no
persistence, killed at the end), so ``INFO commandstats`` counts nothing but the call
measured. For each count N, twice:

* ``busy``: N queues (``t00000``...) of ``--jobs`` pending jobs each (priorities 10, 0
  and -5 in turn: every band), enqueued with ``Queue.enqueue_many``;
* ``idle``: N known queues with nothing in them (a tenant's queue between bursts: its
  name in the set of known queues, no job, no setting).

Then each call is timed (median of ``--runs``, in this process: the CLI through
click's runner, the dashboard through Starlette's TestClient, no HTTP socket): wall
clock, this process's CPU time (``time.process_time``: less moved by other load on the
machine), and the server's CPU (delta of ``used_cpu_user + used_cpu_sys`` of ``INFO
cpu``); and its Redis commands counted (delta of the ``calls`` of ``INFO
commandstats``, the ``INFO`` itself left out; a pipeline's commands each count):

* ``fusionworker info --json --all``;
* ``GET /api/v1/queues`` (no parameters), ``GET /api/v1/queues?page=1&per_page=50``;
* ``GET /api/v1/info``;
* ``GET /`` (the overview page).

The machine running it is usually shared: read the times as relative ones; the command
counts do not depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

import fusionworker.ops.demo  # noqa: F401  (registers the demo job functions)
from bench.redis_server import HOST, start_single
from fusionworker.cli import main as cli_main
from fusionworker.core.config import load_settings
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.web import create_app

TOKEN = "bench"
SEND = "fusionworker.ops.demo:send_sms"
PRIORITIES = (10, 0, -5)


def commands(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def fill(r: redis.Redis, settings: Any, count: int, jobs: int) -> None:
    """``count`` queues of ``jobs`` pending jobs each (0: known queues, empty)."""
    if not jobs:
        names = [f"t{n:05d}" for n in range(count)]
        for start in range(0, count, 5000):
            r.sadd(Keys(settings.prefix).queues, *names[start:start + 5000])
        return
    for n in range(count):
        q = Queue(f"t{n:05d}", r, settings=settings, events=False)
        q.enqueue_many(q.prepare(SEND, "+1", "hi", priority=PRIORITIES[j % 3])
                       for j in range(jobs))


def server_cpu(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def measure(r: redis.Redis, call: Callable[[], int],
            runs: int) -> tuple[float, float, float, int, int]:
    """Medians of wall ms, this process's CPU ms and the server's CPU ms; the commands of
    the last run; the size of the answer."""
    wall, cpu, server = [], [], []
    used = size = 0
    for _ in range(runs):
        before, server_before = commands(r), server_cpu(r)
        t, c = time.perf_counter(), time.process_time()
        size = call()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        server.append((server_cpu(r) - server_before) * 1000)
        used = commands(r) - before
    return (statistics.median(wall), statistics.median(cpu), statistics.median(server),
            used, size)


def calls(url: str, settings: Any, r: redis.Redis) -> list[tuple[str, Callable[[], int]]]:
    app = create_app(settings, r, history_interval=None)
    client = TestClient(app)
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    runner = CliRunner()
    env = {"REDIS_URL": url, "FUSIONWORKER_PREFIX": settings.prefix}

    def cli() -> int:
        done = runner.invoke(cli_main, ["info", "--json", "--all"], env=env)
        if done.exit_code != 0:
            raise SystemExit(f"info --json --all: exit {done.exit_code}: {done.output[:300]}")
        return len(done.output)

    def get(path: str) -> Callable[[], int]:
        def call() -> int:
            answer = client.get(path)
            if answer.status_code != 200:
                raise SystemExit(f"GET {path}: {answer.status_code} {answer.text[:200]}")
            return len(answer.content)
        return call

    return [("info --json --all", cli), ("GET /api/v1/queues", get("/api/v1/queues")),
            ("GET /api/v1/queues?page=1&per_page=50",
             get("/api/v1/queues?page=1&per_page=50")),
            ("GET /api/v1/info", get("/api/v1/info")), ("GET / (overview)", get("/"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1000,10000")
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    port, stop = start_single("--appendonly", "no")
    try:
        url = f"redis://{HOST}:{port}/0"
        r = redis.Redis.from_url(url, decode_responses=True)
        print(f"private redis-server at {url}")
        print(f"{'queues':>7} {'kind':<5} {'call':<40} {'wall ms':>8} {'cpu ms':>8} "
              f"{'redis ms':>8} {'commands':>9} {'per queue':>9} {'KiB':>8}")
        for count in (int(c) for c in args.counts.split(",")):
            for kind, jobs in (("busy", args.jobs), ("idle", 0)):
                r.flushall()
                prefix = f"fwqs{count}{kind}"
                settings = load_settings(environ={}, redis_url=url, prefix=prefix,
                                         web_token=TOKEN)
                fill(r, settings, count, jobs)
                for name, call in calls(url, settings, r):
                    wall, cpu, server, used, size = measure(r, call, args.runs)
                    print(f"{count:>7} {kind:<5} {name:<40} {wall:8.1f} {cpu:8.1f} "
                          f"{server:8.1f} {used:>9} {used / count:9.2f} {size / 1024:8.1f}",
                          flush=True)
    finally:
        stop()


if __name__ == "__main__":
    main()
