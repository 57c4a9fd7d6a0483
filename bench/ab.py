#!/usr/bin/env python3
"""Two source trees of fusionworker, side by side: is the new worker loop slower?

    python bench/ab.py --old /path/to/old/checkout [--new .] [--rounds 5]
                       [--jobs 2000] [--latency-jobs 100] [--count-jobs 500]
                       [--concurrency 1] [--json out.json]

Each round measures both trees, alternating which goes first, on a private
``redis-server`` the bench starts on a free port (its ``INFO commandstats``
and MONITOR see nobody else's commands; it is flushed between runs and
stopped at the end). The workers are ``bench/_worker.py`` processes run with
``PYTHONPATH`` set to one tree or the other; jobs are enqueued by this process.
The methods are those of ``bench/run.py`` (``docs/benchmarks.md``):

* throughput: N no-op jobs, one burst worker released at a gate; N / (last
  job's end - first job's start), from the job records; and the CPU time per
  job from the gate to the worker's exit (``getrusage`` in ``_worker.py``):
  the parent's own, and the fork server's with its horses' (less sensitive
  to a loaded machine than the wall clock);
* pick-up latency: one idle worker, one stamp job at a time: job start -
  the bench's clock just before the enqueue (p50, p99);
* Redis work per job: a burst run of ``--count-jobs`` no-op jobs minus a run
  on an empty queue, divided by the jobs: client round trips (redis-py
  writes, counted in the worker), client commands and all commands (MONITOR),
  and the ``INFO commandstats`` deltas per command (``calls``).

Medians (min-max) over the rounds; per figure the new/old ratio.
``--concurrency N`` runs the workers with N slots (throughput and Redis work).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
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

from bench.run import Bench  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server (no persistence) on a free port."""
    binary = "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else (
        shutil.which("redis-server") or "redis-server")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/15"


class TreeBench(Bench):
    """:class:`bench.run.Bench` whose workers import fusionworker from ``root``."""

    def __init__(self, url: str, workdir: Path, root: Path, concurrency: int) -> None:
        super().__init__(url, workdir)
        self.root = self.cwd = root
        self.log_tag = f"{root.name}-"
        self.concurrency = concurrency
        self.cpu_file: Path | None = None
        self._stats_before: dict[str, int] = {}
        self._deltas: dict[str, int] = {}

    def env(self, count_file: str | None = None) -> dict[str, str]:
        env = super().env(count_file)
        env["PYTHONPATH"] = str(self.root)
        env["FUSIONWORKER_CONCURRENCY"] = str(self.concurrency)
        if self.cpu_file is not None:
            env["BENCH_CPU_FILE"] = str(self.cpu_file)
        return env

    def throughput_cpu(self, n: int) -> dict[str, Any]:
        """:meth:`throughput` of one burst worker, plus its CPU per job (ms): the parent's
        own, and the fork server's with its horses'."""
        self.cpu_file = self.workdir / f"cpu-{time.monotonic_ns()}.json"
        try:
            out = self.throughput("fw", n, 1)
            cpu = json.loads(self.cpu_file.read_text())
        finally:
            self.cpu_file = None
        out["parent_cpu_ms_per_job"] = cpu["self"] * 1000 / n
        out["horses_cpu_ms_per_job"] = cpu["children"] * 1000 / n
        return out

    def commandstats(self) -> dict[str, int]:
        stats = self.r.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}

    def redis_work(self, system: str, n: int) -> dict[str, Any]:
        full, full_cmds = self._counted(system, n)
        empty, empty_cmds = self._counted(system, 0)
        out: dict[str, Any] = {k: (full[k] - empty[k]) / n for k in full}
        for name in sorted(set(full_cmds) | set(empty_cmds)):
            per_job = (full_cmds.get(name, 0) - empty_cmds.get(name, 0)) / n
            if abs(per_job) >= 0.005:
                out[f"cmd:{name}"] = per_job
        return out

    def _counted(self, system: str, n: int) -> tuple[dict[str, int], dict[str, int]]:
        """Bench._counted_run, plus the ``INFO commandstats`` calls of the run."""
        counts = self._counted_run(system, n)
        return counts, self._deltas

    # the enqueues are this process's commands: the stats are read after them
    def _count_begins(self) -> None:
        self._stats_before = self.commandstats()

    def _count_ends(self) -> None:
        after = self.commandstats()
        self._deltas = {k: v - self._stats_before.get(k, 0) for k, v in after.items()
                        if k not in ("info", "monitor", "flushdb")}


def measure(bench: TreeBench, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    got = bench.throughput_cpu(args.jobs)
    out["jobs_per_s"] = got["jobs_per_s"]
    out["parent_cpu_ms_per_job"] = got["parent_cpu_ms_per_job"]
    out["horses_cpu_ms_per_job"] = got["horses_cpu_ms_per_job"]
    if bench.concurrency == 1:
        lat = bench.idle_and_latency("fw", args.latency_jobs, args.idle_seconds)
        out.update(pickup_p50_ms=lat["pickup_p50_ms"], pickup_p99_ms=lat["pickup_p99_ms"],
                   idle_cpu_pct=lat["idle_cpu_pct"])
    if args.count_jobs:
        out.update(bench.redis_work("fw", args.count_jobs))
    return out


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(results: dict[str, dict[str, list[float]]]) -> str:
    old, new = results["old"], results["new"]
    keys = list(dict.fromkeys([*old, *new]))
    rows = [("figure", "old: median (min-max)", "new: median (min-max)", "new/old")]
    for key in keys:
        a, b = old.get(key, []), new.get(key, [])

        def cell(v: list[float]) -> str:
            return f"{median(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else "-"
        ratio = f"{median(b) / median(a):.3f}" if a and b and abs(median(a)) > 1e-9 else "-"
        rows.append((key, cell(a), cell(b), ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, type=Path, help="the tree to compare against")
    p.add_argument("--new", default=ROOT, type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--latency-jobs", type=int, default=100)
    p.add_argument("--idle-seconds", type=float, default=2.0)
    p.add_argument("--count-jobs", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="fwab"))
    server, url = start_redis(workdir)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    results: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    benches = {k: TreeBench(url, workdir, root, args.concurrency) for k, root in trees.items()}
    try:
        for rnd in range(args.rounds):
            order = ["old", "new"] if rnd % 2 == 0 else ["new", "old"]
            for which in order:
                t = time.monotonic()
                got = measure(benches[which], args)
                for key, value in got.items():
                    results[which].setdefault(key, []).append(value)
                print(f"round {rnd + 1}/{args.rounds} {which}: {got['jobs_per_s']:.0f} jobs/s, "
                      f"p50 {got.get('pickup_p50_ms', float('nan')):.2f} ms, round trips/job "
                      f"{got.get('round_trips', float('nan')):.3f} "
                      f"[{time.monotonic() - t:.0f} s]", file=sys.stderr, flush=True)
    finally:
        for b in benches.values():
            b.kill_all()
        server.terminate()
        server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"concurrency {args.concurrency}; {args.rounds} rounds; {args.jobs} no-op jobs; "
          f"latency over {args.latency_jobs} jobs; Redis work over {args.count_jobs} jobs; "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()},
                                         "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
