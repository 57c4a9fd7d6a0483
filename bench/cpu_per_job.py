#!/usr/bin/env python3
"""CPU per job, split by process, for this tree and (optionally) others, alternating.

    python bench/cpu_per_job.py [--jobs 1000] [--runs 5] [--concurrency 1] [--horse-jobs 1]
                                [--func bench.jobs:noop] [--sleep S] [--async-per-horse K]
                                [--tree /path/to/other/checkout ...] [--dramatiq]
                                [--json out.json]

Each run is a fresh interpreter with ``PYTHONPATH`` set to the tree measured (so
``import fusionworker`` and ``import bench`` come from that tree). It enqueues
``--jobs`` jobs under a key prefix of its own, then runs a burst worker in that
process (``Worker(q, settings=..., burst=True).work()``) and reads, around
``work()`` only:

* parent: ``time.process_time()`` of the worker process (user + system);
* fork server: ``utime + stime`` of ``/proc/<pid>/stat`` of the fork server,
  read just before the worker closes it;
* horses: the fork server's ``cutime + cstime`` (the horses it reaped), and
  horses the worker forked itself (``RUSAGE_CHILDREN`` minus the fork server);
* children: ``resource.getrusage(RUSAGE_CHILDREN)`` delta (fork server + horses);
* Redis: ``used_cpu_user + used_cpu_sys`` of ``INFO cpu`` (the server is shared
  with whatever else runs: read it as a rough figure);
* jobs/s: jobs / wall time of ``work()``;
* a second table: the system (kernel) time of parent, fork server and horses, and
  the minor page faults (copy-on-write, mostly) of a horse (the server's cminflt).

``--steady`` measures each fusionworker tree the way Dramatiq is measured: a running
worker (the CLI, ``--sleep`` or ``--async-per-horse`` jobs), warmed with one job, its
pool settled, then the CPU (user + system) of its whole tree (parent, fork server,
live horses and the horses the fork server reaped) over the jobs sent one by one:
the fork server's start, the pool's first forks and the shutdown fall outside the
window, as Dramatiq's start does. Without it, the window is ``work()`` of a burst
worker, start-up and teardown included (over 3,000 jobs at ``--concurrency 100`` that
is 100 forks and 100 exits: a horse runs 30 jobs, not ``--horse-jobs``).

With ``--tree``, the runs alternate between this tree and each other tree
(A B A B ...), so drift of a loaded machine hits every tree alike; medians are
printed. ``/proc`` figures are in clock ticks (10 ms): over 1,000 jobs that is
0.01 ms per job.

``--sleep S`` runs ``bench.io_jobs:io_sleep`` (``time.sleep(S)``) instead of the
no-op, e.g. ``--concurrency 100 --sleep 0.1`` for the I/O-bound case of
``bench/io_bound.py``, measured the same way.

``--async-per-horse K`` runs ``bench.io_jobs:io_sleep_aio`` (``await asyncio.sleep(S)``,
an ``async def`` job) on warm horses running up to K of them at once (K = 1: the same
``async def`` job, one per horse; needs ``--horse-jobs`` > 1).

``--dramatiq`` adds Dramatiq's worker to the alternation (``dramatiq`` CLI, 1 process
x ``--concurrency`` threads, its Redis broker under a namespace of its own), running
the same job (``io_sleep`` of ``bench/io_peers.py``; without ``--sleep``, with 0 s:
its nearest to a no-op). Dramatiq has no burst mode: the worker is started and warmed
with one job, then the jobs are enqueued and the bench waits until its broker holds
none; its figure is the CPU time (user + system) of the whole worker process tree
(the CLI's parent and its worker process) over that span, per job, in the
``total_ms`` column (and ``parent_ms``: it is one process doing what fusionworker's
parent, fork server and horses do).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
TICK = os.sysconf("SC_CLK_TCK")
#: the name of Dramatiq's row (``--dramatiq``)
DRAMATIQ = "dramatiq 1 process x threads"

FIGURES = ("parent_ms", "server_ms", "horses_ms", "children_ms", "total_ms", "redis_ms",
           "jobs_per_s")
#: the kernel's share (system time) of the figures above, printed as a second table
SYSTEM = ("parent_sys_ms", "server_sys_ms", "horses_sys_ms", "horse_faults")


def _stat_cpu(pid: int) -> tuple[int, int, int, int, int]:
    """utime, stime, cutime, cstime (clock ticks) and cminflt (minor page faults of the
    reaped children) of ``pid`` from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return utime, stime, cutime, cstime, int(fields[8])


