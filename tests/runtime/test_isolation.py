"""Isolation (issue #31): no job harms the job beside it, never two at once even when
the worker and its fork server both freeze.

Real Redis, real fork server, real horses, real SIGKILL and SIGSTOP; the hostile jobs
are tests/hostile_jobs.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fusionworker import Worker
from fusionworker.core.config import load_settings
from fusionworker.core.job import FailureReason, Job
from fusionworker.runtime.exits import HorseExit
from fusionworker.runtime.launch import OwnForkLauncher
from fusionworker.runtime.recorder import SHARED_DEATHS_MAX, decide
from tests.children import fork_servers_of
from tests.conftest import ROOT
from tests.runtime.test_faults import LEASE_ENV
from tests.waiting import wait_for

HOSTILE = "tests.hostile_jobs"


@pytest.mark.parametrize("horse_jobs", [1, 10])
def test_a_job_scribbling_on_every_descriptor_harms_no_sibling(
        queue, burst, settings, r, horse_jobs):
    q = queue()
    started, hits = f"{settings.prefix}:started", f"{settings.prefix}:hits"
    siblings = [q.enqueue("tests.jobs:pid_then_sleep", settings.redis_url, started, 2.0)
                for _ in range(3)]
    bad = q.enqueue(f"{HOSTILE}:scribble", settings.redis_url, hits)
    burst(settings=settings.replace(concurrency=4, horse_jobs=horse_jobs))
    for job in siblings:
        done = q.fetch_job(job.id)
        assert (done.status, done.attempts) == ("finished", 1), done.error_message
    hit = json.loads(r.lindex(hits, 0))
    assert hit and not [h for h in hit if "memfd" in h or "socket" in h or h == "board"], hit
    # what it could write into is its own report pipe: its report, unreadable, says so
    failed = q.fetch_job(bad.id)
    assert (failed.status, failed.error_type) == ("failed", "UnreadableReport")
    assert "report cannot be read" in failed.error_message


@pytest.mark.parametrize("horse_jobs", [1, 10])
def test_a_job_killing_its_fork_server_costs_its_neighbours_nothing(
        queue, burst, settings, r, horse_jobs, caplog):
    q = queue()
    started, pids = f"{settings.prefix}:started", f"{settings.prefix}:servers"
    neighbours = [q.enqueue("tests.jobs:pid_then_sleep", settings.redis_url, started, 2.0,
                            max_retries=0) for _ in range(3)]
    killer = q.enqueue(f"{HOSTILE}:kill_fork_server", settings.redis_url, pids, started, 3,
                       max_retries=3)
    burst(settings=settings.replace(concurrency=4, horse_jobs=horse_jobs))
    assert r.llen(pids) == 2          # it killed the shared server, then its own
    for job in neighbours:
        done = q.fetch_job(job.id)
        assert (done.status, done.attempts) == ("finished", 1), done.error_message
        assert r.hget(q.qkeys.job(job.id), "shared_deaths") == "1"    # it was there
    culprit = q.fetch_job(killer.id)
    assert (culprit.status, culprit.failure_reason) == ("failed", FailureReason.KILLED)
    assert "ran in alone died" in culprit.error_message
    assert culprit.attempts == 1      # the shared death was not counted, its own was
    # each of the four given back says why (not "its lease could not be renewed")
    assert caplog.text.count("interrupted by the death of the fork server") == 4, caplog.text


@pytest.mark.slow
def test_a_job_killing_its_worker_costs_its_neighbours_nothing_and_fails_as_the_culprit(
        processes, queue, r, prefix, redis_url):
    q = queue()
    started, killed = f"{prefix}:started", f"{prefix}:killed"
    ordinary = [q.enqueue("tests.jobs:pid_then_sleep", redis_url, started, 1.0, max_retries=0)
                for _ in range(16)]
    killer = q.enqueue(f"{HOSTILE}:kill_worker", redis_url, killed, started, 3, max_retries=3,
                       priority=1)
    processes.worker("-q", "default", "--processes", "2", "--concurrency", "4", env=LEASE_ENV)
    wait_for(lambda: q.fetch_job(killer.id).status == "failed", timeout=120,
             what="the killer failed")
    culprit = q.fetch_job(killer.id)
    assert (culprit.failure_reason, culprit.error_type) == (FailureReason.KILLED, "WorkerKilled")
    assert "the worker this job ran in alone died" in culprit.error_message
    assert culprit.not_retried == "not retried: its worker died while it ran there alone (the culprit)"
    assert r.llen(killed) == 2     # a worker it shared, then the one it ran in alone
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in ordinary),
             timeout=120, what="every ordinary job finished")
    beside = 0
    for job in ordinary:
        done = q.fetch_job(job.id)
        assert (done.status, done.attempts) == ("finished", 1), done.error_message
        assert done.worker_deaths <= 1       # present at the first death at most
        beside += done.worker_deaths
    assert beside >= 1                       # some were there when it killed the first


def test_a_job_present_at_k_shared_deaths_fails_saying_so():
    settings = load_settings(environ={})
    lost = HorseExit(ok=False, reason=FailureReason.KILLED, error_type="HorseKilled",
                     error_message="the fork server died while the job ran", shared=True)
    job = Job(id="j", queue="q", func="m:f", attempts=1, max_retries=1)
    assert decide(settings, job, lost).status == "requeued"
    job.shared_deaths = SHARED_DEATHS_MAX - 1
    outcome = decide(settings, job, lost)
    assert outcome.status == "failed"
    assert f"died under this job {SHARED_DEATHS_MAX} times" in outcome.error_message


def test_horses_are_the_oom_killers_first_pick(queue, burst, settings):
    q = queue()
    job = q.enqueue(f"{HOSTILE}:oom_score")
    burst(settings=settings)
    horse, server = q.fetch_job(job.id).result      # the fork server writes it, from outside
    assert horse >= 800 and horse > server


def test_a_horse_the_worker_forks_itself_raises_its_own_oom_score(queue, settings, r):
    q = queue()
    job = q.enqueue(f"{HOSTILE}:oom_score")
    # as when its fork server cannot start: the horse writes its own score before its job
    assert Worker(q.name, r, settings=settings, burst=True, defaults=False, middleware=[],
                  launcher=OwnForkLauncher).work() == 0
    horse, worker = q.fetch_job(job.id).result
    assert horse >= 800 and horse > worker


def test_a_warm_job_replacing_the_result_encoding_fails_and_its_horse_retires(
        queue, burst, settings, r):
    q = queue()
    key = f"{settings.prefix}:patched"
    before = q.enqueue(f"{HOSTILE}:pid")     # its module is preloaded: the next stay warm
    patcher = q.enqueue(f"{HOSTILE}:patch_dumps", settings.redis_url, key)
    after = [q.enqueue(f"{HOSTILE}:pid") for _ in range(3)]
    burst(settings=settings.replace(horse_jobs=10))
    failed = q.fetch_job(patcher.id)
    assert (failed.status, failed.error_type) == ("failed", "FrameworkReplaced")
    assert "fusionworker.core.codec.dumps" in failed.error_message
    patched_in = int(r.lpop(key))
    assert q.fetch_job(before.id).result == [patched_in]      # it ran in a warm horse
    results = [q.fetch_job(j.id).result for j in after]
    assert all(isinstance(res, list) and res[0] != patched_in for res in results), results


def _fork_server(worker_pid: int) -> int:
    def found() -> int | None:
        servers = fork_servers_of(worker_pid)
        return servers[0].pid if servers else None
    return wait_for(found, what="the worker's fork server")


def _both_stopped_then_handed_on(processes, q, r, job, key, ran: float) -> list[str]:
    """A worker runs ``job`` (``stamped`` into ``key``); once its first run ticked for
    ``ran`` seconds, SIGSTOP the worker and its fork server; a second worker must get
    the job only after the first horse ended by itself. Returns the entries."""
    a = processes.worker("-q", "default", env=LEASE_ENV)
    server = _fork_server(a.pid)

    def ran_for() -> bool:
        ticks = [float(e.split(":")[3]) for e in r.lrange(key, 0, -1) if e.startswith("tick:")]
        return bool(ticks) and ticks[-1] - ticks[0] >= ran
    wait_for(ran_for, timeout=30, what=f"the first run, {ran} s of it")
    stopped = [a.pid, server]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        processes.worker("-q", "default", env=LEASE_ENV)
        wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=60)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    entries = r.lrange(key, 0, -1)
    ticks = [e.split(":") for e in entries if e.startswith("tick:")]
    first = ticks[0][2]
    last_of_first = max(float(t[3]) for t in ticks if t[2] == first)
    first_of_others = min(float(t[3]) for t in ticks if t[2] != first)
    assert last_of_first < first_of_others, "two horses ran the job at once"
    assert len([e for e in entries if e.startswith("done:")]) == 1, entries   # exactly once
    return entries


@pytest.mark.slow
def test_a_horse_ends_at_its_lease_with_its_worker_and_fork_server_both_stopped(
        processes, queue, r, prefix, redis_url):
    q = queue()
    key = f"{prefix}:ticks"
    job = q.enqueue(f"{HOSTILE}:stamped", redis_url, key, "j", 8.0, 0.5, max_retries=5)
    _both_stopped_then_handed_on(processes, q, r, job, key, ran=0.0)


@pytest.mark.slow
def test_a_horse_renewed_past_its_first_deadline_still_ends_at_its_lease_when_both_stop(
        processes, queue, r, prefix, redis_url):
    """The horse's lease thread starts only at the job's first deadline (lease.py): a job
    renewed past it is watched by the thread from then on."""
    q = queue()
    key = f"{prefix}:ticks"
    job = q.enqueue(f"{HOSTILE}:stamped", redis_url, key, "j", 14.0, 0.5, max_retries=5)
    # lease 3 s, heartbeat 0.5 s: its first deadline is 2.5 s after the claim
    _both_stopped_then_handed_on(processes, q, r, job, key, ran=4.0)


def test_a_second_sigterm_after_the_worker_stopped_exits_0(settings):
    script = textwrap.dedent(f"""
        import os, signal, redis
        from fusionworker.core.config import load_settings
        from fusionworker.runtime.worker import Worker
        settings = load_settings(environ={{}}, redis_url={settings.redis_url!r},
                                 prefix={settings.prefix!r}, allowed_modules=("tests",))
        w = Worker("default", redis.Redis.from_url(settings.redis_url), settings=settings,
                   burst=True, defaults=False, middleware=[])
        assert w.work() == 0
        os.kill(os.getpid(), signal.SIGTERM)     # systemd sending it again, say
        signal.pause()
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=str(ROOT), timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]


