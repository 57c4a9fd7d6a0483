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
   Widened faults (each off by default; one at a time, every ``fault_every`` s
   randomized, during the kill phase and past it until each enabled kind
   happened once; each enabled kind once per round, in a random order):
   - ``partition_for``: each worker slot reaches Redis through its own
     ``tests/tcp_proxy.py`` proxy; a partition cuts one worker's proxy (every
     connection dropped, new ones refused) for that many seconds, then heals it.
     Longer than the lease, the other workers reap its job while its horse must
     already be dead (its own deadline).
   - ``restart_down``: SIGKILL the private Redis ``server`` (``appendonly yes``,
     ``appendfsync always``), leave it down that many seconds, start it again on
     the same port and dir; it must come back with every acknowledged write.
   - ``oom_for``: ``CONFIG SET maxmemory`` below ``used_memory`` (policy
     ``noeviction``) on the private ``server`` for that many seconds: every write
     is refused with OOM; then ``maxmemory 0`` again.
   Jobs whose own ``RPUSH`` meets a fault fail and are retried (``retry_delay``;
   with ``oom_for`` the workers also retry ``redis.exceptions.OutOfMemoryError``,
   which ``FUSIONWORKER_RETRYABLE`` leaves out by default); their record is then
   written once, by the attempt that succeeded.
   With ``require`` (e.g. ``("parent", "horse")``) the kill phase goes on past
   ``kill_for`` until each required move happened once (only the missing moves
   then): on a loaded machine a horse may never be running when a horse kill is
   drawn while parents keep dying.
4. Settle: keep supervising until every job is finished (or the deadline). With
   ``stall`` the run also ends, unfinished, once no job finished for that many
   seconds: a stuck run is told from a slow one by progress, not by the clock.

Every job holds an exclusive marker (an flock per job id) while it runs; a
second execution finding it held counts as an overlap (must be 0).

Verdict: every job ``finished``; every id in the list at least once; an id in
the list more than once belongs to a job with a killed attempt (attempts > 1, a run
lost with its worker (``shared_deaths``, not counted as an attempt),
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

from fusionworker.core.config import DEFAULT_RETRYABLE, Settings
from fusionworker.core.queue import Queue
from fusionworker.exceptions import InvalidOperation, NoSuchJob
from tests.children import die_with_parent
from tests.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "chaos"


@dataclass
class ChaosResult:
    jobs: int = 0
    finished: int = 0
    not_finished: dict[str, int] = field(default_factory=dict)
    #: up to 10 jobs not finished: id -> "status reason attempts=N: last traceback line"
    not_finished_detail: dict[str, str] = field(default_factory=dict)
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
    partitions: int = 0
    redis_restarts: int = 0
    oom_windows: int = 0
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
                f"{self.freezes} parents frozen (SIGSTOP); {self.partitions} partitions; "
                f"{self.redis_restarts} Redis restarts; {self.oom_windows} OOM windows; "
                f"{self.overlaps} overlapping "
                f"executions; "
                f"{self.worker_restarts} worker restarts; "
                f"{self.reaped_attempts} extra attempts (reaped after a parent death, "
                f"or retried after a fault); "
                f"{self.requeued_from_failed} re-queued from dead-letter after a horse kill")