def _redis_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def child(args: argparse.Namespace) -> None:
    """One measurement, in the tree ``PYTHONPATH`` points at; prints one JSON line."""
    import importlib

    import redis

    import fusionworker

    # the package's layout changed (flat modules, then core/ and runtime/): either tree
    # works; decided by the tree's files (an editable install elsewhere on the path may
    # answer an import of a name this tree does not have)
    layered = os.path.isdir(os.path.join(os.path.dirname(fusionworker.__file__), "runtime"))

    def first(new: str, old: str = "") -> Any:
        return importlib.import_module(new if layered or not old else old)

    forkserver = first("fusionworker.runtime.forkserver", "fusionworker.forkserver")
    load_settings = first("fusionworker.core.config", "fusionworker.config").load_settings
    queue_cls = first("fusionworker.core.queue", "fusionworker.queue").Queue
    worker_cls = first("fusionworker.worker").Worker

    prefix = f"fwcpu{uuid.uuid4().hex[:8]}"
    overrides: dict[str, Any] = {"redis_url": REDIS_URL, "prefix": prefix,
                                 "allowed_modules": ("bench",), "log_level": "WARNING"}
    if args.concurrency > 1:
        overrides["concurrency"] = args.concurrency
    if args.horse_jobs > 1:     # warm horses (a tree without them refuses the setting)
        overrides["horse_jobs"] = args.horse_jobs
    if args.async_per_horse > 1:    # async horses (the same)
        overrides["async_per_horse"] = args.async_per_horse
    settings = load_settings(environ={}, **overrides)
    r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        q = queue_cls("cpu", connection=r, settings=settings)
        if args.async_per_horse:
            for _ in range(args.jobs):
                q.enqueue("bench.io_jobs:io_sleep_aio", os.devnull, 0.0, args.sleep)
        elif args.sleep:
            for _ in range(args.jobs):
                q.enqueue("bench.io_jobs:io_sleep", os.devnull, 0.0, args.sleep)
        else:
            for _ in range(args.jobs):
                q.enqueue(args.func)

        server_cpu = [0, 0, 0, 0, 0]   # the fork server's /proc figures (all of them, summed)
        close = forkserver.ForkServer.close

        def close_and_count(self: Any) -> None:   # the fork server's own /proc figures
            if self.proc is not None and self.proc.poll() is None:
                try:
                    for i, ticks in enumerate(_stat_cpu(self.proc.pid)):
                        server_cpu[i] += ticks
                except OSError:
                    pass
            close(self)

        forkserver.ForkServer.close = close_and_count   # type: ignore[method-assign]
        worker = worker_cls("cpu", r, settings=settings, burst=True)
        redis0 = _redis_cpu(r)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        worker.work()
        wall = time.perf_counter() - wall0
        parent = time.process_time() - cpu0
        parent_sys = resource.getrusage(resource.RUSAGE_SELF).ru_stime - self0.ru_stime
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        redis_cpu = _redis_cpu(r) - redis0
        children = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        done = worker.successful
        n = max(done, 1)
        server = (server_cpu[0] + server_cpu[1]) / TICK
        reaped = (server_cpu[2] + server_cpu[3]) / TICK
        # horses forked by the worker itself (no fork server) count as children too
        own_horses = max(0.0, children - server - reaped)
        out = {
            "jobs": done, "failed": worker.failed,
            "parent_ms": parent * 1000 / n,
            "server_ms": server * 1000 / n,
            "horses_ms": (reaped + own_horses) * 1000 / n,
            "parent_sys_ms": parent_sys * 1000 / n,
            "server_sys_ms": server_cpu[1] / TICK * 1000 / n,
            "horses_sys_ms": server_cpu[3] / TICK * 1000 / n,
            "horse_faults": server_cpu[4] / n,
            "children_ms": children * 1000 / n,
            "total_ms": (parent + children) * 1000 / n,
            "redis_ms": redis_cpu * 1000 / n,
            "jobs_per_s": done / wall,
            "parent_s": parent, "children_s": children, "wall_s": wall,
        }
        print(json.dumps(out), flush=True)
    finally:
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            r.delete(*keys[i:i + 500])