@pytest.mark.parametrize("horse_jobs", [1, 10])
def test_a_report_or_frame_nested_past_any_parser_costs_the_worker_nothing(
        queue, burst, settings, r, horse_jobs):
    """JSON nested 20,000 deep on the job's own report pipe, as its report or as a
    progress frame, is unreadable, not a RecursionError in the worker (it killed the
    worker, and before the module was loaded there, the shared fork server)."""
    q = queue()
    said, started = f"{settings.prefix}:said", f"{settings.prefix}:started"
    neighbours = [q.enqueue("tests.jobs:pid_then_sleep", settings.redis_url, started, 1.0)
                  for _ in range(2)]
    report = q.enqueue(f"{HOSTILE}:deep_report", settings.redis_url, said)
    frame = q.enqueue(f"{HOSTILE}:deep_frame", settings.redis_url, said)
    burst(settings=settings.replace(concurrency=4, horse_jobs=horse_jobs))
    assert sorted(r.lrange(said, 0, -1)) == ["deep frame", "deep report"]   # both wrote
    for job in neighbours:
        done = q.fetch_job(job.id)
        assert (done.status, done.attempts) == ("finished", 1), done.error_message
    failed = q.fetch_job(report.id)
    assert (failed.status, failed.error_type) == ("failed", "UnreadableReport")
    after = q.fetch_job(frame.id)        # the frame is dropped; the job's report stands
    assert (after.status, after.result) == ("finished", "after the frame")


