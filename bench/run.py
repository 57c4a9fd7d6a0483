#!/usr/bin/env python3
"""fusionworker against RQ, side by side, in one run on the same Redis.

    python bench/run.py [--jobs 2000] [--repeats 3] [--json out.json] [--quick]

Every repeat runs each system once, alternating which goes first, so drift of
the machine hits both. Systems: ``fw`` (fusionworker's forking Worker),
``rq`` (RQ's forking ``Worker``), ``rq-simple`` (RQ's non-forking
``SimpleWorker``, a reference line only); ``--horse-jobs N`` runs fusionworker with
warm horses (``worker --horse-jobs N``). The method of each figure is in
``docs/benchmarks.md``; in short:

* throughput: N no-op jobs are enqueued first; the workers (1 or 2
  processes, burst mode) are started, import everything, build their worker
  object and wait on a gate; the bench opens the gate for all at once. The
  figure is N / (last job's end - first job's start), both read back from the
  job records (fusionworker: Redis server time written by its scripts; RQ:
  the worker's clock; same host). The wall time from gate to exit is kept in
  the JSON too.
* pick-up latency: one idle worker (not burst); one job at a time; the job
  writes ``time.time()`` at its start to a file; latency = that - the
  bench's ``time.time()`` just before the enqueue call.
* idle CPU: that same worker, 10 s on empty queues, from psutil cpu_times.
* parent RSS: sampled by the bench every 20 ms during the 1-process run; the
  figure is the last sample before the queue ran dry, the growth is that minus
  the sample at 10 % of the jobs.
* Redis work per job: a separate 1-process burst run with MONITOR open and
  the worker's redis-py instrumented (``bench/_worker.py``); minus a run on an
  empty queue (start-up and shutdown), divided by the jobs.
* floor: fork + os._exit + waitpid in a process that imported what the worker
  imports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "bench" / "_worker.py"
SYSTEMS = ("fw", "rq", "rq-simple")
LABEL = {"fw": "fusionworker", "rq": "RQ Worker", "rq-simple": "RQ SimpleWorker"}


# -- helpers -----------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _parse_rq_time(value: bytes | str | None) -> float | None:
    if not value:
        return None
    text = value.decode() if isinstance(value, bytes) else value
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=UTC).timestamp()


class Bench:
    """Owns the Redis database of the run and the per-system plumbing."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.r = redis.Redis.from_url(url)                          # RQ wants bytes
        self.rs = redis.Redis.from_url(url, decode_responses=True)  # fusionworker wants str
        self.db = self.r.connection_pool.connection_kwargs.get("db", 0)
        self.prefix = f"fwbench{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self._logs = 0
        self.live: list[subprocess.Popen[str]] = []
        #: where the workers start (their ``import fusionworker`` finds it first) and
        #: what their log files are named after
        self.cwd = ROOT
        self.log_tag = ""
        self.horse_jobs = 1      # fusionworker's --horse-jobs (FUSIONWORKER_HORSE_JOBS)

    # -- the database ---------------------------------------------------------

    def check_db(self, force: bool) -> None:
        """The bench flushes its database between runs: refuse a db holding others' keys."""
        if self.db == 0:
            raise SystemExit("refusing to run on db 0 (it gets flushed): pass --redis-url "
                             "redis://host:port/15 or another spare database index")
        foreign = [k for k in self.r.scan_iter(count=1000)
                   if not (k.startswith(b"rq:") or k.startswith(b"fwbench"))]
        if foreign and not force:
            raise SystemExit(f"db {self.db} holds keys that are not the bench's "
                             f"(e.g. {foreign[0]!r}); use another --redis-url db or --force-flush")

    def clean(self) -> None:
        self.r.flushdb()

    def kill_all(self) -> None:
        """Kill every worker this bench started that still runs (an aborted run)."""
        for proc in self.live:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)

    # -- processes ------------------------------------------------------------

    def env(self, count_file: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "REDIS_URL": self.url,
            "FUSIONWORKER_PREFIX": self.prefix,
            "FUSIONWORKER_ALLOWED_MODULES": "bench",
            "FUSIONWORKER_HORSE_JOBS": str(self.horse_jobs),
        })
        env.pop("BENCH_COUNT_FILE", None)
        if count_file:
            env["BENCH_COUNT_FILE"] = count_file
        return env

    def spawn(self, system: str, queue: str, *, burst: bool, count_file: str | None = None
              ) -> subprocess.Popen[str]:
        """Start one worker process; returns once it is ready and waiting at the gate."""
        self._logs += 1
        log = open(self.workdir / f"{self.log_tag}{system}-{self._logs}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), system, queue, self.url, *(["--burst"] if burst else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            env=self.env(count_file), cwd=str(self.cwd), start_new_session=True,
        )
        self.live.append(proc)
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("ready"):
            proc.kill()
            raise RuntimeError(f"{system} worker ({self.cwd}) did not start; see {log.name}")
        return proc

    @staticmethod
    def release(procs: list[subprocess.Popen[str]]) -> None:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    @classmethod
    def stop(cls, proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        cls.close(proc)

    @staticmethod
    def close(proc: subprocess.Popen[str]) -> None:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass

    # -- jobs ----------------------------------------------------------------------

    def enqueue_many(self, system: str, queue: str, n: int) -> list[str]:
        if system == "fw":
            from fusionworker.core.config import load_settings
            from fusionworker.core.queue import Queue

            q = Queue(queue, self.rs, settings=load_settings(environ={}, redis_url=self.url,
                                                             prefix=self.prefix,
                                                             allowed_modules=("bench",)))
            return [q.enqueue("bench.jobs:noop").id for _ in range(n)]
        from rq import Queue as RQQueue

        rq_queue = RQQueue(queue, connection=self.r)
        ids = []
        for start in range(0, n, 500):
            datas = [RQQueue.prepare_data("bench.jobs.noop") for _ in range(min(500, n - start))]
            ids.extend(job.id for job in rq_queue.enqueue_many(datas))
        return ids

    def pending(self, system: str, queue: str) -> int:
        if system == "fw":
            return int(self.r.zcard(f"{self.prefix}:{{{queue}}}:pending"))
        return int(self.r.llen(f"rq:queue:{queue}"))

    def job_times(self, system: str, queue: str, ids: list[str]) -> tuple[list[float], list[float]]:
        pipe = self.r.pipeline(transaction=False)
        for job_id in ids:
            key = (f"{self.prefix}:{{{queue}}}:job:{job_id}" if system == "fw"
                   else f"rq:job:{job_id}")
            pipe.hmget(key, "started_at", "ended_at")
        starts, ends = [], []
        for started, ended in pipe.execute():
            if system == "fw":
                s, e = (float(started) if started else None), (float(ended) if ended else None)
            else:
                s, e = _parse_rq_time(started), _parse_rq_time(ended)
            if s is not None and e is not None:
                starts.append(s)
                ends.append(e)
        return starts, ends

    # -- measurements ---------------------------------------------------------------

    def throughput(self, system: str, n: int, processes: int) -> dict[str, Any]:
        """N no-op jobs drained by ``processes`` burst workers released together."""
        self.clean()
        queue = "bench"
        ids = self.enqueue_many(system, queue, n)
        procs = [self.spawn(system, queue, burst=True) for _ in range(processes)]
        watched = psutil.Process(procs[0].pid)
        samples: list[tuple[int, int]] = []          # (jobs left, rss) of the first worker
        t0 = time.monotonic()
        self.release(procs)
        deadline = time.monotonic() + max(120.0, n / 5)
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{system}: workers still running after "
                                   f"{deadline - t0:.0f} s; see the logs in {self.workdir}")
            try:
                rss = watched.memory_info().rss
                left = self.pending(system, queue)
            except (psutil.NoSuchProcess, redis.RedisError):
                break
            if procs[0].poll() is None:
                samples.append((left, rss))
            time.sleep(0.02)
        wall = time.monotonic() - t0
        for p in procs:
            p.wait()
            self.close(p)
        starts, ends = self.job_times(system, queue, ids)
        if len(starts) != n:
            raise RuntimeError(f"{system}: only {len(starts)} of {n} jobs finished")
        span = max(ends) - min(starts)
        out: dict[str, Any] = {"jobs_per_s": n / span, "span_s": span, "wall_s": wall}
        if processes == 1 and samples:
            early = [rss for left, rss in samples if left <= n * 0.9]
            late = [rss for left, rss in samples if left > 0]
            last = (late or [samples[-1][1]])[-1]
            out["rss_mib"] = last / 2**20
            out["rss_growth_mib"] = (last - (early or [last])[0]) / 2**20
        self.clean()
        return out

    def idle_and_latency(self, system: str, latency_jobs: int, idle_s: float) -> dict[str, Any]:
        """One idle, non-burst worker: idle CPU for ``idle_s``, then pick-up latency."""
        self.clean()
        queue = "bench"
        proc = self.spawn(system, queue, burst=False)
        stamp_dir = Path(tempfile.mkdtemp(prefix="stamp", dir=self.workdir))
        try:
            self.release([proc])
            enqueue, finished = self._probe(system, queue)
            self._pick_up(enqueue, finished, stamp_dir / "warm")        # worker is up and warm
            time.sleep(0.5)
            ps = psutil.Process(proc.pid)
            before = ps.cpu_times()
            time.sleep(idle_s)
            after = ps.cpu_times()
            cpu = max(0.0, after.user + after.system - before.user - before.system) / idle_s * 100
            lat = [self._pick_up(enqueue, finished, stamp_dir / f"s{i}") * 1000
                   for i in range(latency_jobs)]
        finally:
            self.stop(proc)
            shutil.rmtree(stamp_dir, ignore_errors=True)
            self.clean()
        return {"idle_cpu_pct": cpu, "pickup_p50_ms": percentile(lat, 50),
                "pickup_p99_ms": percentile(lat, 99), "pickup_max_ms": max(lat)}

    def _probe(self, system: str, queue: str) -> tuple[Callable[[str], str],
                                                        Callable[[str], bool]]:
        if system == "fw":
            from fusionworker.core.config import load_settings
            from fusionworker.core.queue import Queue

            q = Queue(queue, self.rs, settings=load_settings(environ={}, redis_url=self.url,
                                                             prefix=self.prefix,
                                                             allowed_modules=("bench",)))

            def enqueue(path: str) -> str:
                return q.enqueue("bench.jobs:stamp", path).id

            def finished(job_id: str) -> bool:
                return self.rs.hget(q.qkeys.job(job_id), "status") in ("finished", "failed")
            return enqueue, finished
        from rq import Queue as RQQueue

        rq_queue = RQQueue(queue, connection=self.r)

        def rq_enqueue(path: str) -> str:
            return rq_queue.enqueue("bench.jobs.stamp", path).id

        def rq_finished(job_id: str) -> bool:
            status = self.r.hget(f"rq:job:{job_id}", "status")
            return status in (b"finished", b"failed")
        return rq_enqueue, rq_finished

    @staticmethod
    def _pick_up(enqueue: Callable[[str], str], finished: Callable[[str], bool],
                 path: Path) -> float:
        """Enqueue one stamp job on an idle worker; seconds from enqueue to job start."""
        t0 = time.time()
        job_id = enqueue(str(path))
        deadline = time.monotonic() + 30
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("a latency probe job did not run within 30 s")
            time.sleep(0.0002)
        started = float(path.read_text())
        while not finished(job_id):                 # let the worker go idle again
            if time.monotonic() > deadline:
                raise RuntimeError("a latency probe job did not finish within 30 s")
            time.sleep(0.002)
        time.sleep(random.uniform(0.003, 0.010))
        return started - t0

    def redis_work(self, system: str, n: int) -> dict[str, Any]:
        """Round trips, client commands and all commands per job (empty run subtracted)."""
        full = self._counted_run(system, n)
        empty = self._counted_run(system, 0)
        return {key: (full[key] - empty[key]) / n for key in full}

    def _counted_run(self, system: str, n: int) -> dict[str, int]:
        self.clean()
        queue = "bench"
        if n:
            self.enqueue_many(system, queue, n)
        self._count_begins()
        count_file = self.workdir / f"count-{uuid.uuid4().hex[:6]}"
        count_file.touch()
        proc = self.spawn(system, queue, burst=True, count_file=str(count_file))
        monitor = Monitor(self.url, self.db)
        try:
            self.release([proc])
            proc.wait(600)
            self.close(proc)
            time.sleep(0.2)
        finally:
            totals = monitor.stop()
        trips = count_file.stat().st_size
        self._count_ends()
        self.clean()
        return {"round_trips": trips, "client_commands": totals["client"],
                "commands": totals["client"] + totals["lua"]}

    def _count_begins(self) -> None:
        """Hook: the counted run starts (its jobs are enqueued, no worker yet)."""

    def _count_ends(self) -> None:
        """Hook: the counted run's worker is gone (before the clean-up)."""

    @staticmethod
    def floor(forks: int) -> dict[str, Any]:
        """fork + os._exit + waitpid in processes with fusionworker's / RQ's worker imports."""
        code = r"""
import gc, os, sys, time, resource
if sys.argv[1] == "fw":
    import fusionworker.worker, fusionworker.cli, fusionworker.runtime.horse
else:
    import rq.worker, rq.cli
times = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    times.append(time.perf_counter() - t)
times.sort()
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print(times[len(times) // 2], rss)
"""
        out: dict[str, Any] = {}
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for kind in ("fw", "rq"):
            text = subprocess.run([sys.executable, "-c", code, kind, str(forks)], env=env,
                                  check=True, capture_output=True, text=True).stdout.split()
            out[f"fork_{kind}_ms"] = float(text[0]) * 1000
            out[f"fork_{kind}_rss_mib"] = int(text[1]) / 2**20
        return out


