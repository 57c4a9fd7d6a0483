#!/usr/bin/env python3
"""A producer's instructions per enqueue: this tree against others and the peers, counted.

    python bench/producer_instructions.py [--tree DIR ...] [--jobs 1000] [--rounds 2]
                                          [--peers dramatiq,rq]

A web app pays for each job it enqueues in its own CPU (a request's latency), and
on a shared virtual machine a CPU time moves with everything else. This bench runs
the producer under ``valgrind --tool=callgrind`` and counts the instructions of its
Python process (user space: the kernel's part of the round trip is not in them):
twice per system, with ``--warm`` and with ``--warm + --jobs`` enqueues, so the
difference divided by ``--jobs`` is one enqueue, without the interpreter's start
and the imports. ``PYTHONHASHSEED=0`` keeps the runs alike.

Each enqueue is one job of ``bench.io_jobs:io_sleep`` with three arguments, sent
one at a time to the Redis of ``--redis-url`` under a prefix (or namespace) of its
own (the event log on, as by default), deleted afterwards:

* ``fw`` (this tree, and each ``--tree`` checkout): ``Queue.enqueue_call``;
* ``redis-py``: the same ``enqueue.lua`` called by ``EVALSHA`` through redis-py
  alone (``Redis.evalsha`` with the arguments ``enqueue_call`` sends): the floor
  of any producer on this client;
* ``dramatiq``: ``broker.enqueue`` of a ``Message`` (its Redis broker);
* ``rq``: ``Queue.enqueue`` (its own pipeline of commands).

Needs ``valgrind`` (Debian's package). A run of 1,000 enqueues under callgrind
takes some seconds; the rounds alternate the systems.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent

#: what each system's producer runs: $N enqueues (the bench fills in N, the URL, the prefix)
CODE = {
    "fw": """
import time, redis
from fusionworker.core.queue import Queue
q = Queue("pi", redis.Redis.from_url(URL))
for _ in range(N):
    q.enqueue_call("bench.io_jobs:io_sleep", args=["/dev/null", time.time(), 0.1])
""",
    "redis-py": """
import time, itertools, redis
from fusionworker.core.queue import Queue
client = redis.Redis.from_url(URL)
q = Queue("pi", client)
sha = q.scripts.enqueue.script.sha
stream_keys, stream_args = q._script_events() or ([], ["", ""])
keys = [q.qkeys.base, q.keys.queues, *stream_keys]
p = q.prepare_call("bench.io_jobs:io_sleep", args=["/dev/null", time.time(), 0.1])
for n in range(N):
    client.evalsha(sha, len(keys), *keys, f"{p.id}{n}", p.priority, p.mode, p.when, "", 30,
                   *stream_args[:2], *p.fields)
""",
    "dramatiq": """
import time, dramatiq
from dramatiq.brokers.redis import RedisBroker
broker = RedisBroker(url=URL, namespace=PREFIX)
for _ in range(N):
    broker.enqueue(dramatiq.Message(queue_name="pi", actor_name="io_sleep",
                                    args=("/dev/null", time.time(), 0.1), kwargs={}, options={}))
""",
    "rq": """
import time, redis
from rq import Queue
q = Queue(PREFIX, connection=redis.Redis.from_url(URL))
for _ in range(N):
    q.enqueue("bench.io_jobs.io_sleep", "/dev/null", time.time(), 0.1)
""",
}


def counted(code: str, tree: Path, n: int, url: str, prefix: str, workdir: Path) -> int:
    """Instructions of one producer process making ``n`` enqueues."""
    out = workdir / f"cg.{prefix}.{n}"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0",
           "FUSIONWORKER_PREFIX": prefix, "FUSIONWORKER_ALLOWED_MODULES": "bench"}
    script = f"URL, PREFIX, N = {url!r}, {prefix!r}, {n}\n" + code
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    os.path.realpath(sys.executable), "-c", script],
                   env=env, cwd=tree, check=True, capture_output=True, timeout=1200)
    for line in out.open():
        if line.startswith(("summary:", "totals:")):
            out.unlink()
            return int(line.split()[1])
    raise SystemExit(f"no total in {out}")


def per_enqueue(system: str, tree: Path, args: argparse.Namespace, workdir: Path) -> float:
    prefix = f"pi{os.getpid()}{system.replace('-', '')}"
    code = CODE["fw" if system.startswith("fw") else system]
    try:
        low = counted(code, tree, args.warm, args.redis_url, prefix, workdir)
        high = counted(code, tree, args.warm + args.jobs, args.redis_url, prefix, workdir)
    finally:
        client = redis.Redis.from_url(args.redis_url)
        if system == "rq":      # its jobs are rq:job:<id>: its own call deletes them
            from rq import Queue

            Queue(prefix, connection=client).delete(delete_jobs=True)
        for key in client.scan_iter(f"*{prefix}*", count=1000):
            client.delete(key)
    return (high - low) / int(args.jobs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], type=Path,
                        help="another checkout to count alternately (repeatable)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--warm", type=int, default=200, help="enqueues before those counted")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peers", default="redis-py,dramatiq,rq",
                        help="comma list of redis-py, dramatiq, rq ('' for none)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    systems = [("fw", ROOT)] + [(f"fw {t.resolve().name}", t.resolve()) for t in args.tree]
    systems += [(p, ROOT) for p in args.peers.split(",") if p]
    counts: dict[str, list[float]] = {name: [] for name, _ in systems}
    with tempfile.TemporaryDirectory(prefix="fw-pi-") as tmp:
        for round_ in range(args.rounds):
            for name, tree in systems if round_ % 2 == 0 else systems[::-1]:
                counts[name].append(per_enqueue(name, tree, args, Path(tmp)))
                print(f"... round {round_ + 1} {name}: {counts[name][-1]:,.0f}", flush=True)
    first = statistics.median(counts["fw"])
    print(f"\n{args.jobs} enqueues counted after {args.warm}; instructions of the producer "
          "process per enqueue (medians)")
    for name, values in counts.items():
        mid = statistics.median(values)
        print(f"{name:<24} {mid:>10,.0f}   x{mid / first:.2f} this tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