class Supervisor:
    """Keeps ``count`` worker processes running; logs go to ``log_dir``.

    With ``urls`` (one per slot), the worker in slot i reaches Redis at ``urls[i]``
    (its own proxy), and a replacement takes the dead worker's slot."""

    def __init__(self, count: int, env: dict[str, str], log_dir: Path,
                 urls: list[str] | None = None) -> None:
        self.count, self.env, self.log_dir, self.urls = count, env, log_dir, urls
        self.procs: list[subprocess.Popen[bytes]] = []
        self.slot_of: dict[int, int] = {}
        self.started = 0

    def start_one(self, slot: int | None = None) -> subprocess.Popen[bytes]:
        if slot is None:
            slot = len(self.procs)
        env = self.env
        if self.urls:
            env = {**env, "REDIS_URL": self.urls[slot]}
        log = open(self.log_dir / f"chaos-worker{self.started}.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, str(ROOT / "run_worker.py"), "worker", "-q", QUEUE]
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(ROOT),
                                preexec_fn=die_with_parent())  # noqa: PLW1509 - prctl() only
        log.close()
        self.started += 1
        self.procs.append(proc)
        self.slot_of[proc.pid] = slot
        return proc

    def keep_alive(self) -> int:
        """Replace dead workers; returns how many were restarted."""
        dead = [p for p in self.procs if p.poll() is not None]
        self.procs = [p for p in self.procs if p.poll() is None]
        for proc in dead:
            self.start_one(self.slot_of.pop(proc.pid, None))
        for _ in range(self.count - len(self.procs)):
            self.start_one()
        return len(dead)

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
    group. The fork server leads one too (a stop signal to the worker's group must not
    stop it), but it is the worker's own child, so it is never the target."""
    found = []
    for proc in procs:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if os.getpgid(child.pid) == child.pid and child.ppid() != proc.pid:
                        found.append(child)
                except (ProcessLookupError, psutil.NoSuchProcess):
                    continue
        except psutil.NoSuchProcess:
            continue
    return found


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass


def _admin(server: Any) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=5)


def _operator_round(r: redis.Redis, q: Queue, requeued: set[str], jobs: int) -> bool:
    """Re-queue the jobs whose horse was killed (from the dead-letter); True when every
    job is finished."""
    for job_id in r.zrange(q.qkeys.failed, 0, -1):
        reason = r.hget(q.qkeys.job(job_id), "failure_reason")
        if reason == "killed":           # the operator's move: requeue from dead-letter
            try:
                q.requeue(job_id)
                requeued.add(job_id)
            except (InvalidOperation, NoSuchJob):  # raced with a worker: next round
                continue
    return r.zcard(q.qkeys.finished) >= jobs