class Monitor:
    """Counts MONITOR lines of one database: client commands and commands run by scripts."""

    def __init__(self, url: str, db: int) -> None:
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379))
        if parts.password:
            user = parts.username or "default"
            self.sock.sendall(f"AUTH {user} {parts.password}\r\n".encode())
            self.sock.recv(64)
        self.sock.sendall(b"MONITOR\r\n")
        ok = b""
        while not ok.endswith(b"\r\n"):
            ok += self.sock.recv(64)
        self.tag_lua = f"[{db} lua]".encode()
        self.tag_db = f"[{db} ".encode()
        self.counts = {"client": 0, "lua": 0}
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buf = b""
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\r\n")
            self.take(lines)

    def take(self, lines: list[bytes]) -> None:
        """What to do with the lines read (a subclass keeps them instead)."""
        for line in lines:
            head = line[:64]
            if self.tag_lua in head:
                self.counts["lua"] += 1
            elif self.tag_db in head:
                self.counts["client"] += 1

    def close(self) -> None:
        time.sleep(0.1)
        self._stop = True
        self._thread.join(2)
        self.sock.close()

    def stop(self) -> dict[str, int]:
        self.close()
        return dict(self.counts)


# -- the run -------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model or platform.processor(),
            "python": platform.python_version(), "kernel": platform.release()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import rq

    import fusionworker

    workdir = Path(tempfile.mkdtemp(prefix="fwbench"))
    if args.keep_logs:
        print(f"worker logs: {workdir}", file=sys.stderr)
    bench = Bench(args.redis_url, workdir)
    bench.horse_jobs = args.horse_jobs
    bench.check_db(args.force_flush)
    info = machine()
    info.update(redis=bench.r.info("server")["redis_version"], rq=rq.__version__,
                fusionworker=fusionworker.__version__, jobs=args.jobs, repeats=args.repeats,
                latency_jobs=args.latency_jobs, idle_seconds=args.idle_seconds,
                horse_jobs=args.horse_jobs)
    systems = [s for s in SYSTEMS if s in args.systems]
    results: dict[str, dict[str, list[float]]] = {s: {} for s in systems}

    def add(system: str, values: dict[str, Any]) -> None:
        for key, value in values.items():
            results[system].setdefault(key, []).append(value)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        for rep in range(args.repeats):
            order = systems if rep % 2 == 0 else systems[::-1]
            for system in order:
                t = time.monotonic()
                one = bench.throughput(system, args.jobs, 1)
                add(system, {"jobs_per_s_1": one["jobs_per_s"], "wall_s_1": one["wall_s"],
                             **{k: v for k, v in one.items() if k.startswith("rss")}})
                two = bench.throughput(system, args.jobs, 2)
                add(system, {"jobs_per_s_2": two["jobs_per_s"], "wall_s_2": two["wall_s"],
                             "scaling_2": two["jobs_per_s"] / one["jobs_per_s"]})
                if system != "rq-simple":
                    add(system, bench.idle_and_latency(system, args.latency_jobs,
                                                       args.idle_seconds))
                    if rep == 0:
                        add(system, bench.redis_work(system, min(args.jobs, args.count_jobs)))
                say(f"repeat {rep + 1}/{args.repeats} {LABEL[system]}: "
                    f"{one['jobs_per_s']:.0f} jobs/s (1 proc), {two['jobs_per_s']:.0f} (2 procs) "
                    f"[{time.monotonic() - t:.0f} s]")
            floor = bench.floor(args.forks)
            for kind in ("fw", "rq"):
                if kind in results:
                    add(kind, {"fork_ms": floor[f"fork_{kind}_ms"],
                               "fork_rss_mib": floor[f"fork_{kind}_rss_mib"]})
    finally:
        bench.kill_all()
        try:
            bench.clean()
        finally:
            if not args.keep_logs:
                shutil.rmtree(workdir, ignore_errors=True)
    return {"machine": info, "results": results}


