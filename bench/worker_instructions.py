#!/usr/bin/env python3
"""A worker's instructions per job, by process: this tree against other checkouts, counted.

    python bench/worker_instructions.py [--tree DIR ...] [--rounds 2]
                                        [--horse-jobs 1000] [--parent-jobs 1000]
                                        [--fresh]

CPU times on a shared 2-core virtual machine move by 5-10 % between runs of one
command; instruction counts under ``valgrind --tool=callgrind`` repeat to well
under 1 %. Two counts, each the difference of a long and a short run divided by
the jobs between them (the interpreter's start, the imports and the fork cancel):

* **horse**: a warm horse (``horse/warm.py``'s ``warm_horse``, forked from the
  bench's own process as the fork server forks it) fed ``bench.jobs:noop``
  frames one at a time on its job pipe, its report read back each time: the
  horse's own work per job (read the frame, make the job, run it, guard, stay,
  report). The job does nothing, so this is all framework.
* **parent**: a burst worker (``--concurrency 20 --horse-jobs 100000``) draining
  ``bench.io_jobs:io_sleep`` jobs of 20 ms from a Redis of ``--redis-url`` (under a
  prefix of its own, deleted afterwards), counted in the worker's own process: its
  claims, starts, ends, outcome scripts and events. Its fork server and horses run
  under valgrind too (they are not counted: a fork server is killed at the end, so
  callgrind writes no count for it).
* ``--fresh``: the parent only, of a burst worker at ``--concurrency 1`` with
  fresh horses (``--horse-jobs 1``, no ``--import``) draining ``bench.jobs:noop``
  jobs: the path of ``bench/ab.py``'s concurrency-1 figures, whose wall-clock
  differences of a few per cent drown in a shared machine's noise.

The rounds alternate the trees. Needs ``valgrind`` (Debian's package); a round
takes about two minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
PYTHON = os.path.realpath(sys.executable)

#: the horse count's process: fork a warm horse, feed it N no-op jobs, wait for its end
HORSE = """
import os, sys
from fusionworker.core.job import Job
from fusionworker.runtime.protocol import RunRequest, for_horse, frame
from fusionworker.runtime.horse.warm import warm_horse
import bench.jobs
N = int(sys.argv[1])
job_r, job_w = os.pipe(); rep_r, rep_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(job_w); os.close(rep_r)
    warm_horse(job_r, rep_w, os.getppid(), ("bench",), (), {}, N + 10, 0, None)
os.close(job_r); os.close(rep_w)
data = frame(for_horse(RunRequest.of(Job("j" * 32, "default", "bench.jobs:noop", timeout=180), -1)))
for _ in range(N):
    os.write(job_w, data)
    buf = b""
    while not buf.endswith(b"\\n"):
        chunk = os.read(rep_r, 65536)
        if not chunk:
            raise SystemExit("the horse left: " + repr(buf[:300]))
        buf += chunk
os.close(job_w)
os.waitpid(pid, 0)
"""


def _total(path: Path) -> int:
    for line in path.open():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no total in {path}")


def horse_count(tree: Path, n: int, workdir: Path) -> int:
    """Instructions of the forked horse of a run of ``n`` jobs (the file of the larger
    pid; it holds the count inherited at the fork, the same in every run)."""
    out = workdir / "horse"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p",
                    PYTHON, "-c", HORSE, str(n)], env=_env(tree), cwd=tree, check=True,
                   capture_output=True, timeout=1200)
    return _total(max(out.iterdir(), key=lambda p: int(p.name.split(".")[1])))


def parent_count(tree: Path, n: int, args: argparse.Namespace, workdir: Path) -> int:
    """Instructions of a burst worker's own process draining ``n`` jobs."""
    out = workdir / "parent"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    prefix = f"wi{os.getpid()}"
    env = {**_env(tree), "REDIS_URL": args.redis_url, "FUSIONWORKER_PREFIX": prefix,
           "FUSIONWORKER_LOG_LEVEL": "WARNING"}
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    client = redis.Redis.from_url(args.redis_url)
    q = Queue("wiq", client, settings=load_settings(
        environ={}, redis_url=args.redis_url, prefix=prefix, allowed_modules=("bench",)))
    try:
        if args.fresh:
            calls = [q.prepare_call("bench.jobs:noop") for _ in range(n)]
            how = ["--concurrency", "1", "--horse-jobs", "1"]
        else:
            calls = [q.prepare_call("bench.io_jobs:io_sleep",
                                    args=[os.devnull, time.time(), 0.02]) for _ in range(n)]
            how = ["--concurrency", "20", "--horse-jobs", "100000", "--import", "bench.io_jobs"]
        q.enqueue_many(calls)
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p",
                        PYTHON, str(tree / "run_worker.py"), "worker", "-q", "wiq", *how,
                        "--burst"], env=env, cwd=tree, check=True,
                       capture_output=True, timeout=1800)
        left = q.count
    finally:
        for key in client.scan_iter(f"{prefix}*", count=1000):
            client.delete(key)
    if left:
        raise SystemExit(f"the burst worker left {left} jobs")
    first = min(out.iterdir(), key=lambda p: int(p.name.split(".")[1]))   # the worker
    return _total(first)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0",
            "FUSIONWORKER_ALLOWED_MODULES": "bench"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], type=Path,
                        help="another checkout to count alternately (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--horse-jobs", type=int, default=1000,
                        help="jobs between the horse's two runs (after 200)")
    parser.add_argument("--parent-jobs", type=int, default=1000,
                        help="jobs between the parent's two runs (after 300)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--fresh", action="store_true",
                        help="the parent of a concurrency-1 worker with fresh horses only")
    args = parser.parse_args()
    trees = [ROOT] + [t.resolve() for t in args.tree]
    counts: dict[tuple[str, Path], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fw-wi-") as tmp:
        work = Path(tmp)
        for round_ in range(args.rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                horse = 0.0 if args.fresh else (horse_count(tree, 200 + args.horse_jobs, work)
                                                - horse_count(tree, 200, work)) / args.horse_jobs
                parent = (parent_count(tree, 300 + args.parent_jobs, args, work)
                          - parent_count(tree, 300, args, work)) / args.parent_jobs
                counts.setdefault(("horse", tree), []).append(horse)
                counts.setdefault(("parent", tree), []).append(parent)
                print(f"... round {round_ + 1} {tree}: horse {horse:,.0f}, "
                      f"parent {parent:,.0f}", flush=True)
    print("\ninstructions per job (medians of the rounds)")
    for what in ("parent",) if args.fresh else ("horse", "parent"):
        first = statistics.median(counts[(what, ROOT)])
        for tree in trees:
            mid = statistics.median(counts[(what, tree)])
            print(f"{what:<7} {str(tree):<40} {mid:>10,.0f}   x{mid / first:.2f} this tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