@pytest.mark.parametrize("reason", ["neighbour", "shutdown", "lease"])
def test_a_report_claiming_a_reason_only_the_worker_gives_is_the_jobs_failure(
        queue, burst, settings, r, reason):
    """A job writing ``reason: neighbour`` (or shutdown, lease) itself was given back
    uncharged at its place, run again at once, forever, ahead of every other job."""
    q = queue()
    said = f"{settings.prefix}:said"
    forger = q.enqueue(f"{HOSTILE}:forged_reason", settings.redis_url, said, reason,
                       max_retries=0)
    after = q.enqueue("tests.jobs:add", 1, 2)
    burst(settings=settings.replace(concurrency=1))
    assert r.llen(said) == 1                                    # it ran once
    failed = q.fetch_job(forger.id)
    assert (failed.status, failed.failure_reason, failed.attempts) == (
        "failed", FailureReason.EXCEPTION, 1)
    assert f"claimed the reason '{reason}', which only the worker gives" in \
        failed.error_message
    assert '["not", "text"]' in failed.error_message     # a field that is no text: its JSON
    assert q.fetch_job(after.id).result == 3


@pytest.mark.parametrize("horse_jobs", [1, 10])
def test_a_job_that_moves_its_horse_to_another_group_still_ends_at_its_time_limit(
        queue, burst, settings, r, horse_jobs):
    """A job that moves its horse into the fork server's process group (``setpgid``) is
    out of reach of a kill of the horse's own group: it ran 45 s of a 4 s limit, and
    ``job stop`` did not end it. The kills signal the horse itself too."""
    q = queue()
    said, started = f"{settings.prefix}:said", f"{settings.prefix}:started"
    neighbour = q.enqueue("tests.jobs:pid_then_sleep", settings.redis_url, started, 1.0)
    # the worker's deadline runs from the launch (timeout + grace): 3 s leave a fresh
    # horse on a loaded machine the time to start the job and move (1 s did not, once)
    stuck = q.enqueue(f"{HOSTILE}:leave_group", settings.redis_url, said, 60, timeout=2.0)
    burst(settings=settings.replace(concurrency=2, kill_grace=1.0, horse_jobs=horse_jobs))
    assert r.lrange(said, 0, -1) == ["moved"]
    done = q.fetch_job(stuck.id)
    assert (done.status, done.failure_reason) == ("failed", FailureReason.TIMEOUT)
    assert "was killed" in done.error_message
    assert q.fetch_job(neighbour.id).status == "finished"
