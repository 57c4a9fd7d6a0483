"""Chaos with hostile jobs mixed in (issue #31): at ``--concurrency 4``, fresh horses and
``--horse-jobs 10``, jobs that SIGKILL their fork server and jobs that write garbage
into every descriptor they hold run among ordinary ones, and the harness SIGSTOPs a
worker parent with its fork server past the lease. Every ordinary job finishes, with
no attempt charged to it for a neighbour's deed, none lost, no two runs at once.
(A job that kills the worker parent itself is left out: its neighbours are recovered
by the reaper with the attempt counted, docs/design.md "Isolation".)
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.waiting import wait_for

ORDINARY, KILLERS, SCRIBBLERS = 60, 3, 3


def _fork_server(worker_pid: int) -> int | None:
    for child in psutil.Process(worker_pid).children():
        if "fork server" in " ".join(child.cmdline()):
            return child.pid
    return None


@pytest.mark.slow
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
@pytest.mark.parametrize("horse_jobs", ["1", "10"])
def test_hostile_jobs_cost_ordinary_jobs_nothing(processes, queue, r, prefix, redis_url,
                                                 tmp_path, horse_jobs):
    q = queue()
    key = f"{prefix}:runs"
    ordinary = [q.enqueue("tests.jobs:record_exclusive", redis_url, key, f"o{i}", 0.3,
                          str(tmp_path), max_retries=0) for i in range(ORDINARY)]
    for i in range(max(KILLERS, SCRIBBLERS)):      # spread among the ordinary ones
        if i < KILLERS:
            q.enqueue("tests.hostile_jobs:kill_fork_server", redis_url, f"{prefix}:k",
                      max_retries=3, priority=-i)
        if i < SCRIBBLERS:
            q.enqueue("tests.hostile_jobs:scribble", redis_url, f"{prefix}:s", priority=-i)
    env = {"FUSIONWORKER_LEASE": "3", "FUSIONWORKER_HEARTBEAT_INTERVAL": "0.5",
           "FUSIONWORKER_REAPER_INTERVAL": "0.5"}
    flags = ("-q", "default", "--concurrency", "4", "--horse-jobs", horse_jobs)
    a = processes.worker(*flags, env=env)
    processes.worker(*flags, env=env)
    wait_for(lambda: r.llen(key) >= 5, what="ordinary jobs running")
    frozen = [a.pid, wait_for(lambda: _fork_server(a.pid), what="a's fork server")]
    for pid in frozen:                 # the worker and its fork server, past the lease
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(5.0)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in ordinary),
             timeout=180, what="every ordinary job finished")
    assert r.llen(f"{key}:overlap") == 0, r.lrange(f"{key}:overlap", 0, -1)
    runs = r.lrange(key, 0, -1)
    for job in ordinary:
        done = q.fetch_job(job.id)
        value = job.args[2]
        assert runs.count(value) >= 1, value                     # none lost
        # a neighbour's deed never costs it an attempt (a freeze past the lease is
        # the reaper's, counted as for any dead worker: at most one such)
        assert done.attempts <= 2, (value, done.attempts, done.error_message)
    charged = [j for j in ordinary if q.fetch_job(j.id).attempts > 1]
    assert len(charged) <= 4, [j.id for j in charged]    # only a's frozen slots
