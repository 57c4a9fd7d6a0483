"""Stopping a job (``job stop``, ``Job.stop()``, RQ's ``send_stop_job_command``): the
worker running it kills its horse, the job ends ``stopped`` with no retry, its
``on_stopped`` callback runs and the slot takes the next job; a job not started yet is
canceled. The crash points of docs/design.md, "Stopping a running job", each here."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from fusionworker import Retry
from fusionworker.core.job import FailureReason, JobStatus
from fusionworker.exceptions import InvalidOperation, JobFailed, NoSuchJob
from tests.cli.test_cli import cli  # noqa: F401 - the fixture
from tests.waiting import wait_for


def _horse(r, key):
    return int(wait_for(lambda: r.lindex(key, 0), what="the horse's pid"))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_stopped_job_is_killed_by_its_worker_and_ends_stopped(queue, processes, redis_url, r,
                                                                 cli):  # noqa: F811
    """The heartbeat here comes once a minute: only the stop's message can kill it in time."""
    q = queue()
    key = f"{q.settings.prefix}:pids"
    proc = processes.worker("-q", q.name, env={"FUSIONWORKER_HEARTBEAT_INTERVAL": "60",
                                               "FUSIONWORKER_LEASE": "200"})
    job = q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600, retry=Retry(max=3),
                    on_stopped="tests.jobs:echo")
    after = q.enqueue("tests.jobs:add", 2, 3)
    pid = _horse(r, key)
    # asked; its worker kills it (so fast that the job may read stopped already)
    assert job.stop().status in (JobStatus.STARTED, JobStatus.STOPPED)
    wait_for(lambda: job.get_status() == JobStatus.STOPPED, what="the job stopped")
    assert _gone(pid)
    job.refresh()
    assert (job.failure_reason, job.error_type, job.attempts) == (
        FailureReason.STOPPED, "JobStopped", 1)            # no retry, though Retry(max=3)
    assert job.id in q.failed_job_registry
    with pytest.raises(JobFailed, match="stopped"):
        job.wait(timeout=1)
    result = job.latest_result()                 # RQ's Result.Type.STOPPED
    assert result is not None and (result.type, result.return_value) == ("stopped", None)
    assert result.exc_string and "JobStopped" in result.exc_string
    # the slot serves the next job; the on_stopped callback ran with the job's id
    assert after.wait(timeout=30).result == 5
    callback = wait_for(lambda: q.fetch_job(f"{job.id}:on_stopped"), what="on_stopped")
    assert callback.wait(timeout=30).result == {"args": [job.id], "kwargs": {}}
    assert q.fetch_job(f"{job.id}:on_failure") is None
    assert f"stop of job {job.id} asked" in processes.output(proc)
    # `job list --status stopped` finds it; listing every status shows it once
    assert job.id in cli("job", "list", "--queue", q.name, "--status", "stopped").output
    rows = cli("job", "list", "--queue", q.name).output.splitlines()
    assert [row.split()[0] for row in rows].count(job.id) == 1     # (its callback's id differs)


def test_requeue_all_takes_stopped_jobs_too_and_the_stop_is_not_asked_again(
        queue, processes, redis_url, r, cli):  # noqa: F811
    """A stopped job sits in the failed registry (``job list -s failed`` shows it), as in
    RQ's FailedJobRegistry: ``requeue --all`` requeues it with the failed ones, and its
    rerun is not killed by the stop asked of the attempt before (the heartbeat, every
    0.5 s here, would have). It dropped the stopped job from the registry, requeued
    nothing, and left it listed nowhere. An entry whose record expired is dropped."""
    q = queue()
    key = f"{q.settings.prefix}:pids"
    processes.worker("-q", q.name)
    job = q.enqueue("tests.jobs:pid_then_sleep_first", redis_url, key, 1, 600, 1.5)
    failed = q.enqueue("tests.jobs:boom", max_retries=0)
    _horse(r, key)
    job.stop()
    wait_for(lambda: job.get_status() == JobStatus.STOPPED, what="the job stopped")
    wait_for(lambda: failed.get_status() == JobStatus.FAILED, what="the other job failed")
    r.zadd(q.qkeys.failed, {"expired-record": 1})         # its record gone (failure_ttl)
    assert "Requeued 2 job(s)" in cli("requeue", "--all", "--queue", q.name).output
    wait_for(lambda: r.zrange(q.qkeys.failed, 0, -1) == [failed.id],   # it fails again
             what="the failed job failed again; the stale entry dropped")
    wait_for(lambda: job.get_status() == JobStatus.FINISHED, timeout=20,
             what="the requeued stopped job ran to its end")
    assert r.llen(key) == 2 and job.get_status() == JobStatus.FINISHED