ROWS = (
    ("jobs_per_s_1", "throughput, 1 process (jobs/s)", "{:.0f}"),
    ("jobs_per_s_2", "throughput, 2 processes (jobs/s)", "{:.0f}"),
    ("scaling_2", "2 processes / 1 process", "{:.2f}"),
    ("pickup_p50_ms", "pick-up latency p50 (ms)", "{:.2f}"),
    ("pickup_p99_ms", "pick-up latency p99 (ms)", "{:.2f}"),
    ("round_trips", "Redis round trips / job", "{:.2f}"),
    ("client_commands", "client commands / job (EVALSHA = 1)", "{:.2f}"),
    ("commands", "Redis commands / job (incl. in scripts)", "{:.2f}"),
    ("idle_cpu_pct", "idle CPU (% of a core)", "{:.3f}"),
    ("rss_mib", "parent RSS after N jobs (MiB)", "{:.1f}"),
    ("rss_growth_mib", "parent RSS growth, 10%..100% (MiB)", "{:.2f}"),
    ("fork_ms", "floor: fork+_exit+waitpid (ms)", "{:.3f}"),
    ("fork_rss_mib", "floor: RSS of the forking process (MiB)", "{:.1f}"),
)


def cell(values: list[float] | None, fmt: str) -> str:
    if not values:
        return "-"
    med = fmt.format(median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def table(data: dict[str, Any]) -> str:
    res = data["results"]
    systems = [s for s in SYSTEMS if s in res]
    header = ["metric", *(LABEL[s] for s in systems)]
    if "fw" in res and "rq" in res:
        header.append("fusionworker / RQ")
    rows = [header]
    for key, title, fmt in ROWS:
        if not any(key in res[s] for s in systems):
            continue
        row = [title, *(cell(res[s].get(key), fmt) for s in systems)]
        if "fw" in res and "rq" in res:
            a, b = res["fw"].get(key), res["rq"].get(key)
            row.append(f"{median(a) / median(b):.2f}" if a and b and abs(median(b)) > 1e-9
                       else "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    m = data["machine"]
    note = (f"\nmedian (min–max) over {m['repeats']} repeats; N = {m['jobs']} no-op jobs; "
            f"latency over {m['latency_jobs']} jobs; idle CPU over {m['idle_seconds']:g} s.\n"
            f"machine: {m['nproc']} CPUs, {m['cpu']}, Python {m['python']}, Redis {m['redis']}, "
            f"RQ {m['rq']}, fusionworker {m['fusionworker']}, Linux {m['kernel']}")
    return "\n".join(lines) + note


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2000, help="no-op jobs per throughput run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 300 jobs, 1 repeat, 50 latency probes, 2 s idle")
    p.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL",
                                                         "redis://127.0.0.1:6379/15"),
                   help="a spare database: it is flushed (default db 15)")
    p.add_argument("--force-flush", action="store_true",
                   help="flush the database even if it holds keys that are not the bench's")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma list of fw, rq, rq-simple")
    p.add_argument("--latency-jobs", type=int, default=200)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--count-jobs", type=int, default=500,
                   help="jobs of the instrumented run that counts Redis work")
    p.add_argument("--forks", type=int, default=500, help="forks timed by the floor")
    p.add_argument("--horse-jobs", type=int, default=1,
                   help="fusionworker: jobs one horse runs (worker --horse-jobs; 1 = fresh)")
    p.add_argument("--keep-logs", action="store_true", help="keep the workers' logs (printed)")
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.repeats, args.latency_jobs, args.idle_seconds = 300, 1, 50, 2.0
        args.count_jobs, args.forks = 100, 200
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    data = run(args)
    print(table(data))
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
