"""``worker --concurrency N``: N horses at once, each job still isolated (runtime/loop.py).

Real Redis, real worker processes, real signals. Concurrency is asserted from
the jobs' own start/end stamps or counts, never from wall-clock thresholds.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from fusionworker.core.admin import describe_worker
from fusionworker.core.job import Job
from fusionworker.core.keys import Keys
from tests.children import fork_servers_of
from tests.waiting import gone, processes_of, wait_for


def _warm_up(q, r, settings, key):
    """One job first: the fork server then preloads tests.jobs (and redis) for the rest."""
    job = q.enqueue_call("tests.jobs:record", args=[settings.redis_url, key, "warm"])
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=20)


def _status(q, job_id):
    job = q.fetch_job(job_id)
    return job.status if job else None


def _until(q, jobs, statuses=("finished",), timeout=30):
    """Wait until every job of ``jobs`` is in one of ``statuses``."""
    wait_for(lambda: all(_status(q, j.id) in statuses for j in jobs), timeout=timeout,
             interval=0.1)


ENDED = ("finished", "failed")


def _running(processes, q, r, settings, n, seconds, env=None, then=None, **options):
    """A worker with ``n`` slots and ``n`` jobs that each push their horse's pid to a list
    and sleep ``seconds`` (with ``then``: their reruns sleep ``then``); returns (worker,
    jobs, the list's key) once all ``n`` run."""
    key = f"{settings.prefix}:pids"
    w = processes.worker("--customq", "default", "--concurrency", str(n), env=env)
    func, args = "tests.jobs:pid_then_sleep", [settings.redis_url, key, seconds]
    if then is not None:
        func, args = "tests.jobs:pid_then_sleep_first", [settings.redis_url, key, n, seconds, then]
    jobs = [q.enqueue_call(func, args=args, **options) for _ in range(n)]
    wait_for(lambda: r.llen(key) == n, timeout=20)
    return w, jobs, key


def _horse_pids(proc):
    return [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]


def test_fifty_jobs_run_at_once_with_concurrency_50(processes, queue, r, settings):
    q = queue()
    key = f"{settings.prefix}:barrier"
    w = processes.worker("--customq", "default", "--concurrency", "50")
    _warm_up(q, r, settings, f"{settings.prefix}:warm")
    # each job waits (up to 60 s) until all 50 arrived: every one meets the others only
    # if all 50 run at the same time (a worker running fewer at once never meets them)
    jobs = [q.enqueue_call("tests.jobs:barrier", args=[settings.redis_url, key, 50])
            for _ in range(50)]
    _until(q, jobs, timeout=90)
    assert r.lrange(f"{key}:met", 0, -1) == ["1"] * 50
    data = r.hgetall(Keys(settings.prefix).worker(f"{os.uname().nodename}.{w.pid}"))
    assert data["concurrency"] == "50"


def test_info_and_heartbeat_show_every_current_job(processes, queue, r, settings):
    q = queue()
    processes.worker("--customq", "default", "--concurrency", "4")
    key = f"{settings.prefix}:pids"
    jobs = [q.enqueue_call("tests.jobs:pid_then_sleep", args=[settings.redis_url, key, 30])
            for _ in range(4)]
    wait_for(lambda: r.llen(key) == 4, timeout=20)
    keys = Keys(settings.prefix)

    def listed():
        names = r.smembers(keys.workers)
        info = [describe_worker(r.hgetall(keys.worker(n)), time.time()) for n in names]
        return info and set(info[0]["current_jobs"]) == {j.id for j in jobs} and info[0]
    info = wait_for(listed, timeout=10)
    assert info["current_job"] in {j.id for j in jobs}
    assert info["state"] == "busy"
    assert info["current_job_age"] is not None       # current_job_started is written too


@pytest.mark.slow
def test_sigkill_of_one_horse_fails_only_its_job(processes, queue, r, settings):
    q = queue()
    w, jobs, key = _running(processes, q, r, settings, 5, 2.5)
    victim = int(r.lindex(key, 2))
    assert victim in _horse_pids(w)
    os.kill(victim, signal.SIGKILL)
    _until(q, jobs, ENDED)
    failed = [q.fetch_job(j.id) for j in jobs if _status(q, j.id) == "failed"]
    assert len(failed) == 1
    assert failed[0].failure_reason == "killed"
    assert sum(_status(q, j.id) == "finished" for j in jobs) == 4


@pytest.mark.slow
def test_a_job_over_its_timeout_fails_alone(processes, queue, r, settings):
    q = queue()
    processes.worker("--customq", "default", "--concurrency", "4")
    slow = q.enqueue_call("tests.jobs:sleep", args=[30], timeout=1)
    others = [q.enqueue_call("tests.jobs:sleep", args=[2]) for _ in range(3)]
    _until(q, [slow, *others], ENDED)
    job = q.fetch_job(slow.id)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert [_status(q, j.id) for j in others] == ["finished"] * 3


@pytest.mark.slow
def test_a_job_started_beside_a_long_one_gets_its_own_deadline_and_hard_kill(
        processes, queue, r, settings):
    """The loop looks at its slots when the first of them is due (runtime/loop.py): a job
    started after that time was set, with an earlier deadline, is still killed at its
    own, SIGKILL included (it ignores SIGALRM), and the long job runs on untouched."""
    q = queue()
    processes.worker("--customq", "default", "--concurrency", "2",
                     env={"FUSIONWORKER_KILL_GRACE": "0.5"})
    long = q.enqueue_call("tests.jobs:sleep", args=[30], timeout=60)
    wait_for(lambda: _status(q, long.id) == "started", timeout=20)
    time.sleep(0.3)     # policed with the long job alone: its due is a second away
    # (3 s: a horse starved that long before its job ignores SIGALRM ends at the alarm)
    short = q.enqueue_call("tests.jobs:ignore_alarm_and_sleep", args=[30], timeout=3)
    _until(q, [short], ENDED, timeout=20)
    job = q.fetch_job(short.id)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert "killed" in job.error_message
    assert _status(q, long.id) == "started"


@pytest.mark.slow
def test_max_active_holds_across_slots(processes, queue, r, settings):
    q = queue()
    q.set_max_active(3)
    key = f"{settings.prefix}:active"
    jobs = [q.enqueue_call("tests.jobs:count_active", args=[settings.redis_url, key, 0.3])
            for _ in range(12)]
    processes.worker("--customq", "default", "--concurrency", "10")
    _until(q, jobs, timeout=60)
    seen = [int(n) for n in r.lrange(f"{key}:seen", 0, -1)]
    assert len(seen) == 12
    assert max(seen) == 3      # never more than 3 running, counted inside the jobs


@pytest.mark.slow
def test_sigkill_of_the_parent_kills_every_horse_and_the_reaper_returns_every_job(
        processes, queue, r, settings):
    q = queue()
    env = {"FUSIONWORKER_LEASE": "1.5", "FUSIONWORKER_REAPER_INTERVAL": "0.5"}
    # the first runs sleep until the kill (30 s), the reruns do not
    w, jobs, key = _running(processes, q, r, settings, 10, 30.0, env=env, then=0.0,
                            max_retries=3)
    horses = processes_of(r.lrange(key, 0, -1))
    os.kill(w.pid, signal.SIGKILL)
    w.wait(10)
    wait_for(lambda: gone(horses), timeout=10, what="every horse gone")
    assert all(_status(q, j.id) == "started" for j in jobs)   # nobody recorded them
    processes.worker("--customq", "default", "--concurrency", "10", env=env)
    # each is a suspect of that death now: it runs alone in its worker (solo.py), so
    # the ten run one after another
    _until(q, jobs, timeout=60)
    assert r.llen(key) == 20                         # each ran exactly once more
    # the lost worker's attempt is not counted (only the culprit pays: design.md)
    assert [q.fetch_job(j.id).attempts for j in jobs] == [1] * 10
    assert [r.hget(q.qkeys.job(j.id), "shared_deaths") for j in jobs] == ["1"] * 10
    assert [q.fetch_job(j.id).worker_deaths for j in jobs] == [1] * 10


@pytest.mark.slow
def test_warm_shutdown_waits_for_every_running_job(processes, queue, r, settings):
    q = queue()
    w, jobs, _ = _running(processes, q, r, settings, 4, 1.5)
    w.send_signal(signal.SIGTERM)
    assert w.wait(30) == 0
    assert [_status(q, j.id) for j in jobs] == ["finished"] * 4


def test_cold_shutdown_returns_every_job_unstarted(processes, queue, r, settings):
    q = queue()
    w, jobs, key = _running(processes, q, r, settings, 4, 60)
    horses = processes_of(r.lrange(key, 0, -1))
    w.send_signal(signal.SIGTERM)
    wait_for(lambda: "warm shutdown" in processes.output(w))
    w.send_signal(signal.SIGTERM)
    assert w.wait(30) == 0
    for j in jobs:
        job = q.fetch_job(j.id)
        assert job.status == "queued"
        assert job.attempts == 0          # the interrupted attempt is not counted
    assert q.count == 4
    assert gone(horses)


@pytest.mark.parametrize("n", [3])
def test_burst_worker_with_slots_runs_everything_once(burst, queue, r, settings, n):
    q = queue()
    key = f"{settings.prefix}:done"
    jobs = [q.enqueue_call("tests.jobs:record", args=[settings.redis_url, key, i])
            for i in range(20)]
    w = burst(settings=settings.replace(concurrency=n))
    assert w.successful == 20
    assert sorted(int(x) for x in r.lrange(key, 0, -1)) == list(range(20))
    assert all(isinstance(q.fetch_job(j.id), Job) for j in jobs)


def test_claim_with_a_count_keeps_priority_order_and_checks_the_cap_per_job(queue, r, settings):
    from fusionworker.core.queue import scripts_for

    q = queue()
    low = q.enqueue_call("tests.jobs:noop", priority=0)
    high = q.enqueue_call("tests.jobs:noop", priority=5)
    mid = q.enqueue_call("tests.jobs:noop", priority=2)
    q.enqueue_call("tests.jobs:noop", priority=0)
    q.set_max_active(3)
    scripts = scripts_for(r)
    reply = scripts.claim(keys=[q.qkeys.base], args=["w1", "tok", 30, 60, 10])
    assert reply[0] == "job" and reply[-1] == ["capped"]    # cap 3 stopped the 4th: said so
    taken = reply[2:-1]
    records = [dict(zip(h[::2], h[1::2])) for h, _ in taken]   # {hash, claimed id}
    assert [jid for _, jid in taken] == [high.id, mid.id, low.id]
    assert [rec["id"] for rec in records] == [high.id, mid.id, low.id]
    tokens = [rec["token"] for rec in records]
    assert tokens == ["tok:1", "tok:2", "tok:3"]
    assert scripts.claim(keys=[q.qkeys.base], args=["w1", "t2", 30, 60, 10]) == ["capped"]
    # one heartbeat renews them all; a stale token answers 0 for that job only
    answer = scripts.touch_many(keys=[q.qkeys.base],
                                args=[30, high.id, "tok:1", mid.id, "wrong", low.id, "tok:3"])
    assert answer == [1, 0, 1]


def test_processes_times_concurrency_gives_p_x_n_slots(processes, queue, r, settings):
    q = queue()
    key = f"{settings.prefix}:barrier"
    processes.worker("--customq", "default", "--processes", "2", "--concurrency", "3")
    keys = Keys(settings.prefix)
    wait_for(lambda: len(r.smembers(keys.workers)) == 2, timeout=30)
    assert {r.hget(keys.worker(n), "concurrency") for n in r.smembers(keys.workers)} == {"3"}
    jobs = [q.enqueue_call("tests.jobs:barrier", args=[settings.redis_url, key, 6])
            for _ in range(6)]
    _until(q, jobs, timeout=90)
    assert r.lrange(f"{key}:met", 0, -1) == ["1"] * 6     # 2 x 3 ran at the same time


def test_fork_server_killed_gives_its_running_jobs_back_uncounted_and_a_new_one_serves(
        processes, queue, r, settings):
    # killed from outside (the OOM killer, a neighbour): none of its jobs did it alone,
    # each goes back with no attempt counted and runs again in a server of its own
    # (tests/runtime/test_isolation.py has the job that kills it)
    q = queue()
    w, jobs, key = _running(processes, q, r, settings, 3, 2)
    [server] = fork_servers_of(w.pid)
    server.kill()
    _until(q, jobs, ENDED, timeout=60)
    assert [_status(q, j.id) for j in jobs] == ["finished"] * 3
    assert [q.fetch_job(j.id).attempts for j in jobs] == [1, 1, 1]
    assert [r.hget(q.qkeys.job(j.id), "shared_deaths") for j in jobs] == ["1"] * 3
    assert r.llen(key) == 6               # each ran twice: before the kill and after
    after = q.enqueue_call("tests.jobs:add", args=[2, 3])
    wait_for(lambda: _status(q, after.id) == "finished", timeout=20)
    assert q.fetch_job(after.id).result == 5


@pytest.mark.slow
def test_sighup_renews_the_fork_server_and_running_horses_finish(processes, queue, r, settings):
    q = queue()
    key = f"{settings.prefix}:pids"
    w = processes.worker("--customq", "default", "--concurrency", "3")

    def servers():
        return [c.pid for c in fork_servers_of(w.pid)]
    wait_for(lambda: len(servers()) == 1, timeout=20)
    [old] = servers()
    jobs = [q.enqueue_call("tests.jobs:pid_then_sleep", args=[settings.redis_url, key, 2.5])
            for _ in range(2)]
    wait_for(lambda: r.llen(key) == 2, timeout=20)
    w.send_signal(signal.SIGHUP)
    wait_for(lambda: any(pid != old for pid in servers()), timeout=20)
    after = q.enqueue_call("tests.jobs:add", args=[2, 3])
    _until(q, [*jobs, after], ENDED)
    # the horses of the old server ran to their end; the next job ran on the new server
    assert [_status(q, j.id) for j in [*jobs, after]] == ["finished"] * 3
    wait_for(lambda: servers() and old not in servers(), timeout=20)   # old one retired


SHORT_LEASE = {"FUSIONWORKER_LEASE": "3", "FUSIONWORKER_HEARTBEAT_INTERVAL": "0.5",
               "FUSIONWORKER_REAPER_INTERVAL": "0.5"}


def _freeze_then_hand_on(processes, q, r, frozen, jobs, keys, concurrency):
    """SIGSTOP the worker ``frozen`` while its horses run the ``exclusive`` jobs (each
    writing to its key): a second worker takes them over once their leases ran out;
    no job ever had two horses at once, and each frozen horse was killed."""
    first = [r.lindex(key, 0).split(":")[1] for key in keys]
    os.kill(frozen.pid, signal.SIGSTOP)      # the parent alone: nobody renews any lease
    try:
        processes.worker("--customq", "default", "--concurrency", str(concurrency),
                         env=SHORT_LEASE)
        _until(q, jobs, timeout=40)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    for key, pid in zip(keys, first):
        entries = r.lrange(key, 0, -1)
        assert "overlap" not in entries, entries          # never two horses for one job
        assert f"end:{pid}" not in entries                # each frozen horse was killed


@pytest.mark.slow
def test_a_frozen_parents_horses_each_die_at_their_own_lease(processes, queue, r, settings,
                                                             tmp_path):
    q = queue()
    keys = [f"{settings.prefix}:runs{i}" for i in range(3)]
    # a short job first: it takes the board's first entry and frees it, so the horses
    # below are killed only if each watches an entry of its own
    short = q.enqueue_call("tests.jobs:add", args=[1, 2])
    jobs = [q.enqueue_call("tests.jobs:exclusive", max_retries=5,
                           args=[settings.redis_url, key, str(tmp_path / f"m{i}"), 5.0, 0.5])
            for i, key in enumerate(keys)]
    a = processes.worker("--customq", "default", "--concurrency", "4", env=SHORT_LEASE)
    wait_for(lambda: all(r.llen(key) >= 1 for key in keys), timeout=20)
    wait_for(lambda: _status(q, short.id) == "finished", timeout=20)
    _freeze_then_hand_on(processes, q, r, a, jobs, keys, 3)


def test_after_sighup_the_horses_of_the_new_fork_server_die_at_their_lease_too(
        processes, queue, r, settings, tmp_path):
    """SIGHUP starts a new fork server; its horses watch the same deadline board as the
    old one's, so a frozen parent's horses are killed at their lease whichever server
    forked them."""
    q = queue()
    a = processes.worker("--customq", "default", "--concurrency", "2", env=SHORT_LEASE)
    _warm_up(q, r, settings, f"{settings.prefix}:warm")
    a.send_signal(signal.SIGHUP)
    wait_for(lambda: "new fork server" in processes.output(a), timeout=20)
    keys = [f"{settings.prefix}:runs{i}" for i in range(2)]
    jobs = [q.enqueue_call("tests.jobs:exclusive", max_retries=5,
                           args=[settings.redis_url, key, str(tmp_path / f"m{i}"), 5.0, 0.5])
            for i, key in enumerate(keys)]
    wait_for(lambda: all(r.llen(key) >= 1 for key in keys), timeout=20)
    _freeze_then_hand_on(processes, q, r, a, jobs, keys, 2)
