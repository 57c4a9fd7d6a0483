"""Chaos run: real workers, real jobs, random SIGKILLs of parents and horses.

Used by ``tests/chaos/test_chaos.py`` (short) and ``bench/chaos.py`` (long, with flags).

1. Enqueue N jobs ``tests.jobs:record(url, key, <job id>, seconds)``: each appends
   its own id to a Redis list when it runs (proof of execution).
2. Start W real worker processes (``run_worker.py worker``, or with ``lease``
   the same Worker with a shorter lease); the supervisor role: any that dies
   is started again.
3. For ``kill_for`` seconds, every ``kill_every`` s (randomized) SIGKILL either a
   random worker parent (its horse dies with it through PDEATHSIG; its job is
   re-queued by another worker's reaper once the lease is over) or a random
   horse (its job fails with reason ``killed``; like an operator, the run then
   re-queues such jobs from the dead-letter registry).
   With ``freeze_for`` a third move: SIGSTOP a random worker parent alone for
   that many seconds, then SIGCONT (its horse must die at its own lease
   deadline before the reaper hands the job on: no two executions overlap).
4. Settle: keep supervising until every job is finished (or the deadline).

Every job holds an exclusive marker (an flock per job id) while it runs; a
second execution finding it held counts as an overlap (must be 0).

Verdict: every job ``finished``; every id in the list at least once; an id in
the list more than once belongs to a job with a killed attempt (attempts > 1,
or re-queued from the dead-letter after a horse kill).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from fusionworker.config import Settings
from fusionworker.exceptions import InvalidOperation, NoSuchJob
from fusionworker.queue import Queue

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "chaos"


@dataclass
class ChaosResult:
    jobs: int = 0
    finished: int = 0
    not_finished: dict[str, int] = field(default_factory=dict)
    recorded: int = 0
    unique_recorded: int = 0
    missing: int = 0
    duplicated: int = 0
    unexplained_duplicates: list[str] = field(default_factory=list)
    parent_kills: int = 0
    horse_kills: int = 0
    worker_restarts: int = 0
    reaped_attempts: int = 0
    requeued_from_failed: int = 0
    freezes: int = 0
    overlaps: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.finished == self.jobs and self.missing == 0
                and not self.unexplained_duplicates and self.overlaps == 0)

    def summary(self) -> str:
        return (f"chaos: {self.jobs} jobs, {self.finished} finished "
                f"{'(not finished: ' + str(self.not_finished) + ') ' if self.not_finished else ''}"
                f"in {self.seconds:.1f} s; list has {self.recorded} entries, "
                f"{self.unique_recorded} distinct ids, {self.missing} missing, "
                f"{self.duplicated} ids twice or more "
                f"({len(self.unexplained_duplicates)} unexplained); "
                f"kills: {self.parent_kills} parents, {self.horse_kills} horses; "
                f"{self.freezes} parents frozen (SIGSTOP); {self.overlaps} overlapping "
                f"executions; "
                f"{self.worker_restarts} worker restarts; "
                f"{self.reaped_attempts} extra attempts after a parent death (reaped); "
                f"{self.requeued_from_failed} re-queued from dead-letter after a horse kill")


class Supervisor:
    """Keeps ``count`` worker processes running; logs go to ``log_dir``."""

    def __init__(self, count: int, env: dict[str, str], log_dir: Path) -> None:
        self.count, self.env, self.log_dir = count, env, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start_one(self) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"chaos-worker{self.started}.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, str(ROOT / "run_worker.py"), "worker", "-q", QUEUE]
        proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(ROOT))
        log.close()
        self.started += 1
        self.procs.append(proc)
        return proc

    def keep_alive(self) -> int:
        """Replace dead workers; returns how many were restarted."""
        alive = [p for p in self.procs if p.poll() is None]
        restarted = self.count - len(alive)
        self.procs = alive
        for _ in range(restarted):
            self.start_one()
        return restarted

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGTERM)     # cold: kill horses, give jobs back
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _horses(procs: list[subprocess.Popen[bytes]]) -> list[psutil.Process]:
    """Running horses: forked by each worker's fork server, each leads its own process
    group (the fork server itself does not, so it is never the target)."""
    found = []
    for proc in procs:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if os.getpgid(child.pid) == child.pid:
                        found.append(child)
                except ProcessLookupError:
                    continue
        except psutil.NoSuchProcess:
            continue
    return found


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_chaos(settings: Settings, *, jobs: int = 2000, workers: int = 4,
              job_seconds: float = 0.02, kill_for: float = 18.0, kill_every: float = 0.4,
              deadline: float = 55.0, reaper_interval: float = 0.5, lease: float | None = None,
              log_dir: Path | None = None, seed: int | None = None,
              progress: Any = None, freeze_for: float = 0.0,
              concurrency: int = 1) -> ChaosResult:
    """Run the chaos scenario against ``settings.redis_url`` under ``settings.prefix``.

    ``lease``: ``FUSIONWORKER_LEASE`` of the workers (default 30 s); a short one
    brings the jobs of killed parents back sooner. ``concurrency``: slots per worker
    (``FUSIONWORKER_CONCURRENCY``): a killed parent then takes all its jobs down.
    """
    rng = random.Random(seed)
    log_dir = log_dir or Path("/tmp")
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    q = Queue(QUEUE, r, settings=settings)
    key = f"{settings.prefix}:chaos:out"
    t0 = time.monotonic()
    ids = [f"c{i:06d}" for i in range(jobs)]
    markers = log_dir / f"markers-{settings.prefix}"
    markers.mkdir(parents=True, exist_ok=True)
    for job_id in ids:
        q.enqueue_call("tests.jobs:record_exclusive",
                       args=[settings.redis_url, key, job_id, job_seconds, str(markers)],
                       job_id=job_id, max_retries=50, timeout=30)
    env = dict(os.environ)
    env.update({
        "REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
        "FUSIONWORKER_POLL_INTERVAL": "0.2", "FUSIONWORKER_HEARTBEAT_INTERVAL": "0.5",
        "FUSIONWORKER_REAPER_INTERVAL": str(reaper_interval),
        "FUSIONWORKER_ALLOWED_MODULES": "tests", "FUSIONWORKER_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    if lease:
        env["FUSIONWORKER_LEASE"] = str(lease)
    if concurrency > 1:
        env["FUSIONWORKER_CONCURRENCY"] = str(concurrency)
    result = ChaosResult(jobs=jobs)
    sup = Supervisor(workers, env, log_dir)
    requeued: set[str] = set()
    frozen: list[tuple[subprocess.Popen[bytes], float]] = []
    try:
        for _ in range(workers):
            sup.start_one()
        kill_until = time.monotonic() + kill_for
        end = t0 + deadline
        next_kill = time.monotonic() + rng.uniform(0.5, 1.5) * kill_every
        while time.monotonic() < end:
            result.worker_restarts += sup.keep_alive()
            now = time.monotonic()
            for proc, until in [f for f in frozen if f[1] <= now]:
                frozen.remove((proc, until))
                _signal(proc, signal.SIGCONT)
            if now < kill_until and now >= next_kill:
                next_kill = now + rng.uniform(0.5, 1.5) * kill_every
                thawed = [p for p in sup.procs if all(p is not f for f, _ in frozen)]
                move = rng.random()
                if freeze_for and move < 0.2 and len(thawed) > 1:
                    victim = rng.choice(thawed)
                    _signal(victim, signal.SIGSTOP)      # the parent alone
                    frozen.append((victim, now + freeze_for))
                    result.freezes += 1
                elif move < 0.6:
                    victim = rng.choice(sup.procs)
                    victim.kill()
                    victim.wait(5)
                    result.parent_kills += 1
                else:
                    horses = _horses(sup.procs)
                    if horses:
                        try:
                            rng.choice(horses).kill()
                            result.horse_kills += 1
                        except psutil.NoSuchProcess:
                            pass
            for job_id in r.zrange(q.qkeys.failed, 0, -1):
                reason = r.hget(q.qkeys.job(job_id), "failure_reason")
                if reason == "killed":           # the operator's move: requeue from dead-letter
                    try:
                        q.requeue(job_id)
                        requeued.add(job_id)
                    except (InvalidOperation, NoSuchJob):  # raced with a worker: next round
                        continue
            if now >= kill_until and r.zcard(q.qkeys.finished) >= jobs:
                break
            if progress and int(now - t0) != int(time.monotonic() - t0):
                progress(f"{time.monotonic() - t0:.0f}s finished={r.zcard(q.qkeys.finished)}")
            time.sleep(0.05)
    finally:
        for proc, _ in frozen:
            _signal(proc, signal.SIGCONT)
        sup.stop()
    result.seconds = time.monotonic() - t0
    result.requeued_from_failed = len(requeued)
    result.overlaps = r.llen(key + ":overlap")
    pipe = r.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(q.qkeys.job(job_id), "status", "attempts")
    records = dict(zip(ids, pipe.execute()))
    statuses = Counter(status for status, _ in records.values())
    result.finished = statuses.pop("finished", 0)
    result.not_finished = dict(statuses)
    counts = Counter(r.lrange(key, 0, -1))
    result.recorded = sum(counts.values())
    result.unique_recorded = len(counts)
    result.missing = sum(1 for job_id in ids if counts[job_id] == 0)
    result.reaped_attempts = sum(max(int(a or 1) - 1, 0) for _, a in records.values())
    dups = [job_id for job_id, n in counts.items() if n > 1]
    result.duplicated = len(dups)
    result.unexplained_duplicates = [
        job_id for job_id in dups
        if job_id not in requeued and int(records[job_id][1] or 0) <= 1]
    return result
