#!/usr/bin/env python3
"""Long chaos run: real workers, random SIGKILLs of parents and horses, then a verdict.

    python bench/chaos.py --jobs 20000 --workers 8 --kill-for 120 --deadline 300
    python bench/chaos.py --lease 3 --partition-for 4 --restart-down 1 --oom-for 2

``--partition-for`` puts a TCP proxy (``tests/tcp_proxy.py``) between each worker
and Redis and cuts one at a time; ``--restart-down`` and ``--oom-for`` run on a
PRIVATE redis-server started for the run (``--appendonly yes --appendfsync
always``; ``--redis-url`` is then ignored), which is SIGKILLed and restarted on
the same port and dir, or given a ``maxmemory`` below its use (noeviction) for a
few seconds: never the shared server.

Needs a Redis (``--redis-url``; default the local one) and runs under a fresh
key prefix that is deleted afterwards. The scenario and the verdict are those
of ``tests/chaos/test_chaos.py`` (see ``tests/chaos/engine.py``): every job
finished, every id recorded at least once, duplicates only for jobs with a
killed attempt. Exit status 0 when the verdict holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from fusionworker.core.config import load_settings  # noqa: E402
from tests.chaos.engine import run_chaos  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--job-seconds", type=float, default=0.01,
                        help="How long each job sleeps before recording its id.")
    parser.add_argument("--kill-for", type=float, default=60.0,
                        help="Seconds of random SIGKILLs (then the run settles).")
    parser.add_argument("--kill-every", type=float, default=0.4,
                        help="Mean seconds between two kills.")
    parser.add_argument("--deadline", type=float, default=240.0,
                        help="Give up (and report) after this many seconds.")
    parser.add_argument("--reaper-interval", type=float, default=0.5)
    parser.add_argument("--lease", type=float, default=None,
                        help="FUSIONWORKER_LEASE of the workers (default: the setting, 30 s).")
    parser.add_argument("--freeze-for", type=float, default=5.0,
                        help="Also SIGSTOP random worker parents (alone) for this many "
                             "seconds, then SIGCONT (0: no freezes).")
    parser.add_argument("--partition-for", type=float, default=0.0,
                        help="Also cut one worker's TCP proxy to Redis for this many "
                             "seconds at random moments (0: no partitions).")
    parser.add_argument("--restart-down", type=float, default=0.0,
                        help="Also SIGKILL the private Redis (AOF, fsync always) and start "
                             "it again after this many seconds (0: no restarts).")
    parser.add_argument("--oom-for", type=float, default=0.0,
                        help="Also set maxmemory below used_memory (noeviction) on the "
                             "private Redis for this many seconds (0: no OOM windows).")
    parser.add_argument("--fault-every", type=float, default=4.0,
                        help="Mean seconds between two of those faults (one at a time).")
    parser.add_argument("--retry-delay", type=float, default=None,
                        help="retry_delay of the jobs (default: the setting; 0.2 when "
                             "partitions, restarts or OOM windows are on).")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep-logs", action="store_true",
                        help="Keep the workers' logs (their folder is printed).")
    args = parser.parse_args(argv)

    prefix = f"chaos{uuid.uuid4().hex[:8]}"
    server = None
    redis_url = args.redis_url
    if args.restart_down or args.oom_for:
        from tests.redis_servers import RestartableRedis

        server = RestartableRedis("--appendonly", "yes", "--appendfsync", "always",
                                  "--maxmemory-policy", "noeviction")
        redis_url = server.url
    widened = bool(args.partition_for or args.restart_down or args.oom_for)
    retry_delay = args.retry_delay if args.retry_delay is not None else (
        0.2 if widened else None)
    settings = load_settings(environ={}, redis_url=redis_url, prefix=prefix,
                             allowed_modules=("bench", "tests"))
    log_dir = Path(tempfile.mkdtemp(prefix="fw-chaos-"))
    try:
        result = run_chaos(settings, jobs=args.jobs, workers=args.workers,
                           job_seconds=args.job_seconds, kill_for=args.kill_for,
                           kill_every=args.kill_every, deadline=args.deadline,
                           reaper_interval=args.reaper_interval, lease=args.lease,
                           log_dir=log_dir, freeze_for=args.freeze_for,
                           partition_for=args.partition_for, restart_down=args.restart_down,
                           oom_for=args.oom_for, fault_every=args.fault_every,
                           server=server, retry_delay=retry_delay,
                           seed=args.seed, progress=lambda line: print(line, flush=True))
    finally:
        if server is not None:
            server.stop()                               # its files go with it
        else:
            client = redis.Redis.from_url(redis_url)
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(key)
    print(result.summary())
    for job_id, detail in result.not_finished_detail.items():
        print(f"not finished: {job_id} {detail}")
    if result.unexplained_duplicates:
        print("unexplained duplicates:", ", ".join(result.unexplained_duplicates[:20]))
    if args.keep_logs:
        print(f"worker logs: {log_dir}")
    if not args.keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)    # logs and the jobs' marker files
    print("PASS" if result.ok else "FAIL")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