def run_chaos(settings: Settings, *, jobs: int = 2000, workers: int = 4,
              job_seconds: float = 0.02, kill_for: float = 18.0, kill_every: float = 0.4,
              deadline: float = 55.0, reaper_interval: float = 0.5, lease: float | None = None,
              log_dir: Path | None = None, seed: int | None = None,
              progress: Any = None, freeze_for: float = 0.0,
              concurrency: int = 1, partition_for: float = 0.0, restart_down: float = 0.0,
              oom_for: float = 0.0, fault_every: float = 4.0, server: Any = None,
              retry_delay: float | None = None, require: tuple[str, ...] = (),
              stall: float = 0.0, horse_jobs: int = 1,
              async_per_horse: int = 1) -> ChaosResult:
    """Run the chaos scenario against ``settings.redis_url`` under ``settings.prefix``.

    ``lease``: ``FUSIONWORKER_LEASE`` of the workers (default 30 s); a short one
    brings the jobs of killed parents back sooner. ``concurrency``: slots per worker
    (``FUSIONWORKER_CONCURRENCY``): a killed parent then takes all its jobs down.
    ``partition_for``/``restart_down``/``oom_for``: the widened faults (module
    docstring); the last two need ``server``, a ``tests.redis_servers.RestartableRedis``
    that ``settings.redis_url`` points to (never the shared server: its config is
    changed and it is killed). ``require``: moves (``parent``, ``horse``, ``freeze``)
    the kill phase waits for; ``stall``: seconds without a finished job that end a
    settling run (module docstring). ``horse_jobs``: warm horses
    (``FUSIONWORKER_HORSE_JOBS``): a horse kill may then hit one between jobs.
    ``async_per_horse`` > 1: the jobs are ``async def`` and run K at once in a horse
    (``FUSIONWORKER_ASYNC_PER_HORSE``): a horse kill takes K jobs down.
    """
    if (restart_down or oom_for) and server is None:
        raise ValueError("Redis restarts and OOM windows need a private server (server=...)")
    if server is not None and settings.redis_url != server.url:
        raise ValueError(f"settings.redis_url must be the private server's ({server.url})")
    rng = random.Random(seed)
    fault_rng = random.Random(None if seed is None else seed + 1)
    log_dir = log_dir or Path("/tmp")
    r = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    q = Queue(QUEUE, r, settings=settings)
    key = f"{settings.prefix}:chaos:out"
    t0 = time.monotonic()
    ids = [f"c{i:06d}" for i in range(jobs)]
    markers = log_dir / f"markers-{settings.prefix}"
    markers.mkdir(parents=True, exist_ok=True)
    for job_id in ids:
        func = "record_exclusive_async" if async_per_horse > 1 else "record_exclusive"
        q.enqueue_call(f"tests.jobs:{func}",
                       args=[settings.redis_url, key, job_id, job_seconds, str(markers)],
                       job_id=job_id, max_retries=50, timeout=30, retry_delay=retry_delay)
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
    if horse_jobs > 1:
        env["FUSIONWORKER_HORSE_JOBS"] = str(horse_jobs)
    if async_per_horse > 1:
        env["FUSIONWORKER_ASYNC_PER_HORSE"] = str(async_per_horse)
    if oom_for:
        # the jobs' own RPUSH meets the OOM window too: like a connection error (retried
        # by default), the operator declares that refusal transient for these jobs
        env["FUSIONWORKER_RETRYABLE"] = ",".join(
            (*DEFAULT_RETRYABLE, "redis.exceptions.OutOfMemoryError"))
    result = ChaosResult(jobs=jobs)
    proxies: list[TcpProxy] = []
    if partition_for:
        target = (r.connection_pool.connection_kwargs["host"],
                  int(r.connection_pool.connection_kwargs["port"]))
        proxies = [TcpProxy(target) for _ in range(workers)]
        db = r.connection_pool.connection_kwargs.get("db", 0)
        password = r.connection_pool.connection_kwargs.get("password")
        auth = f":{password}@" if password else ""
        urls = [f"redis://{auth}127.0.0.1:{p.port}/{db}" for p in proxies]
    sup = Supervisor(workers, env, log_dir, urls=urls if proxies else None)
    requeued: set[str] = set()
    frozen: list[tuple[subprocess.Popen[bytes], float]] = []
    kinds = ([("partition", partition_for)] if partition_for else []) + (
        [("restart", restart_down)] if restart_down else []) + (
        [("oom", oom_for)] if oom_for else [])
    fault: tuple[str, Any, float] | None = None           # (kind, what, until)
    pending: list[tuple[str, float]] = []
    next_fault = time.monotonic() + fault_rng.uniform(0.5, 1.5) * fault_every

    def end_fault() -> None:
        nonlocal fault, next_fault
        if fault is None:
            return
        kind, what, _ = fault
        if kind == "partition":
            what.heal()
        elif kind == "restart":
            server.start()
        elif kind == "oom":
            _admin(server).config_set("maxmemory", "0")
        fault = None
        next_fault = time.monotonic() + fault_rng.uniform(0.5, 1.5) * fault_every

    def start_fault(now: float) -> None:
        nonlocal fault
        if not pending:                   # every kind once per round, in random order
            pending.extend(fault_rng.sample(kinds, len(kinds)))
        kind, seconds = pending.pop()
        if kind == "partition":
            proxy = fault_rng.choice(proxies)
            proxy.cut()
            fault = (kind, proxy, now + seconds)
            result.partitions += 1
        elif kind == "restart":
            server.kill()
            fault = (kind, None, now + seconds)
            result.redis_restarts += 1
        else:
            admin = _admin(server)
            admin.config_set("maxmemory-policy", "noeviction")
            used = int(admin.info("memory")["used_memory"])
            admin.config_set("maxmemory", str(max(1, used // 2)))   # every write: OOM
            fault = (kind, None, now + seconds)
            result.oom_windows += 1

    try:
        for _ in range(workers):
            sup.start_one()
        kill_until = time.monotonic() + kill_for
        end = t0 + deadline
        next_kill = time.monotonic() + rng.uniform(0.5, 1.5) * kill_every
        done_count, progress_at = 0, time.monotonic()

        def missing() -> list[str]:
            """Required moves that did not happen yet."""
            counts = {"parent": result.parent_kills, "horse": result.horse_kills,
                      "freeze": result.freezes if freeze_for else 1}
            return [kind for kind in require if not counts[kind]]

        def killing(now: float) -> bool:
            return now < kill_until or bool(missing())

        def faulting(now: float) -> bool:
            """Faults go on past ``kill_for`` until each enabled kind happened once."""
            counts = {"partition": result.partitions, "restart": result.redis_restarts,
                      "oom": result.oom_windows}
            return now < kill_until or any(not counts[kind] for kind, _ in kinds)

        while time.monotonic() < end:
            result.worker_restarts += sup.keep_alive()
            now = time.monotonic()
            for proc, until in [f for f in frozen if f[1] <= now]:
                frozen.remove((proc, until))
                _signal(proc, signal.SIGCONT)
            if fault is not None and fault[2] <= now:
                end_fault()
            elif fault is None and kinds and faulting(now) and now >= next_fault:
                start_fault(now)
            if killing(now) and now >= next_kill:
                next_kill = now + rng.uniform(0.5, 1.5) * kill_every
                thawed = [p for p in sup.procs if all(p is not f for f, _ in frozen)]
                move = rng.random()
                if now >= kill_until:        # past kill_for: only the missing moves
                    wanted = missing()
                    move = 0.0 if "freeze" in wanted else 0.3 if "parent" in wanted else 1.0
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
            try:
                busy = killing(now) or (bool(kinds) and faulting(now)) or fault is not None
                if _operator_round(r, q, requeued, jobs) and not busy:
                    break
                if stall:
                    finished_now = r.zcard(q.qkeys.finished)
                    if busy or finished_now > done_count:
                        done_count, progress_at = finished_now, now
                    elif now - progress_at > stall:
                        break                    # stuck: no job finished for `stall` s
                if progress and int(now - t0) != int(time.monotonic() - t0):
                    progress(f"{time.monotonic() - t0:.0f}s "
                             f"finished={r.zcard(q.qkeys.finished)}")
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                pass                             # Redis down or refusing (OOM): next round
            time.sleep(0.05)
    finally:
        for proc, _ in frozen:
            _signal(proc, signal.SIGCONT)
        end_fault()
        sup.stop()
        for proxy in proxies:
            proxy.cut()
    result.seconds = time.monotonic() - t0
    result.requeued_from_failed = len(requeued)
    result.overlaps = r.llen(key + ":overlap")
    pipe = r.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(q.qkeys.job(job_id), "status", "attempts", "shared_deaths")
    records = dict(zip(ids, pipe.execute()))
    statuses = Counter(status for status, _, _ in records.values())
    result.finished = statuses.pop("finished", 0)
    result.not_finished = dict(statuses)
    for job_id, (status, attempts, _) in records.items():
        if status != "finished" and len(result.not_finished_detail) < 10:
            reason, tb = r.hmget(q.qkeys.job(job_id), "failure_reason", "traceback")
            last = (tb or "").strip().splitlines()[-1:] or [""]
            result.not_finished_detail[job_id] = (
                f"{status} {reason} attempts={attempts}: {last[0][:200]}")
    counts = Counter(r.lrange(key, 0, -1))
    result.recorded = sum(counts.values())
    result.unique_recorded = len(counts)
    result.missing = sum(1 for job_id in ids if counts[job_id] == 0)
    # runs lost with their worker (the reaper's, not counted: shared_deaths) or counted
    result.reaped_attempts = sum(max(int(a or 1) - 1, 0) + int(lost or 0)
                                 for _, a, lost in records.values())
    dups = [job_id for job_id, n in counts.items() if n > 1]
    result.duplicated = len(dups)
    result.unexplained_duplicates = [
        job_id for job_id in dups
        if job_id not in requeued and int(records[job_id][1] or 0) <= 1
        and not int(records[job_id][2] or 0)]
    return result
