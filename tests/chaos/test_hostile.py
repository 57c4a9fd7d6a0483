"""Chaos with hostile jobs mixed in (issue #31): at ``--concurrency 4``, fresh horses and
``--horse-jobs 10``, jobs that SIGKILL their fork server, jobs that SIGKILL their worker
parent and jobs that write garbage into every descriptor they hold run among ordinary
ones, while the harness SIGKILLs a worker parent (``--processes 2`` starts it again) and
SIGSTOPs the other one with its fork server past the lease. Every ordinary job
finishes, none lost, no two runs at once, and no attempt is charged to it for what
happened beside it; every hostile job fails.

The worker killers are claimed early and kill once the harness is done (a job that ran
alone in a worker that died is that death's culprit: the harness's own kills must not
land on such a run; docs/design.md, "Isolation").
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections import Counter

import psutil
import pytest

from tests.waiting import wait_for

ORDINARY, KILLERS, SCRIBBLERS, WORKER_KILLERS = 60, 3, 3, 2


def _one_to_freeze(supervisor: int, workers: list[int]) -> list[int] | None:
    """A live worker other than the one killed (``workers[0]``; ``workers[1]`` first) and
    its fork server, or None (not yet)."""
    for pid in [*workers[1:], *_children(supervisor, False)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            servers = _children(pid, True) if pid != workers[0] else []
            if servers:
                return [pid, servers[0]]
    return None


def _children(pid: int, fork_servers: bool) -> list[int]:
    found = []
    for child in psutil.Process(pid).children():
        try:
            if ("fork server" in " ".join(child.cmdline())) == fork_servers:
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
@pytest.mark.parametrize("horse_jobs", ["1", "10"])
def test_hostile_jobs_and_lost_workers_cost_ordinary_jobs_nothing(
        processes, queue, r, prefix, redis_url, tmp_path, horse_jobs):
    q = queue()
    key = f"{prefix}:runs"
    ordinary = [q.enqueue("tests.jobs:record_exclusive", redis_url, key, f"o{i}", 0.3,
                          str(tmp_path), max_retries=0) for i in range(ORDINARY)]
    hostile = []
    harness = f"{prefix}:harness"        # the harness is done: the worker killers may kill
    for i in range(max(KILLERS, SCRIBBLERS, WORKER_KILLERS)):   # near the front, among the rest
        if i < WORKER_KILLERS:
            hostile.append(q.enqueue("tests.hostile_jobs:kill_worker", redis_url, f"{prefix}:w",
                                     harness, 1, priority=1 - i))
        if i < KILLERS:
            hostile.append(q.enqueue("tests.hostile_jobs:kill_fork_server", redis_url,
                                     f"{prefix}:k", priority=1 - i))
        if i < SCRIBBLERS:
            hostile.append(q.enqueue("tests.hostile_jobs:scribble", redis_url, f"{prefix}:s",
                                     priority=1 - i))
    env = {"FUSIONWORKER_LEASE": "3", "FUSIONWORKER_HEARTBEAT_INTERVAL": "0.5",
           "FUSIONWORKER_REAPER_INTERVAL": "0.5"}
    sup = processes.worker("-q", "default", "--processes", "2", "--concurrency", "4",
                           "--horse-jobs", horse_jobs, env=env)
    workers = wait_for(lambda: len(_children(sup.pid, False)) == 2
                       and _children(sup.pid, False), what="two worker processes")
    wait_for(lambda: r.llen(key) >= 3, what="ordinary jobs running")
    with contextlib.suppress(ProcessLookupError):  # a hostile job was first: a fork server's
        os.kill(workers[0], signal.SIGKILL)        # killer that two servers in a row died
    # without starting runs in a horse of its worker and kills it; else an operator's kill -9
    frozen = wait_for(lambda: _one_to_freeze(sup.pid, workers), ignore=(psutil.Error,),
                      what="a worker and its fork server")
    for pid in frozen:                 # the other worker and its fork server, past the lease
        os.kill(pid, signal.SIGSTOP)
    try:
        # until another worker's reaper took the frozen one's jobs back (its lease ran
        # out: ~4 s), 6 s at most (the fixed wait this was, should it have held none)
        taken_back = f"(worker {socket.gethostname()}.{frozen[0]}: worker silent"
        until = time.monotonic() + 6.0
        while time.monotonic() < until and taken_back not in processes.output(sup):
            time.sleep(0.05)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    r.rpush(harness, 1)
    done = lambda: [q.fetch_job(j.id) for j in ordinary]  # noqa: E731
    wait_for(lambda: all(j.status in ("finished", "failed") for j in done()), timeout=240,
             what="every ordinary job ended")
    failed = {j.id: (j.attempts, j.error_type, j.error_message) for j in done()
              if j.status != "finished"}
    assert not failed, failed
    assert r.llen(f"{key}:overlap") == 0, r.lrange(f"{key}:overlap", 0, -1)
    runs = Counter(r.lrange(key, 0, -1))
    assert all(runs[f"o{i}"] >= 1 for i in range(ORDINARY))        # none lost
    charged = {j.id: (j.attempts, j.error_message) for j in done() if j.attempts != 1}
    assert not charged, charged
    # a suspect runs alone (in a fork server, a worker of its own): it may end after the rest
    wait_for(lambda: all(q.fetch_job(j.id).status == "failed" for j in hostile), timeout=120,
             what="every hostile job failed")
    culprits = [q.fetch_job(j.id) for j in hostile if j.func.endswith(":kill_worker")]
    assert all(j.error_type == "WorkerKilled" for j in culprits), [
        (j.error_type, j.error_message) for j in culprits]     # each, alone, as the culprit
