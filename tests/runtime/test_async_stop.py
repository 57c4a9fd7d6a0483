"""A stop (``job stop``) of one job of an async horse (``worker --async-per-horse K``;
design.md, "Async horses", "A stop of one async job"): its task is cancelled, its mates
run on in the same horse; a task that does not end within the kill escalation gets its
horse killed (the mates given back uncharged). Each crash point of that sequence here.

Real Redis, real worker processes, a real fork server and real horses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from fusionworker.core.job import FailureReason, JobStatus
from fusionworker.events.reader import job_history
from tests.waiting import WaitTimeout, wait_for

JOBS = "tests.async_horse_jobs"
ASYNC = ("--concurrency", "10", "--horse-jobs", "100", "--async-per-horse", "10")


def _enqueue(q, func, *args, **options):
    return q.enqueue_call(f"{JOBS}:{func}", args=list(args), **options)


def _pids(r, key):
    return [int(p) for p in r.lrange(key, 0, -1) if p.isdigit()]


def _stopped(q, job, timeout=30):
    try:
        wait_for(lambda: job.get_status() == JobStatus.STOPPED, timeout=timeout,
                 what=f"job {job.id} stopped")
    except WaitTimeout:
        job.refresh()     # what it became instead: the failure says it
        raise AssertionError(f"job {job.id} not stopped: {job.get_status()}, attempt "
                             f"{job.attempts}, {job.failure_reason}, {job.error_message!r}, "
                             f"history {[d['event'] for _, d in job_history(q.connection, q.settings.prefix, q.name, job.id)]}") from None
    job.refresh()
    assert job.failure_reason == FailureReason.STOPPED and job.attempts == 1
    return job


def _finished(q, jobs, timeout=60, output=None):
    try:
        wait_for(lambda: all(q.fetch_job(j.id).status in ("finished", "failed") for j in jobs),
                 timeout=timeout, what="the mates ended")
        if any(q.fetch_job(j.id).status != "finished" for j in jobs):
            raise WaitTimeout("a mate failed")
    except WaitTimeout:
        seen = [(j.id, str(j.status), j.attempts, j.error_message,
                 [d["event"] for _, d in job_history(q.connection, q.settings.prefix, q.name,
                                                      j.id)])
                for j in (q.fetch_job(j.id) for j in jobs)]
        raise AssertionError(f"the mates did not finish: {seen}\n"
                             f"{output() if output else ''}") from None
    return [q.fetch_job(j.id) for j in jobs]


def _three_in_one_horse(q, processes, settings, r, func, mate_seconds):
    """A job of ``func`` and two mates of ``mate_seconds`` running in one async horse of
    a worker started for them: (pids key, target, mates, worker process, the horse)."""
    key = f"{settings.prefix}:async:pids"
    target = _enqueue(q, func, settings.redis_url, key, 60)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, mate_seconds)
             for _ in range(2)]
    proc = processes.worker("--customq", "default", *ASYNC)
    wait_for(lambda: r.llen(key) == 3, what="the three jobs running in their horse")
    return key, target, mates, proc, _pids(r, key)[0]


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_stop_cancels_only_its_own_task_and_the_mates_run_on(queue, processes, settings, r):
    q = queue()
    key, target, mates, proc, horse = _three_in_one_horse(
        q, processes, settings, r, "pushed_stamp", 4.0)
    t0 = time.monotonic()
    q.stop(target.id)
    target = _stopped(q, target)
    assert time.monotonic() - t0 < 1.5            # its cancel, not the kill escalation
    assert "its task was cancelled" in target.error_message
    assert _alive(horse)                          # the horse runs on with the mates
    assert {q.fetch_job(j.id).status for j in mates} == {"started"}
    done = _finished(q, mates)
    assert [j.attempts for j in done] == [1, 1]
    assert {j.result[0] for j in done} == {horse}  # the same horse, never killed
    assert _pids(r, key) == [horse] * 3            # nobody ran twice
    assert "cancelling its task in its async horse" in processes.output(proc)


def test_a_task_that_swallows_the_cancel_gets_its_horse_killed_and_the_mates_go_back(
        queue, processes, settings, r):
    q = queue()
    key, target, mates, proc, horse = _three_in_one_horse(
        q, processes, settings, r, "stubborn", 6.0)
    t0 = time.monotonic()
    q.stop(target.id)
    wait_for(lambda: "cancelled" in r.lrange(key, 0, -1), what="the cancel reached the task")
    target = _stopped(q, target)
    assert time.monotonic() - t0 >= 1.5           # killed at the escalation, not before
    assert "its horse was killed" in target.error_message
    done = _finished(q, mates)
    assert [j.attempts for j in done] == [1, 1]   # given back uncharged, run again
    assert all(j.result[0] != horse for j in done)
    assert not _alive(horse)
    pids = _pids(r, key)
    assert pids.count(horse) == 3 and len(pids) == 5
    assert f"Job {target.id} did not end within 2 s of its task's cancel" in (
        processes.output(proc))


def test_a_task_that_swallows_the_cancel_and_returns_ends_stopped(queue, processes, settings,
                                                                  r):
    q = queue()
    key = f"{settings.prefix}:async:pids"
    target = _enqueue(q, "swallow_and_return", settings.redis_url, key, 60)
    mate = _enqueue(q, "pushed_stamp", settings.redis_url, key, 3.0)
    processes.worker("--customq", "default", *ASYNC)
    wait_for(lambda: r.llen(key) == 2, what="both jobs running in their horse")
    horse = _pids(r, key)[0]
    t0 = time.monotonic()
    q.stop(target.id)
    target = _stopped(q, target)
    assert time.monotonic() - t0 < 1.5            # its own end, not the kill escalation
    assert "the job caught it and returned" in target.error_message
    assert target.result is None
    done = _finished(q, [mate])[0]
    assert done.attempts == 1 and done.result[0] == horse


def test_a_cancel_racing_the_jobs_own_end_records_one_outcome(queue, processes, settings, r):
    """Each job asks for its own stop, then returns after 0 to 50 ms: its report and the
    cancel cross; whichever came first is its one outcome (finished or stopped)."""
    q = queue()
    delays = [0, 0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05] * 2
    jobs = [_enqueue(q, "stop_self", settings.redis_url, settings.prefix, d) for d in delays]
    mate = _enqueue(q, "stamp", 3.0)
    processes.worker("--customq", "default", "--concurrency", "20", "--horse-jobs", "100",
                     "--async-per-horse", "20")
    wait_for(lambda: all(q.fetch_job(j.id).status in ("finished", "stopped") for j in jobs),
             timeout=30, what="every job ended")
    time.sleep(1.0)                   # a second outcome, if any, would be recorded by now
    statuses = []
    for job in jobs:
        job = q.fetch_job(job.id)
        statuses.append(job.status)
        assert job.attempts == 1
        ends = [doc["event"] for _, doc in job_history(r, settings.prefix, q.name, job.id)
                if doc["event"] in ("completed", "failed", "retry", "requeued")]
        assert len(ends) == 1, ends
        assert ends == (["completed"] if job.status == "finished" else ["failed"])
        if job.status == "stopped":
            assert job.failure_reason == FailureReason.STOPPED
    assert "stopped" in statuses      # (the cancel did win some of the races)
    done = _finished(q, [mate])[0]
    assert done.attempts == 1


def test_a_cancel_that_comes_before_the_task_began_stops_it_unstarted():
    """The job's frame and its cancel frame reach the horse together; its loop is held
    meanwhile (a mate's blocking call), so it reads both at once: the task is stopped
    before it began. Driven through the worker's launcher, which writes both frames."""
    from fusionworker.core.job import Job
    from fusionworker.runtime.launch import ForkServerLauncher
    from fusionworker.runtime.slot import SlotState
    from tests.runtime.test_forkserver import spec, until_done

    ln = ForkServerLauncher(spec(warm=lambda: {"horse_jobs": 100, "async_per_horse": 10}))
    ln.start()
    try:
        hold = Job(id="hold", queue="q", func=f"{JOBS}:block", args=[1.0], kwargs={},
                   timeout=30)
        late = Job(id="late", queue="q", func=f"{JOBS}:stamp", args=[5.0], kwargs={},
                   timeout=30)
        warm = [Job(id=f"w{i}", queue="q", func=f"{JOBS}:{func}", args=[0], kwargs={},
                    timeout=30) for i, func in enumerate(("block", "stamp"))]
        first = ln.launch(warm, [0, 1], lambda: None)     # both functions: async, one horse
        until_done(ln, first)
        [held] = ln.launch([hold], [2], lambda: None)
        assert held.pid == first[0].pid == first[1].pid
        time.sleep(0.2)                        # its loop is held from now on, for 1 s
        [stopped] = ln.launch([late], [3], lambda: None)
        assert stopped.state is SlotState.RUNNING and stopped.pid == held.pid   # written
        stopped.stop()
        assert stopped.cancel_at is not None   # a cancel, not a kill
        until_done(ln, [held, stopped])
        exit_ = stopped.outcome(cold=False)
        assert exit_.reason == FailureReason.STOPPED, exit_
        assert "before it started" in (exit_.error_message or "")
        ok = held.outcome(cold=False)
        assert ok.ok and ok.result_json == str(held.pid)
    finally:
        ln.close()


def _fork_server(worker_pid):
    for child in psutil.Process(worker_pid).children():
        if "fusionworker fork server" in " ".join(child.cmdline()):
            return child
    raise AssertionError("no fork server")


def test_a_stop_needs_no_fork_server_and_its_death_after_costs_the_mates_nothing(
        queue, processes, settings, r):
    """The worker writes the cancel frame to the horse itself: a stop works while the
    fork server is frozen. Crash point: the fork server dies after the stop: the horse
    dies with it; the stopped job stays stopped, its mates are given back (shared, as at
    any fork server's death) and run again."""
    q = queue()
    key, target, mates, proc, horse = _three_in_one_horse(
        q, processes, settings, r, "pushed_stamp", 5.0)
    server = _fork_server(proc.pid)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        q.stop(target.id)
        target = _stopped(q, target)
        assert "its task was cancelled" in target.error_message, target.error_message
    finally:
        os.kill(server.pid, signal.SIGKILL)
    done = _finished(q, mates)
    assert [j.attempts for j in done] == [1, 1]
    assert all(j.result[0] != horse for j in done)
    assert _pids(r, key).count(horse) == 3 and len(_pids(r, key)) == 5   # target: once
    assert [r.hget(q.qkeys.job(j.id), "shared_deaths") for j in done] == ["1", "1"]


def test_a_horse_dying_after_the_cancel_frame(queue, processes, settings, r):
    """Crash point: the cancel reached the task, which kills its own horse. The stopped
    job ends stopped; its mates died because of the stop: given back uncharged."""
    q = queue()
    key, target, mates, proc, horse = _three_in_one_horse(
        q, processes, settings, r, "die_on_cancel", 3.0)
    q.stop(target.id)
    target = _stopped(q, target)
    assert "dying" in r.lrange(key, 0, -1)        # it died of the cancel, not of a kill
    done = _finished(q, mates, output=lambda: processes.output(proc))
    assert [j.attempts for j in done] == [1, 1]
    assert all(j.result[0] != horse for j in done)
    assert not _alive(horse)
    assert [r.hget(q.qkeys.job(j.id), "shared_deaths") for j in done] == [None, None]


def _stop_once_a_hold_is_named(q, processes, settings, r, first, second, held_by):
    """Two jobs in one async horse, ``first`` then ``second`` ((func, *args) each); the
    horse names ``held_by`` (0 or 1) as holding its loop, then the job ``first`` is
    stopped and ends so. The mate of the stopped job, which must go back uncharged and
    finish, and the worker's output."""
    key = f"{settings.prefix}:async:pids"
    jobs = [_enqueue(q, func, settings.redis_url, key, *args) for func, *args in (first,
                                                                                  second)]
    proc = processes.worker("--customq", "default", *ASYNC)
    wait_for(lambda: r.llen(key) == 2, what="both jobs running in their horse")
    holder = jobs[held_by].id
    wait_for(lambda: f"job {holder}" in processes.output(proc)
             and "blocks the event loop" in processes.output(proc), what="the hold named")
    q.stop(jobs[0].id)
    target = _stopped(q, jobs[0])
    (mate,) = _finished(q, jobs[1:], output=lambda: processes.output(proc))
    assert mate.attempts == 1                     # given back uncharged, run again
    assert "EventLoopBlocked" not in processes.output(proc)
    return target, r.lrange(key, 0, -1)


def test_a_mate_named_as_holding_the_loop_is_not_blamed_when_the_stopped_job_kills_the_horse(
        queue, processes, settings, r):
    """Crash point (found under load, where a mate's own Redis call at its start held
    the loop past the naming threshold): a mate was named as holding the loop, then the
    stopped job's task kills its horse at the cancel (the loop reads the cancel once the
    hold ends). The worker sent that horse no signal, so the hold explains nothing: the
    stopped job is the culprit and the mate goes back uncharged (it was failed as having
    blocked the loop)."""
    _, pushed = _stop_once_a_hold_is_named(
        queue(), processes, settings, r, ("die_on_cancel", 60),
        ("block_then_sleep", 1.5, 2.0), held_by=1)
    assert "dying" in pushed                      # it killed its horse at the cancel


def test_a_stopped_job_that_holds_the_loop_ends_stopped_and_its_mate_goes_back(
        queue, processes, settings, r):
    """The stopped job itself holds the loop (named), so its cancel is never read: the
    horse is killed at the escalation. Its outcome is the stop (design.md, "A stop of
    one async job"), not a blocked loop; its mate goes back uncharged."""
    target, _ = _stop_once_a_hold_is_named(
        queue(), processes, settings, r, ("sleep_then_block", 0.2, 30),
        ("pushed_stamp", 3.0), held_by=0)
    assert "its horse was killed" in target.error_message


def test_a_stop_asked_before_the_fork_server_answered_is_a_cancel_once_it_does(
        queue, processes, settings, r):
    """The stop comes while the job's slot waits for the server's answer (the server is
    stopped): the worker remembers it, and once the answer says an async horse runs the
    job, it asks for the cancel instead of killing that horse."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 4.0) for _ in range(2)]
    proc = processes.worker("--customq", "default", *ASYNC)
    wait_for(lambda: r.llen(key) == 2, what="the mates running in their horse")
    horse = _pids(r, key)[0]
    server = _fork_server(proc.pid)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        target = _enqueue(q, "pushed_stamp", settings.redis_url, key, 60)
        wait_for(lambda: target.get_status() == JobStatus.STARTED, what="claimed, not answered")
        q.stop(target.id)
        wait_for(lambda: f"stop of job {target.id} asked" in processes.output(proc),
                 what="the stop heard")
    finally:
        os.kill(server.pid, signal.SIGCONT)
    target = _stopped(q, target)
    done = _finished(q, mates)
    assert [j.attempts for j in done] == [1, 1]
    assert {j.result[0] for j in done} == {horse}     # the horse was never killed
    assert set(_pids(r, key)) == {horse}


def test_sync_jobs_and_the_workers_own_horses_are_still_killed(queue, processes, settings, r):
    """A sync job of a worker with async horses (a warm horse of its own), and a horse the
    worker forked itself (no fork server: no async horse, no mates): a stop kills it."""
    from fusionworker.core.job import Job
    from fusionworker.runtime.slot import Slot

    q = queue()
    key = f"{settings.prefix}:pids"
    proc = processes.worker("--customq", "default", *ASYNC)
    job = q.enqueue("tests.jobs:pid_then_sleep", settings.redis_url, key, 60)
    pid = int(wait_for(lambda: r.lindex(key, 0), what="the sync job's horse"))
    q.stop(job.id)
    _stopped(q, job)
    assert "its horse was killed" in job.error_message and not _alive(pid)
    assert f"stop of job {job.id} asked; killing its horse" in processes.output(proc)

    own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                           start_new_session=True)
    try:
        slot = Slot(Job(id="own", queue="q", func="f", args=[], kwargs={}), own.pid)
        slot.stop()
        assert slot.cancel_at is None and slot.kill_at is not None
        assert own.wait(10) == -signal.SIGTERM
    finally:
        if own.poll() is None:
            own.kill()
            own.wait()
