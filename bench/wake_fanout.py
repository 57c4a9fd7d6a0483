#!/usr/bin/env python3
"""What an enqueue costs Redis while N workers are subscribed to its queue's wake-ups.

    python bench/wake_fanout.py [--jobs 3000] [--subscribers 0,20] [--rounds 3]
                                [--tree /path/to/other/checkout ...]
                                [--redis-url redis://127.0.0.1:6379/13]

Each subscriber is a pub/sub connection to the queue's wake channel, read by a
thread of the measuring process (what an idle worker's loop does). One producer
enqueues ``--jobs`` jobs (``Queue.enqueue_call``, one at a time); per enqueue: Redis
CPU (``used_cpu_user + used_cpu_sys`` of ``INFO cpu``: the server is shared with
whatever else runs, so read it as a rough figure), enqueues per second, and the
messages the subscribers read. With ``--tree``, each round runs every tree once, in a
fresh interpreter with ``PYTHONPATH`` set to it, alternating which goes first;
medians are printed. Only this run's keys are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent


def child(url: str, jobs: int, subscribers: int) -> dict[str, float]:
    """One measurement in this interpreter (its ``fusionworker`` is the tree's)."""
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    r = redis.Redis.from_url(url)
    prefix = f"fwfan{uuid.uuid4().hex[:8]}"
    q = Queue("fan", settings=load_settings(environ={}, redis_url=url, prefix=prefix,
                                            allowed_modules=("bench",)))
    subs = []
    for _ in range(subscribers):
        ps = redis.Redis.from_url(url).pubsub()
        ps.subscribe(q.qkeys.wake)
        subs.append(ps)
    read, stop = [0], threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for ps in subs:
                while (msg := ps.get_message(timeout=0)) is not None:
                    read[0] += msg["type"] == "message"
            time.sleep(0.001)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    time.sleep(0.2)                        # every subscription confirmed and read
    cpu = r.info("cpu")
    before = cpu["used_cpu_user"] + cpu["used_cpu_sys"]
    t0 = time.perf_counter()
    for _ in range(jobs):
        q.enqueue_call("bench.jobs:noop", args=[])
    wall = time.perf_counter() - t0
    cpu = r.info("cpu")
    spent = cpu["used_cpu_user"] + cpu["used_cpu_sys"] - before
    time.sleep(0.2)
    stop.set()
    thread.join()
    for ps in subs:
        ps.close()
    for key in r.scan_iter(f"{prefix}:*", count=1000):
        r.delete(key)
    return {"redis_us": spent / jobs * 1e6, "enqueues_per_s": jobs / wall,
            "messages": float(read[0])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--subscribers", default="0,20")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tree", action="append", default=[])
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument("--child", nargs=2, metavar=("JOBS", "SUBSCRIBERS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.redis_url, int(args.child[0]), int(args.child[1]))))
        return 0
    trees = [str(ROOT), *args.tree]
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    for rnd in range(args.rounds):
        for n in (int(s) for s in args.subscribers.split(",")):
            order = trees if rnd % 2 == 0 else trees[::-1]
            for tree in order:
                env = {**os.environ, "PYTHONPATH": tree}
                out = subprocess.run([sys.executable, __file__, "--redis-url", args.redis_url,
                                      "--child", str(args.jobs), str(n)], env=env, cwd=tree,
                                     capture_output=True, text=True, check=True)
                results.setdefault((tree, n), []).append(json.loads(out.stdout))
    print(f"{args.jobs} enqueues per run, {args.rounds} rounds, medians; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'tree':40} {'subscribers':>11} {'Redis us/enqueue':>17} {'enqueues/s':>11} "
          f"{'messages read':>14}")
    for (tree, n), runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{tree:40} {n:>11} {med['redis_us']:>17.1f} {med['enqueues_per_s']:>11.0f} "
              f"{med['messages']:>14.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
