#!/usr/bin/env python3
"""Redis instructions per job: this tree against others, counted, not timed.

    python bench/redis_instructions.py [--tree DIR ...] [--jobs 600] [--concurrency 100]
                                       [--sleep 0.02] [--horse-jobs 100] [--rounds 2]

Redis's CPU per job (``bench/redis_cost.py``) is a time, and on a shared
virtual machine a time moves with everything else: a bare ``PING`` cost the
server 12 to 15 µs of CPU here from one minute to the next. This bench runs a
PRIVATE redis-server under ``valgrind --tool=callgrind`` and counts the
instructions it executes, which depend only on what it was asked to do: the
same run gives the same count within a few per cent (the worker's own timed
calls, heartbeats and reaper passes, vary with the run's length).

Per tree and round (the trees alternate; the table shows medians):

1. the queue is filled with N jobs (``bench.io_jobs:io_sleep`` of ``--sleep``
   seconds), one ``enqueue_call`` each, with that tree's code and its defaults
   (the event log on): **enqueue**;
2. that tree's CLI worker, ``--burst``, ``--concurrency C``, ``--horse-jobs H``,
   the job's module imported, drains them: **work** (its start and stop
   included);
3. **total** = enqueue + work, per job, and its ratio to the first tree's.

The counts are instructions of the server process only (command parsing, Lua,
replies); the kernel's part of a round trip (the system calls, the wake-ups) is
not in them, so they are a floor of the server's CPU, not all of it. Needs
``valgrind`` (Debian's package) and ``redis-server``. Under callgrind the server
runs many times slower (a run of 600 jobs takes about a minute here): keep
``--jobs`` in the hundreds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import lines_in  # noqa: E402
from bench.redis_server import _free_port, binary  # noqa: E402

QUEUE = "instr"
PREFIX = "fwinstr"


class Counted:
    """A redis-server under callgrind: :meth:`take` dumps the instructions since the
    last dump and returns their count."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir}/cg.%p",
             binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis(port=self.port, socket_timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.ping()
                break
            except (redis.RedisError, OSError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("redis-server under valgrind did not start") from None
                time.sleep(0.2)
        self.version = str(client.info("server")["redis_version"])

    def take(self) -> int:
        """Instructions since the last call (callgrind_control dumps and resets them)."""
        before = set(self.workdir.glob("cg.*"))
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       capture_output=True, timeout=120)
        total = 0
        for dump in sorted(set(self.workdir.glob("cg.*")) - before):
            for line in dump.open():
                if line.startswith(("summary:", "totals:")):
                    total += int(line.split()[1])
                    break
            dump.unlink()
        return total

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def one_run(tree: Path, server: Counted, args: argparse.Namespace, workdir: Path,
            n: int) -> dict[str, float]:
    """Enqueue and work instructions per job of ``tree``'s code (module docstring)."""
    url = f"redis://127.0.0.1:{server.port}/0"
    redis.Redis(port=server.port).flushall()
    path = workdir / f"{tree.name}-{n}.lines"
    path.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "REDIS_URL": url,
           "FUSIONWORKER_PREFIX": PREFIX, "FUSIONWORKER_ALLOWED_MODULES": "bench",
           "FUSIONWORKER_LOG_LEVEL": "WARNING"}
    server.take()
    enqueue = ("import sys, time\n"
               "from fusionworker.core.queue import Queue\n"
               "from fusionworker.events import flush_default_sinks\n"
               "import redis\n"
               f"q = Queue({QUEUE!r}, redis.Redis.from_url({url!r}, decode_responses=True))\n"
               f"for _ in range({args.jobs}):\n"
               f"    q.enqueue_call('bench.io_jobs:io_sleep', args=[{str(path)!r}, time.time(),"
               f" {args.sleep!r}])\n"
               "flush_default_sinks()\n")
    subprocess.run([sys.executable, "-c", enqueue], env=env, cwd=tree, check=True, timeout=600)
    enqueued = server.take()
    worker = subprocess.run(
        [sys.executable, "-m", "fusionworker", "worker", QUEUE, "--burst"], cwd=tree,
        env={**env, "FUSIONWORKER_CONCURRENCY": str(args.concurrency),
             "FUSIONWORKER_HORSE_JOBS": str(args.horse_jobs),
             "FUSIONWORKER_IMPORTS": "bench.io_jobs"},
        capture_output=True, text=True, timeout=args.timeout)
    worked = server.take()
    if lines_in(path) != args.jobs:
        raise SystemExit(f"{tree}: {lines_in(path)} of {args.jobs} jobs ran "
                         f"(worker exit {worker.returncode}):\n{worker.stderr[-2000:]}")
    return {"enqueue": enqueued / args.jobs, "work": worked / args.jobs,
            "total": (enqueued + worked) / args.jobs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="another checkout to count alternately (repeatable)")
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--horse-jobs", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per worker run")
    parser.add_argument("--json", help="write every run's figures here")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install valgrind)")
    trees = [ROOT, *(Path(t).resolve() for t in args.tree)]
    workdir = Path(tempfile.mkdtemp(prefix="fw-bench-instr-"))
    server = Counted(workdir)
    runs: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    try:
        for rnd in range(args.rounds):
            for tree in trees if rnd % 2 == 0 else trees[::-1]:
                got = one_run(tree, server, args, workdir, rnd)
                runs[str(tree)].append(got)
                print(f"round {rnd + 1} {tree}: " + " ".join(
                    f"{k} {v / 1000:.1f}k" for k, v in got.items()), flush=True)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(runs, args, server.version)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


def report(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace,
           version: str) -> None:
    print(f"\n{args.jobs} jobs of io_sleep({args.sleep}), worker --concurrency "
          f"{args.concurrency} --horse-jobs {args.horse_jobs}, event log on; median of "
          f"{args.rounds}; redis-server {version} under callgrind; thousands of the "
          "server's instructions per job")
    print(f"{'tree':40s} {'enqueue':>9s} {'work':>9s} {'total':>9s} {'x first':>8s}")
    first: Any = None
    for tree, got in runs.items():
        med = {k: statistics.median(r[k] for r in got) for k in ("enqueue", "work", "total")}
        first = first or med["total"]
        print(f"{tree[-40:]:40s} {med['enqueue'] / 1000:9.1f} {med['work'] / 1000:9.1f} "
              f"{med['total'] / 1000:9.1f} {med['total'] / first:8.2f}")


if __name__ == "__main__":
    sys.exit(main())
