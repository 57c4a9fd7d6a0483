#!/usr/bin/env python3
"""Warm horses with and without ``--import``, side by side, the worker the bottleneck.

    python bench/warm_import.py [--jobs 1000] [--seconds 0.1] [--concurrency 100]
                                [--rounds 3] [--cold] [--redis-url redis://127.0.0.1:6379/12]

Per round, alternating the order: one ``worker --concurrency C --horse-jobs 100``
without ``--import`` and one with ``--import bench.io_jobs``. Each is started, warmed
with one job (``--cold``: not: the burst is its first work), left until the number
of its processes stopped changing for a second (the warm pool forked), then all the
jobs (``bench.io_jobs:io_sleep``) are written at once with one ``enqueue_many`` (the
producer is off the clock, unlike ``bench/io_bound.py``, whose producer bounds the
jobs/s on a loaded machine). jobs/s = jobs / (last end - first start); the first
wave is the time from the first start to the start of job number C.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import stop_group  # noqa: E402
from fusionworker.core.config import load_settings  # noqa: E402
from fusionworker.core.queue import Queue  # noqa: E402

FUNC = "bench.io_jobs:io_sleep"


def _procs(pid: int) -> int:
    try:
        return 1 + len(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return 0


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="ascii").splitlines()
    except FileNotFoundError:
        return []


def one(args: argparse.Namespace, named: bool, workdir: Path) -> dict[str, float]:
    prefix = f"fwwi{uuid.uuid4().hex[:6]}"
    path, warm = workdir / f"{prefix}.lines", workdir / f"{prefix}.warm"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": args.redis_url,
           "FUSIONWORKER_PREFIX": prefix, "FUSIONWORKER_ALLOWED_MODULES": "bench",
           "FUSIONWORKER_LOG_LEVEL": "WARNING"}
    argv = [sys.executable, str(ROOT / "run_worker.py"), "worker", "-q", "wi", "--concurrency",
            str(args.concurrency), "--horse-jobs", "100"]
    argv += ["--import", "bench.io_jobs"] if named else []
    r = redis.Redis.from_url(args.redis_url)
    q = Queue("wi", r, settings=load_settings(environ={}, redis_url=args.redis_url,
                                              prefix=prefix, allowed_modules=("bench",)))
    prepared = [q.prepare(FUNC, str(path), time.time(), args.seconds) for _ in range(args.jobs)]
    proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        if not args.cold:
            q.enqueue_call(FUNC, args=[str(warm), time.time(), 0.0])
        give_up = time.monotonic() + 120
        while (_procs(proc.pid) < 3 or not (args.cold or warm.exists())):
            if time.monotonic() > give_up or proc.poll() is not None:
                raise SystemExit("the worker did not start")
            time.sleep(0.1)
        while True:
            before = _procs(proc.pid)
            time.sleep(1.0)
            if _procs(proc.pid) == before:
                break
        q.enqueue_many(prepared)
        while len(_lines(path)) < args.jobs:
            if time.monotonic() > give_up + 600:
                raise SystemExit("the jobs did not finish")
            time.sleep(0.05)
    finally:
        stop_group(proc, grace=30)
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            r.delete(*keys[i:i + 500])
    rows = [tuple(map(float, line.split())) for line in _lines(path)]
    starts = sorted(s for _, s, _ in rows)
    last = max(e for _, _, e in rows)
    first_wave = starts[min(args.concurrency, len(starts)) - 1] - starts[0]
    return {"jobs_per_s": len(rows) / (last - starts[0]), "first_wave_ms": first_wave * 1000}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=0.1)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="no warm-up job")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fwwi-"))
    got: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for i in range(args.rounds):
        for named in ((False, True) if i % 2 == 0 else (True, False)):
            res = one(args, named, workdir)
            got[named].append(res)
            print(f"round {i + 1} {'--import' if named else 'no --import'}: "
                  f"{res['jobs_per_s']:.0f} jobs/s, first wave {res['first_wave_ms']:.0f} ms",
                  file=sys.stderr, flush=True)
    plain, named_ = (statistics.median(r["jobs_per_s"] for r in got[k]) for k in (False, True))
    print(f"{args.jobs} jobs x {args.seconds:g} s, concurrency {args.concurrency}, "
          f"{'cold' if args.cold else 'after a warm-up job'}, load average {os.getloadavg()[0]:.1f}")
    for k, label in ((False, "without --import"), (True, "with --import")):
        speeds = " ".join(f"{r['jobs_per_s']:.0f}" for r in got[k])
        waves = " ".join(f"{r['first_wave_ms']:.0f}" for r in got[k])
        print(f"  {label:17} jobs/s {speeds}; first wave ms {waves}")
    print(f"  without / with (medians): x{plain / named_:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
