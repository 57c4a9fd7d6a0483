#!/usr/bin/env python3
"""I/O-bound jobs at concurrency 100: fusionworker against its peers, in one run.

    python bench/io_bound.py [--jobs 1000] [--seconds 0.1] [--concurrency 100]
                             [--systems fw-c,fw-w,fw-wi,fw-wn,fw-p,rq,celery,dramatiq,arq]
                             [--horse-jobs 100] [--async-per-horse 100] [--json out.json]

Each system runs the same job, ``bench/io_jobs.py`` (``time.sleep(0.1)``; arq:
``await asyncio.sleep(0.1)``), one after the other on the same Redis database
(default ``redis://127.0.0.1:6379/13``; the bench flushes it and refuses one that
holds keys of its own it did not write, unless --force-flush):

* ``fw-c``: ONE fusionworker worker, ``--concurrency 100``;
* ``fw-w``: the same with warm horses, ``--horse-jobs 100`` (``--horse-jobs``);
* ``fw-wi``: ``fw-w`` with the job's module also named with ``--import`` (the two
  should run at the same speed: the fork server loads an allowed module at its first
  job whether or not it was named; the table prints ``fw-w`` against ``fw-wi``);
* ``fw-wn``: ``fw-w`` with the event log off (``FUSIONWORKER_EVENTS=0`` for the worker
  and the producer): none of the peers writes one, so this is the like-for-like line;
* ``fw-a``: the job as ``async def`` (``asyncio.sleep``) on warm horses that run
  ``--async-per-horse K`` of them at once (default 100: ``--concurrency 100`` is one
  horse); ``fw-a1``: the same ``async def`` job at K = 1 (one job per horse);
* ``fw-p``: fusionworker ``--processes 100`` (today's way; ``--fw-processes P
  --fw-concurrency N`` to change it, e.g. 20 x 5);
* ``rq``: ``rq worker-pool -n 100`` (``--rq-workers``);
* ``celery``: Celery prefork ``-c 100``, Redis broker;
* ``dramatiq``: Dramatiq, 1 process x 100 threads;
* ``--worker-processes P`` (default 1): ``fw-c``/``fw-w``/``fw-wi``/``fw-a``/``fw-a1``
  as P worker processes under one supervisor (``--processes P``, ``--concurrency C/P``
  each) and Dramatiq as P processes (``-p P``): one per core, as an operator would;
* ``arq``: arq with ``max_jobs=100``, run from its own virtualenv: arq pins
  ``redis<6``, which the rest of the bench environment must not get. Without
  ``--arq-python`` (or ``BENCH_ARQ_PYTHON``) the bench makes that virtualenv
  itself the first time (``python -m venv`` + ``pip install arq``, under
  ``$XDG_CACHE_HOME/fusionworker-bench/``, default ``~/.cache``) and reuses it.

Per system: the worker is started and warmed with one job (so every system has
imported the job module before the clock starts; ``--cold``: no warm-up job, the
burst is the worker's first work, e.g. ``--systems fw-w,fw-wi --cold`` for warm
horses whose module was or was not named with ``--import``); once the number of its
processes stopped changing for a second (a pool forked after the warm-up job, or at
start), the jobs are enqueued as fast as the system's client goes, each carrying ``time.time()`` taken just
before its enqueue call. ``--backlog``: every job is enqueued first, then the worker
is started (no warm-up): its own pace draining a backlog, the producer off the clock
(a worker that keeps pace with its producer is measured at the producer's pace
otherwise). Figures, from the lines the jobs append to a file:

* jobs/s = jobs / (last end - first start); it can never pass the ceiling
  ``concurrency / seconds`` (1,000 by default): the jobs run in waves;
* from enqueue = jobs / (last end - first enqueue), the burst as its producer
  sees it; 1st wave ms and gap/wave ms say where the time past the ceiling went
  (:func:`waves`);
* enqueue -> start: p50 and p99 of (job start - its enqueue stamp); all the jobs
  are enqueued at once, so this includes the wait behind earlier jobs;
* PSS: the sum of ``Pss:`` of ``/proc/<pid>/smaps_rollup`` over the worker's
  whole process tree (the launched process and every descendant), sampled every
  0.5 s during the run; the peak is reported, and the idle figure before the
  jobs were enqueued;
* jobs/s per GiB of peak PSS.

The lines after the table compare each fusionworker system with each peer by the
medians of their runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import stop_group  # noqa: E402
from bench.run import percentile  # noqa: E402

SYSTEMS = ("fw-c", "fw-w", "fw-wi", "fw-wn", "fw-a", "fw-a1", "fw-p", "rq", "celery", "dramatiq", "arq")


def tree_pss_kib(root: int) -> tuple[int, int]:
    """(sum of Pss in KiB, number of processes) over ``root`` and all its descendants."""
    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    total = count = 0
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/smaps_rollup", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        count += 1
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total, count


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[int, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.samples.append(tree_pss_kib(self.pid))
            self.stopped.wait(0.5)

    def stop(self) -> tuple[int, int]:
        self.stopped.set()
        self.join()
        return max(self.samples) if self.samples else (0, 0)


class Run:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.url = args.redis_url
        self.r = redis.Redis.from_url(self.url, decode_responses=True)
        self.prefix = f"fwio{uuid.uuid4().hex[:6]}"
        self.workdir = workdir
        self.runs = 0
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep
                    + os.environ.get("PYTHONPATH", ""), "REDIS_URL": self.url,
                    "BENCH_REDIS_URL": self.url, "FUSIONWORKER_PREFIX": self.prefix,
                    "FUSIONWORKER_ALLOWED_MODULES": "bench", "FUSIONWORKER_LOG_LEVEL": "WARNING",
                    "BENCH_CONCURRENCY": str(args.concurrency)}

    # -- per system ---------------------------------------------------------------

    def command(self, system: str) -> tuple[list[str], dict[str, str], int]:
        """argv, extra env, and the least number of processes in the ready tree."""
        argv, env, least = self._command(system)
        n = self.args.worker_processes
        if n > 1 and system in ("fw-c", "fw-w", "fw-wi", "fw-wn", "fw-a", "fw-a1"):
            # --worker-processes P: P worker processes under the supervisor, C / P each
            at = argv.index("--concurrency") + 1
            argv[at] = str(max(1, self.args.concurrency // n))
            return argv + ["--processes", str(n)], env, 1 + 2 * n
        if n > 1 and system == "dramatiq":
            at = argv.index("-p") + 1
            argv[at] = str(n)
            return argv, env, 1 + n
        return argv, env, least

    def _command(self, system: str) -> tuple[list[str], dict[str, str], int]:
        a, py = self.args, sys.executable
        if system == "fw-c":
            return ([py, str(ROOT / "run_worker.py"), "worker", "-q", "ioq", "--concurrency",
                     str(a.concurrency)], {}, 2)
        if system in ("fw-w", "fw-wn"):
            return ([py, str(ROOT / "run_worker.py"), "worker", "-q", "ioq", "--concurrency",
                     str(a.concurrency), "--horse-jobs", str(a.horse_jobs)],
                    {"FUSIONWORKER_EVENTS": "0"} if system == "fw-wn" else {}, 2)
        if system == "fw-wi":
            return ([py, str(ROOT / "run_worker.py"), "worker", "-q", "ioq", "--concurrency",
                     str(a.concurrency), "--horse-jobs", str(a.horse_jobs),
                     "--import", "bench.io_jobs"], {}, 2)
        if system in ("fw-a", "fw-a1"):
            k = a.async_per_horse if system == "fw-a" else 1
            return ([py, str(ROOT / "run_worker.py"), "worker", "-q", "ioq", "--concurrency",
                     str(a.concurrency), "--horse-jobs", str(a.horse_jobs),
                     "--async-per-horse", str(k)], {}, 2)
        if system == "fw-p":
            n = a.fw_processes
            return ([py, str(ROOT / "run_worker.py"), "worker", "-q", "ioq", "--processes",
                     str(n), "--concurrency", str(a.fw_concurrency)], {}, 1 + 2 * n)
        if system == "rq":
            return ([py, "-m", "rq.cli", "worker-pool", "-n", str(a.rq_workers), "--url",
                     self.url, "-q", "ioq"], {}, 1 + a.rq_workers)
        if system == "celery":
            return ([py, "-m", "celery", "-A", "bench.io_peers:celery_app", "worker", "-P",
                     "prefork", "-c", str(a.concurrency), "-Q", "ioq", "--loglevel", "WARNING",
                     "--without-gossip", "--without-mingle"], {"BENCH_PEER": "celery"},
                    1 + a.concurrency)
        if system == "dramatiq":
            return ([py, "-m", "dramatiq", "bench.io_peers:dramatiq_broker", "-p", "1", "-t",
                     str(a.dramatiq_threads or a.concurrency), "-Q", "ioq"],
                    {"BENCH_PEER": "dramatiq"}, 2)
        if system == "arq":
            return ([a.arq_python, "-m", "arq", "bench.io_peers.ArqSettings"],
                    {"BENCH_PEER": "arq"}, 1)
        raise ValueError(system)

    def enqueue(self, system: str, path: str, n: int) -> None:
        seconds = self.args.seconds
        if system.startswith("fw"):
            from fusionworker.core.config import load_settings
            from fusionworker.core.queue import Queue

            # the client the README's producer gets: none given, the settings' REDIS_URL
            q = Queue("ioq", settings=load_settings(
                environ={}, redis_url=self.url, prefix=self.prefix, allowed_modules=("bench",),
                events=system != "fw-wn"))
            func = "io_sleep_aio" if system in ("fw-a", "fw-a1") else "io_sleep"
            for _ in range(n):
                q.enqueue_call(f"bench.io_jobs:{func}", args=[path, time.time(), seconds])
        elif system == "rq":
            from rq import Queue as RQQueue

            q = RQQueue("ioq", connection=redis.Redis.from_url(self.url))
            for _ in range(n):
                q.enqueue("bench.io_jobs.io_sleep", path, time.time(), seconds)
        elif system == "celery":
            from celery import Celery

            app = Celery("bench_io", broker=self.url)
            for _ in range(n):
                app.send_task("bench.io_sleep", args=[path, time.time(), seconds], queue="ioq")
        elif system == "dramatiq":
            import dramatiq
            from dramatiq.brokers.redis import RedisBroker

            broker = RedisBroker(url=self.url)
            for _ in range(n):
                broker.enqueue(dramatiq.Message(queue_name="ioq", actor_name="io_sleep",
                                                args=(path, time.time(), seconds), kwargs={},
                                                options={}))
        elif system == "arq":
            subprocess.run([self.args.arq_python, str(ROOT / "bench" / "io_peers.py"),
                            "arq-enqueue", path, str(n), str(seconds)],
                           env=self.env, cwd=str(ROOT), check=True)

    def flush(self) -> None:
        """Empty the bench's database, after the events fusionworker's producer still
        holds (its sink writes them from a thread: else they land after the flush, and
        the next run finds the database not empty)."""
        from fusionworker.events import flush_default_sinks

        flush_default_sinks()
        self.r.flushdb()

    def one(self, system: str) -> dict[str, Any]:
        self.flush()
        self.runs += 1
        tag = f"{system}.{self.runs}"
        argv, extra, least = self.command(system)
        path = str(self.workdir / f"{tag}.lines")
        enqueue_s = 0.0
        if self.args.backlog:      # every job waits before the worker starts
            t0 = time.time()
            self.enqueue(system, path, self.args.jobs)
            enqueue_s = time.time() - t0
        log = open(self.workdir / f"{tag}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(argv, env={**self.env, **extra}, cwd=str(ROOT), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if self.args.backlog:
                idle_pss, nprocs = 0, 0
                sampler = Sampler(proc.pid)
                sampler.start()
            else:
                idle_pss, nprocs, sampler, enqueue_s = self._warm_then_enqueue(
                    system, tag, proc, least, log.name, path)
            deadline = time.monotonic() + self.args.run_timeout
            lines: list[str] = []
            while time.monotonic() < deadline:
                if os.path.exists(path):
                    with open(path, encoding="ascii") as fh:
                        lines = fh.read().splitlines()
                if len(lines) >= self.args.jobs:
                    break
                time.sleep(0.1)
            peak_pss, peak_procs = sampler.stop()
        finally:
            stop_group(proc)
            log.close()
        return self._figures(system, argv, lines, enqueue_s, idle_pss, nprocs, peak_pss,
                             peak_procs)

    def _warm_then_enqueue(self, system: str, tag: str, proc: subprocess.Popen[bytes],
                           least: int, log: str, path: str) -> tuple[int, int, Sampler, float]:
        """Warm the worker (or, ``--cold``, wait for its processes), then enqueue the
        jobs: (idle PSS, processes, the running PSS sampler, enqueue seconds)."""
        warm = str(self.workdir / f"{tag}.warm")
        if self.args.cold:         # no job before the burst: ready once its processes are
            Path(warm).touch()     # there and their number settled (a pool forked at start)
        else:
            self.enqueue(system, warm, 1)
        deadline = time.monotonic() + self.args.start_timeout
        while True:
            ready = os.path.exists(warm) and tree_pss_kib(proc.pid)[1] >= least
            if ready or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.2)
        if not ready:
            raise RuntimeError(f"{system} did not start (see {log})")
        time.sleep(2.0)                  # let the start-up settle
        settle = time.monotonic() + 60
        while time.monotonic() < settle:     # e.g. a pool forked after the warm-up job
            before = tree_pss_kib(proc.pid)[1]
            time.sleep(1.0)
            if tree_pss_kib(proc.pid)[1] == before:
                break
        idle_pss, nprocs = tree_pss_kib(proc.pid)
        sampler = Sampler(proc.pid)
        sampler.start()
        t0 = time.time()
        self.enqueue(system, path, self.args.jobs)
        return idle_pss, nprocs, sampler, time.time() - t0

    def _figures(self, system: str, argv: list[str], lines: list[str], enqueue_s: float,
                 idle_pss: int, nprocs: int, peak_pss: int, peak_procs: int) -> dict[str, Any]:
        rows = [tuple(map(float, line.split())) for line in lines if line.count(" ") == 2]
        done = len(rows)
        first, last = min(s for _, s, _ in rows), max(e for _, _, e in rows)
        waits = [s - q for q, s, _ in rows]
        jobs_s = done / (last - first)
        gib = peak_pss / 1024 / 1024
        return {"system": system, "argv": " ".join(argv[1:]), "done": done,
                "jobs_per_s": jobs_s, "enqueue_s": enqueue_s,
                **waves(rows, self.args.concurrency, self.args.seconds),
                "start_p50_ms": percentile(waits, 50) * 1000,
                "start_p99_ms": percentile(waits, 99) * 1000,
                "pss_idle_mib": idle_pss / 1024, "pss_peak_mib": peak_pss / 1024,
                "processes_idle": nprocs, "processes_peak": peak_procs,
                "jobs_per_s_per_gib": jobs_s / gib if gib else float("nan")}


def waves(rows: list[tuple[float, ...]], concurrency: int, seconds: float) -> dict[str, float]:
    """Where the time between the ideal and the measured run went, from the job lines
    ``(enqueued, started, ended)``: the jobs run in ``ceil(jobs / concurrency)`` waves of
    ``seconds`` each, so ``jobs/s`` can never pass ``concurrency / seconds``.

    * ``first_wave_ms``: from the first start to the start of job number
      ``concurrency`` (the producer is still enqueuing then: a system that starts
      its first jobs as they come pays for the producer's pace here);
    * ``wave_gap_ms``: the rest of the run past the ideal, per later wave (a slot's
      turn-around: an end noticed, recorded, the next job claimed and started);
    * ``from_enqueue_jobs_per_s``: jobs / (last end - first enqueue), the whole burst
      as its producer sees it (a system that waits before it starts pays here).
    """
    done = len(rows)
    first_enqueue = min(q for q, _, _ in rows)
    starts = sorted(s for _, s, _ in rows)
    last = max(e for _, _, e in rows)
    count = math.ceil(done / concurrency)
    first_wave = starts[min(concurrency, done) - 1] - starts[0]
    rest = last - starts[0] - first_wave - count * seconds
    return {"first_wave_ms": first_wave * 1000,
            "wave_gap_ms": rest / (count - 1) * 1000 if count > 1 else float("nan"),
            "from_enqueue_jobs_per_s": done / (last - first_enqueue)}


LABEL = {"fw-c": "fusionworker --concurrency {c}",
         "fw-w": "fusionworker --concurrency {c} --horse-jobs {h}",
         "fw-wi": "fusionworker --concurrency {c} --horse-jobs {h} --import",
         "fw-wn": "fusionworker -c {c} --horse-jobs {h}, no event log",
         "fw-a": "fusionworker async -c {c} --horse-jobs {h} --async-per-horse {k}",
         "fw-a1": "fusionworker async -c {c} --horse-jobs {h} (K=1)",
         "fw-p": "fusionworker --processes {p} x{pc}",
         "rq": "RQ worker-pool -n {rq}", "celery": "Celery prefork -c {c}",
         "dramatiq": "Dramatiq {wp} proc x {d} threads", "arq": "arq max_jobs={c}"}


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = ["system", "done", "jobs/s", "from enqueue", "1st wave ms", "gap/wave ms",
            "p50 start ms", "p99 start ms", "PSS idle MiB", "PSS peak MiB", "procs",
            "jobs/s/GiB"]
    rows = []
    for res in results:
        label = LABEL[res["system"]].format(c=args.concurrency, p=args.fw_processes,
                                            h=args.horse_jobs, k=args.async_per_horse,
                                            pc=args.fw_concurrency, rq=args.rq_workers,
                                            d=args.dramatiq_threads or args.concurrency,
                                            wp=args.worker_processes)
        if args.worker_processes > 1 and res["system"] in ("fw-c", "fw-w", "fw-wi", "fw-wn",
                                                           "fw-a", "fw-a1"):
            n = args.worker_processes
            label += f" (--processes {n}, -c {max(1, args.concurrency // n)} each)"
        rows.append([label, str(res["done"]), f"{res['jobs_per_s']:.0f}",
                     f"{res['from_enqueue_jobs_per_s']:.0f}", f"{res['first_wave_ms']:.0f}",
                     f"{res['wave_gap_ms']:.1f}", f"{res['start_p50_ms']:.0f}", f"{res['start_p99_ms']:.0f}",
                     f"{res['pss_idle_mib']:.0f}", f"{res['pss_peak_mib']:.0f}",
                     str(res["processes_peak"]), f"{res['jobs_per_s_per_gib']:.0f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    out = ["  ".join(c.ljust(w) for c, w in zip(head, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    by = {system: _medians([res for res in results if res["system"] == system])
          for system in dict.fromkeys(res["system"] for res in results)}
    plain = [res["jobs_per_s"] for res in results if res["system"] == "fw-w"]
    named = [res["jobs_per_s"] for res in results if res["system"] == "fw-wi"]
    if plain and named:
        out.append(f"fw-w (no --import) vs fw-wi (--import): jobs/s "
                   f"{' '.join(f'{x:.0f}' for x in plain)} vs "
                   f"{' '.join(f'{x:.0f}' for x in named)}: median "
                   f"x{statistics.median(plain) / statistics.median(named):.2f}")
    for mine in ("fw-c", "fw-w", "fw-wn", "fw-a", "fw-a1"):
        if mine not in by:
            continue
        fw = by[mine]
        for other in ("fw-p", "rq", "celery", "dramatiq", "arq"):
            if other in by:
                o = by[other]
                out.append(f"{mine} vs {other}: jobs/s x{fw['jobs_per_s'] / o['jobs_per_s']:.2f}, "
                           f"from enqueue x{fw['from_enqueue_jobs_per_s'] / o['from_enqueue_jobs_per_s']:.2f}, "
                           f"peak PSS x{fw['pss_peak_mib'] / o['pss_peak_mib']:.3f}, "
                           f"jobs/s per GiB x{fw['jobs_per_s_per_gib'] / o['jobs_per_s_per_gib']:.1f}")
    return "\n".join(out)


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """One system's runs as the median of each figure the summary compares."""
    keys = ("jobs_per_s", "from_enqueue_jobs_per_s", "pss_peak_mib", "jobs_per_s_per_gib")
    return {k: statistics.median(run[k] for run in runs) for k in keys}


def arq_python() -> str:
    """The python of the bench's own arq virtualenv, made (once) if missing."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = cache / "fusionworker-bench" / "arq-venv"
    python = venv / "bin" / "python"
    ready = venv / ".arq-installed"
    if not ready.exists():
        print(f"arq: making its own virtualenv at {venv} (arq pins redis<6; once)",
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "arq"], check=True)
        ready.touch()
    return str(python)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=0.1, help="each job's sleep")
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--fw-processes", type=int, default=100)
    p.add_argument("--fw-concurrency", type=int, default=1)
    p.add_argument("--horse-jobs", type=int, default=100,
                   help="fw-w: jobs one warm horse runs (worker --horse-jobs)")
    p.add_argument("--async-per-horse", type=int, default=100,
                   help="fw-a: async def jobs one warm horse runs at once")
    p.add_argument("--rq-workers", type=int, default=100)
    p.add_argument("--backlog", action="store_true",
                   help="enqueue every job before the worker starts (no warm-up): the "
                        "worker's own pace draining a backlog, its producer off the clock "
                        "(jobs/s counts from the first start; 'from enqueue' includes the "
                        "enqueue and the start-up)")
    p.add_argument("--worker-processes", type=int, default=1,
                   help="fw-c/fw-w/fw-wi/fw-a/fw-a1 as P worker processes (--processes P, "
                        "--concurrency C/P each) and Dramatiq as P processes (-p P): "
                        "e.g. one per core")
    p.add_argument("--dramatiq-threads", type=int, default=0,
                   help="Dramatiq's threads (default: --concurrency); at --concurrency 1000 "
                        "its best here is 100")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--redis-url", default=os.environ.get("BENCH_IO_REDIS_URL",
                                                         "redis://127.0.0.1:6379/13"))
    p.add_argument("--arq-python", default=os.environ.get("BENCH_ARQ_PYTHON"),
                   help="python of a virtualenv with arq installed (arq pins redis<6); "
                        "default: one the bench makes under ~/.cache/fusionworker-bench")
    p.add_argument("--start-timeout", type=float, default=180.0)
    p.add_argument("--run-timeout", type=float, default=120.0)
    p.add_argument("--force-flush", action="store_true")
    p.add_argument("--cold", action="store_true",
                   help="no warm-up job: the burst is each worker's first work (warm horses: "
                        "ready once the pool is forked)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    r = redis.Redis.from_url(args.redis_url)
    if r.connection_pool.connection_kwargs.get("db", 0) == 0:
        raise SystemExit("refusing db 0 (the bench flushes its database): use /13 or another")
    if r.dbsize() and not args.force_flush:
        raise SystemExit(f"{args.redis_url} is not empty; pass --force-flush to flush it")
    systems = args.systems.split(",")
    if "arq" in systems and not args.arq_python:
        try:
            args.arq_python = arq_python()
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"arq: FAILED: no virtualenv with arq ({exc}); pass --arq-python",
                  file=sys.stderr)
            systems.remove("arq")
    workdir = Path(tempfile.mkdtemp(prefix="fwio-"))
    run = Run(args, workdir)
    load = os.getloadavg()
    results = []
    try:
        for system in systems:
            print(f"... {system}", file=sys.stderr, flush=True)
            try:
                results.append(run.one(system))
            except Exception as exc:  # noqa: BLE001 - one system failing must not end the run
                print(f"{system}: FAILED: {exc}", file=sys.stderr)
    finally:
        run.flush()
    info = {"cpus": os.cpu_count(), "loadavg_before": load, "loadavg_after": os.getloadavg(),
            "jobs": args.jobs, "seconds": args.seconds, "results": results}
    print(f"{args.jobs} jobs x {args.seconds:g} s sleep; {os.cpu_count()} CPUs; load average "
          f"before {load[0]:.2f}, after {info['loadavg_after'][0]:.2f}; ceiling "
          f"{args.concurrency / args.seconds:.0f} jobs/s (concurrency / seconds)")
    print(table(results, args))
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