def _tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return total
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """bench/procs.py's ``stop_group``, imported here: a child (``--child``) runs with
    the measured tree's ``bench`` first on its path, which an older tree may lack."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from bench.procs import stop_group

    stop_group(proc)


def dramatiq_once(args: argparse.Namespace) -> dict[str, Any]:
    """One Dramatiq run (module docstring): its worker's CPU per job and jobs/s."""
    import dramatiq
    import redis
    from dramatiq.brokers.redis import RedisBroker

    ns = f"fwcpud{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_PEER": "dramatiq",
           "BENCH_REDIS_URL": REDIS_URL, "BENCH_DRAMATIQ_NAMESPACE": ns}
    broker = RedisBroker(url=REDIS_URL, namespace=ns)
    r = redis.Redis.from_url(REDIS_URL)
    msgs = f"{ns}:ioq.msgs"

    def send(n: int) -> None:
        for _ in range(n):
            broker.enqueue(dramatiq.Message(
                queue_name="ioq", actor_name="io_sleep",
                args=(os.devnull, time.time(), args.sleep), kwargs={}, options={}))

    def drained(limit: float) -> None:
        give_up = time.monotonic() + limit
        while r.hlen(msgs) or r.llen(f"{ns}:ioq"):
            if time.monotonic() > give_up or proc.poll() is not None:
                raise SystemExit(f"dramatiq did not finish its jobs (exit {proc.poll()})")
            time.sleep(0.01)

    proc = subprocess.Popen([sys.executable, "-m", "dramatiq", "bench.io_peers:dramatiq_broker",
                             "-p", "1", "-t", str(args.concurrency), "-Q", "ioq"],
                            env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        send(1)                    # warmed: imports done, threads started
        drained(120)
        time.sleep(1.0)
        redis0, cpu0, wall0 = _redis_cpu(r), _tree_cpu(proc.pid), time.perf_counter()
        send(args.jobs)
        drained(600)
        wall = time.perf_counter() - wall0
        cpu, redis_cpu = _tree_cpu(proc.pid) - cpu0, _redis_cpu(r) - redis0
    finally:
        _stop(proc)
        keys = list(r.scan_iter(match=f"{ns}:*", count=1000))
        if keys:
            r.delete(*keys)
    n = args.jobs
    nan = float("nan")
    return {"jobs": n, "failed": 0, "parent_ms": cpu * 1000 / n, "server_ms": nan,
            "horses_ms": nan, "children_ms": nan, "total_ms": cpu * 1000 / n,
            "redis_ms": redis_cpu * 1000 / n, "jobs_per_s": n / wall,
            "parent_sys_ms": nan, "server_sys_ms": nan, "horses_sys_ms": nan,
            "horse_faults": nan}


def _run_time(pid: int) -> float:
    """CPU seconds of the live threads of ``pid``, to the nanosecond (``schedstat``):
    ``/proc/<pid>/stat`` rounds each process down to a clock tick (10 ms), which over a
    hundred horses that each ran a few ms loses most of it."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as fh:
            total += int(fh.read().split()[0])
    return total / 1e9


def _tree_split(pid: int) -> tuple[float, float, float]:
    """CPU seconds of a running worker's tree: its parent, its fork server, and its
    horses (the live ones to the nanosecond, and those the fork server reaped)."""
    import psutil

    parent = server = horses = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return parent, server, horses
    for proc in procs:
        try:
            own = _run_time(proc.pid)
            if proc.pid == pid:
                parent += own
            elif proc.ppid() == pid:      # the fork server: its reaped horses are horses
                times = proc.cpu_times()
                server += own
                horses += times.children_user + times.children_system
            else:
                horses += own
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            continue
    return parent, server, horses


def steady_once(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run of a running worker (``--steady``), measured as Dramatiq's is: started
    and warmed with one job, its pool settled, then the CPU of its whole tree while it
    runs ``--jobs`` jobs sent one by one (start-up, the pool's first forks and the
    shutdown are outside the window, as Dramatiq's threads' start is)."""
    import psutil
    import redis

    if str(ROOT) not in sys.path:      # the producer is this tree's (the worker: ``tree``'s)
        sys.path.insert(0, str(ROOT))
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    prefix = f"fwcpus{uuid.uuid4().hex[:8]}"
    lines = Path(tempfile.mkdtemp(prefix="fwcpu")) / "lines"
    env = {**os.environ, "PYTHONPATH": str(tree), "FUSIONWORKER_PREFIX": prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "bench", "FUSIONWORKER_LOG_LEVEL": "WARNING"}
    argv = [sys.executable, "-m", "fusionworker", "--redis-url", REDIS_URL, "worker", "cpu",
            "--concurrency", str(args.concurrency), "--horse-jobs", str(args.horse_jobs)]
    func = "bench.io_jobs:io_sleep"
    if args.async_per_horse:
        argv += ["--async-per-horse", str(args.async_per_horse)]
        func = "bench.io_jobs:io_sleep_aio"
    r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    q = Queue("cpu", r, settings=load_settings(environ={}, redis_url=REDIS_URL, prefix=prefix,
                                              allowed_modules=("bench",)), events=False)

    def ran(n: int, limit: float) -> None:
        give_up = time.monotonic() + limit
        while not lines.exists() or lines.read_text().count("\n") < n:
            if time.monotonic() > give_up or proc.poll() is not None:
                raise SystemExit(f"the worker did not run its jobs (exit {proc.poll()})")
            time.sleep(0.01)

    proc = subprocess.Popen(argv, env=env, cwd=str(tree), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        q.enqueue_call(func, args=[str(lines), time.time(), args.sleep])
        ran(1, 120)
        count = -1
        while count != len(psutil.Process(proc.pid).children(recursive=True)):
            count = len(psutil.Process(proc.pid).children(recursive=True))
            time.sleep(1.0)       # the pool forked after the warm-up job has settled
        redis0, cpu0, wall0 = _redis_cpu(r), _tree_split(proc.pid), time.perf_counter()
        for _ in range(args.jobs):
            q.enqueue_call(func, args=[str(lines), time.time(), args.sleep])
        ran(1 + args.jobs, 600)
        wall = time.perf_counter() - wall0
        cpu1, redis_cpu = _tree_split(proc.pid), _redis_cpu(r) - redis0
    finally:
        _stop(proc)
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            r.delete(*keys[i:i + 500])
        shutil.rmtree(lines.parent, ignore_errors=True)
    n = args.jobs
    parent, server, horses = (b - a for a, b in zip(cpu0, cpu1))
    nan = float("nan")
    return {"jobs": n, "failed": 0, "parent_ms": parent * 1000 / n,
            "server_ms": server * 1000 / n, "horses_ms": horses * 1000 / n,
            "children_ms": (server + horses) * 1000 / n,
            "total_ms": (parent + server + horses) * 1000 / n,
            "redis_ms": redis_cpu * 1000 / n, "jobs_per_s": n / wall,
            "parent_sys_ms": nan, "server_sys_ms": nan, "horses_sys_ms": nan,
            "horse_faults": nan}


def run_once(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child",
           "--jobs", str(args.jobs), "--concurrency", str(args.concurrency),
           "--horse-jobs", str(args.horse_jobs), "--async-per-horse", str(args.async_per_horse),
           "--func", args.func, "--sleep", str(args.sleep)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"run in {tree} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    fig = json.loads(lines[-1])
    if fig["jobs"] != args.jobs:
        raise SystemExit(f"run in {tree}: {fig['jobs']} of {args.jobs} jobs finished "
                         f"({fig['failed']} failed):\n{out.stderr[-3000:]}")
    return fig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5, help="runs per tree (alternating)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--horse-jobs", type=int, default=1,
                        help="jobs one horse runs (worker --horse-jobs; 1 = fresh)")
    parser.add_argument("--func", default="bench.jobs:noop")
    parser.add_argument("--sleep", type=float, default=0.0,
                        help="run bench.io_jobs:io_sleep for S seconds instead of --func")
    parser.add_argument("--async-per-horse", type=int, default=0,
                        help="run bench.io_jobs:io_sleep_aio (async def) with K per horse")
    parser.add_argument("--tree", action="append", default=[],
                        help="another checkout to measure alternately (repeatable)")
    parser.add_argument("--dramatiq", action="store_true",
                        help="also Dramatiq's worker, 1 process x --concurrency threads")
    parser.add_argument("--steady", action="store_true",
                        help="measure each fusionworker tree as Dramatiq is: a running "
                             "worker, warmed, its pool settled, the CPU of its whole tree "
                             "over the jobs only (needs --sleep or --async-per-horse)")
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    trees: list[Path | str] = [ROOT, *(Path(t).resolve() for t in args.tree)]
    if args.dramatiq:
        trees.append(DRAMATIQ)
    results: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    for i in range(args.runs):
        order = trees if i % 2 == 0 else trees[::-1]
        for tree in order:
            fig = (dramatiq_once(args) if tree == DRAMATIQ
                   else steady_once(Path(tree), args) if args.steady
                   else run_once(Path(tree), args))
            results[str(tree)].append(fig)
            print(f"run {i + 1} {tree}: " + " ".join(f"{k}={fig[k]:.3f}" for k in FIGURES),
                  file=sys.stderr, flush=True)
    what = f"sleep {args.sleep:g} s" if args.sleep else args.func
    print(f"\n{args.jobs} jobs ({what}), "
          f"concurrency {args.concurrency}, median of {args.runs} runs; CPU in ms per job")
    print(f"{'tree':40} " + " ".join(f"{k:>11}" for k in FIGURES))
    for tree, figs in results.items():
        meds = {k: statistics.median(f[k] for f in figs) for k in FIGURES}
        print(f"{tree[-40:]:40} " + " ".join(f"{meds[k]:11.3f}" for k in FIGURES))
    system_time(results, args.steady)
    if args.dramatiq:
        ours = statistics.median(f["total_ms"] for f in results[str(ROOT)])
        theirs = statistics.median(f["total_ms"] for f in results[DRAMATIQ])
        speed = (statistics.median(f["jobs_per_s"] for f in results[str(ROOT)])
                 / statistics.median(f["jobs_per_s"] for f in results[DRAMATIQ]))
        print(f"this tree's CPU per job (parent + fork server + horses) / Dramatiq's worker "
              f"CPU per job: {ours:.3f} / {theirs:.3f} ms = x{ours / theirs:.2f}; "
              f"jobs/s x{speed:.2f} (Dramatiq's from its first enqueue)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def system_time(results: dict[str, list[dict[str, Any]]], steady: bool) -> None:
    """The second table: the kernel's share, for the runs that measured it (a burst
    worker's; ``--steady`` reads ``schedstat``, which does not split it, nor does
    Dramatiq's figure)."""
    rows = {tree: figs for tree, figs in results.items()
            if not any(math.isnan(f[SYSTEM[0]]) for f in figs)}
    if not rows:
        print("(no system-time table: " + ("--steady reads schedstat, which does not "
              "split user from system time)" if steady else "no run measured it)"))
        return
    print("of which system time (kernel: fork, page faults, exit), ms per job; page faults "
          "per horse")
    print(f"{'tree':40} " + " ".join(f"{k:>13}" for k in SYSTEM))
    for tree, figs in rows.items():
        print(f"{tree[-40:]:40} "
              + " ".join(f"{statistics.median(f[k] for f in figs):13.3f}" for k in SYSTEM))


if __name__ == "__main__":
    sys.exit(main())