def test_a_stop_whose_message_was_missed_is_heard_at_the_heartbeat(queue, processes,
                                                                    redis_url, r):
    """Crash point: the worker's stop connection was down when the message went out. The
    record's mark alone (as stop.lua leaves it) makes the heartbeat kill the horse."""
    q = queue()
    key = f"{q.settings.prefix}:pids"
    processes.worker("-q", q.name)
    job = q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600)
    pid = _horse(r, key)
    wait_for(lambda: job.get_status() == JobStatus.STARTED)
    r.hset(q.qkeys.job(job.id), "stop_requested", "1")   # the mark, no message
    wait_for(lambda: job.get_status() == JobStatus.STOPPED, what="stopped at the heartbeat")
    assert _gone(pid) and job.refresh().attempts == 1


def test_a_worker_that_dies_before_the_kill_leaves_the_job_stopped_not_retried(
        queue, processes, redis_url, r):
    """Crash point: the worker dies (SIGKILL; its horse follows) with the stop asked and
    not carried out. The reaper of another worker ends the job stopped, not requeued."""
    q = queue()
    key = f"{q.settings.prefix}:pids"
    fast = {"FUSIONWORKER_LEASE": "1.5"}
    first = processes.worker("-q", q.name, env=fast)
    job = q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600, max_retries=3)
    pid = _horse(r, key)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(lambda: _gone(pid), what="the horse died with its worker")
    assert q.stop(job.id).status == JobStatus.STARTED     # marked; nobody to kill it
    processes.worker("-q", q.name, env=fast)              # its reaper takes it back
    wait_for(lambda: job.get_status() == JobStatus.STOPPED, what="reaped as stopped")
    job.refresh()
    assert job.failure_reason == FailureReason.STOPPED and job.attempts == 1
    assert r.llen(key) == 1                                # it never ran again


def test_stopping_a_job_not_started_cancels_it(queue):
    q = queue()
    waiting = q.enqueue("tests.jobs:add", 1, 2)
    later = q.enqueue_in(600, "tests.jobs:add", 1, 2)
    assert waiting.stop().status == JobStatus.CANCELED
    assert q.stop(later.id).status == JobStatus.CANCELED
    with pytest.raises(InvalidOperation, match="ended already"):
        q.stop(waiting.id)
    with pytest.raises(NoSuchJob):
        q.stop("no-such-job")


def test_rq_send_stop_job_command(queue, r, settings):
    from fusionworker.command import send_stop_job_command

    q = queue()
    job = q.enqueue("tests.jobs:add", 1, 2)
    assert send_stop_job_command(r, job.id, settings=settings).status == JobStatus.CANCELED
    with pytest.raises(NoSuchJob):
        send_stop_job_command(r, "nope", settings=settings)


def test_cli_job_stop(queue, cli):  # noqa: F811
    q = queue()
    job = q.enqueue("tests.jobs:add", 1, 2)
    result = cli("job", "stop", job.id)
    assert result.exit_code == 0 and "Canceled" in result.output
    again = cli("job", "stop", job.id, code=1)
    assert "ended already" in again.output
