"""Async horses (``worker --async-per-horse K``; design.md, "Async horses"): one warm
horse runs up to K ``async def`` jobs at once, each with its own deadline, lease,
current_job() and outcome; a job that blocks the loop is named, its horse killed, its
mates given back uncharged.

Real Redis, a real fork server and real horses (the worker runs in the test process).
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import time

import pytest
from click.testing import CliRunner

from fusionworker.core.job import FailureReason
from tests.waiting import wait_for

JOBS = "tests.async_horse_jobs"


def _async(settings, k=10, concurrency=10):
    return settings.replace(horse_jobs=100, async_per_horse=k, concurrency=concurrency)


def _enqueue(q, func, *args, **options):
    return q.enqueue_call(f"{JOBS}:{func}", args=list(args), **options)


def test_k_async_jobs_of_one_horse_overlap(queue, burst, settings):
    q = queue()
    jobs = [_enqueue(q, "stamp", 0.3) for _ in range(10)]
    burst(settings=_async(settings))
    done = [q.fetch_job(j.id) for j in jobs]
    assert [j.status for j in done] == ["finished"] * 10
    assert len({j.result[0] for j in done}) == 1           # one horse ran them all
    starts, ends = [j.result[1] for j in done], [j.result[2] for j in done]
    assert max(starts) < min(ends)                          # all ten at once
    assert max(ends) - min(starts) < 10 * 0.3 / 2           # not one after another
    assert [j.result[3] for j in done] == [j.id for j in done]   # each task's current_job()


def test_default_runs_one_async_job_per_horse(queue, burst, settings):
    q = queue()
    jobs = [_enqueue(q, "stamp", 0.3) for _ in range(3)]
    burst(settings=settings.replace(horse_jobs=100, concurrency=3))
    done = [q.fetch_job(j.id) for j in jobs]
    assert [j.status for j in done] == ["finished"] * 3
    assert len({j.result[0] for j in done}) == 3


def test_current_job_and_meta_are_each_tasks_own(queue, burst, settings):
    q = queue()
    jobs = [_enqueue(q, "tagged", f"tag-{i}", 0.2) for i in range(8)]
    burst(settings=_async(settings))
    done = [q.fetch_job(j.id) for j in jobs]
    assert [j.status for j in done] == ["finished"] * 8
    assert len({j.result[0] for j in done}) == 1
    for i, j in enumerate(done):
        assert j.result[1:] == [j.id, f"tag-{i}", f"tag-{i}"]
        assert j.meta == {"tag": f"tag-{i}"}
        assert j.progress_message == f"tag-{i}"


def test_a_task_timing_out_leaves_its_mates_alone(queue, burst, settings, r):
    q = queue()
    key = f"{settings.prefix}:async:pids"
    late = _enqueue(q, "pushed_stamp", settings.redis_url, key, 30, timeout=0.5)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 1.5) for _ in range(3)]
    burst(settings=_async(settings))
    late = q.fetch_job(late.id)
    assert late.status == "failed" and late.failure_reason == FailureReason.TIMEOUT
    assert "exceeded its timeout of 0.5 s" in late.error_message
    assert "killed" not in late.error_message         # cancelled, its horse lives on
    done = [q.fetch_job(j.id) for j in mates]
    assert [j.status for j in done] == ["finished"] * 3
    assert [j.attempts for j in done] == [1, 1, 1]
    pids = [int(p) for p in r.lrange(key, 0, -1)]
    assert len(pids) == 4 and len(set(pids)) == 1      # one horse, each job ran once
    assert {j.result[0] for j in done} == set(pids)


def test_a_job_blocking_the_loop_is_named_killed_and_its_mates_go_back(
        queue, burst, settings, r, caplog):
    q = queue()
    key = f"{settings.prefix}:async:pids"
    blocker = _enqueue(q, "pushed_block", settings.redis_url, key, 30, timeout=1)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 2) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="fusionworker"):
        burst(settings=_async(settings))
    blocker = q.fetch_job(blocker.id)
    assert blocker.status == "failed"
    assert blocker.failure_reason == FailureReason.TIMEOUT
    assert "blocked the event loop" in blocker.error_message
    assert f"job {blocker.id} ({JOBS}:pushed_block) blocks the event loop" in caplog.text
    done = [q.fetch_job(j.id) for j in mates]
    assert [j.status for j in done] == ["finished"] * 3
    assert [j.attempts for j in done] == [1, 1, 1]      # given back uncharged
    assert "3 other job(s) of the horse wait" in caplog.text   # the mates were in it
    pids = [int(p) for p in r.lrange(key, 0, -1)]
    killed = pids[0]                                   # the blocker's horse
    assert len(pids) == 4 and killed not in pids[1:]   # (their tasks never got the loop)
    assert all(j.result[0] != killed for j in done)    # they ran in another horse
    assert caplog.text.count("interrupted by the kill of a job beside it") == 3


def test_sync_jobs_never_share_a_horse(queue, burst, settings):
    q = queue()
    syncs = [_enqueue(q, "sync_stamp", 0.5) for _ in range(3)]
    asyncs = [_enqueue(q, "stamp", 0.5) for _ in range(3)]
    burst(settings=_async(settings, k=10, concurrency=6))
    done_sync = [q.fetch_job(j.id) for j in syncs]
    done_async = [q.fetch_job(j.id) for j in asyncs]
    assert [j.status for j in done_sync + done_async] == ["finished"] * 6
    sync_pids = [j.result[0] for j in done_sync]
    async_pids = {j.result[0] for j in done_async}
    assert len(set(sync_pids)) == 3                     # a horse each ...
    assert len(async_pids) == 1                         # ... the async jobs share one
    assert not async_pids & set(sync_pids)
    assert max(j.result[1] for j in done_sync) < min(j.result[2] for j in done_sync)


def test_the_flag_is_in_help_and_needs_warm_horses(settings, monkeypatch):
    import os

    from fusionworker.cli import main

    # what a worker command exports for its --processes children is undone after the test
    for var in ("FUSIONWORKER_ASYNC_PER_HORSE", "FUSIONWORKER_HORSE_JOBS"):
        monkeypatch.setenv(var, "1")
        monkeypatch.delenv(var)
    runner = CliRunner()
    shown = runner.invoke(main, ["worker", "--help"])
    assert shown.exit_code == 0 and "--async-per-horse" in shown.output
    assert "FUSIONWORKER_ASYNC_PER_HORSE" in shown.output
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    refused = runner.invoke(main, ["worker", "--burst", "--async-per-horse", "4"], env=env)
    assert refused.exit_code == 2
    assert "needs --horse-jobs N > 1" in refused.output
    refused = runner.invoke(main, ["worker", "--burst"],
                            env={**env, "FUSIONWORKER_ASYNC_PER_HORSE": "4"})
    assert refused.exit_code == 2 and "needs --horse-jobs N > 1" in refused.output
    zero = runner.invoke(main, ["worker", "--burst", "--async-per-horse", "0"], env=env)
    assert zero.exit_code == 2
    assert "FUSIONWORKER_ASYNC_PER_HORSE" not in os.environ   # a refused start exports nothing
    one_wave = runner.invoke(main, ["worker", "--burst", "--async-per-horse", "4",
                                    "--horse-jobs", "4", "-q", "nothing_here"], env=env)
    # it starts (what it exports is undone after the test), saying each horse lasts one wave
    assert one_wave.exit_code == 0
    assert "--horse-jobs 4 <= --async-per-horse 4: each async horse is retired" in (
        one_wave.output)
    from fusionworker.core.config import async_hint
    assert async_hint(settings.replace(async_per_horse=100, horse_jobs=1000)) is None
    assert async_hint(settings.replace(async_per_horse=1, horse_jobs=10)) is None


def _sleeper():
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)


def test_the_fork_servers_watchdog_kills_an_async_horse_at_any_of_its_jobs_deadlines():
    import time

    from fusionworker.runtime.deadlines import DeadlineBoard, LeaseWatchdog

    board = DeadlineBoard(entries=4)
    watchdog = LeaseWatchdog(board)
    horse = _sleeper()
    try:
        now = time.monotonic()
        board.set(now + 60, 0)
        board.set(now + 60, 2)
        watchdog.watch(horse.pid, 0)
        watchdog.watch(horse.pid, 2)             # a second job of the same horse
        with watchdog.lock:
            watchdog.forget(horse.pid, 0)        # the first one ended: entry 2 still runs
        board.set(time.monotonic() + 0.3, 2)     # its renewals stopped
        wait_for(lambda: horse.poll() is not None, timeout=10)
        assert horse.returncode == -9
    finally:
        if horse.poll() is None:
            horse.kill()
        horse.wait()         # (the board stays mapped: the watchdog's thread reads it)


def test_the_horses_own_lease_watches_every_job_of_an_async_horse():
    import time

    from fusionworker.runtime.deadlines import DeadlineBoard
    from fusionworker.runtime.horse.lease import BoardView, OwnLease

    board = DeadlineBoard(entries=4)
    lease = OwnLease(BoardView(board.reader_fd()))
    now = time.monotonic()
    board.set(now + 50, 1)
    board.set(now + 20, 3)
    lease.entry = 1                        # (watch() would start the killing thread)
    lease.more.add(3)
    assert lease.nearest() == (3, now + 20)
    lease.idle(3)
    assert lease.nearest() == (1, now + 50)
    lease.more.add(3)
    lease.idle(1)                          # the first job ended: the other one is watched
    assert lease.nearest() == (3, now + 20)
    lease.idle(3)
    assert lease.nearest() == (-1, 0.0)
    board.close()


def test_a_horse_dying_with_no_culprit_known_gives_its_jobs_back_and_the_killer_pays(
        queue, burst, settings, r):
    q = queue()
    key = f"{settings.prefix}:async:pids"
    killer = _enqueue(q, "kill_own_horse", settings.redis_url, key)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 1.0) for _ in range(3)]
    burst(settings=_async(settings))
    killer = q.fetch_job(killer.id)
    assert killer.status == "failed" and killer.failure_reason == FailureReason.KILLED
    # on its next run, in a horse of its own: a job named as holding the loop (its push to
    # Redis is synchronous: a second on a loaded machine) is not the culprit of a death
    # the worker did not ask for
    assert "SIGKILL" in killer.error_message, killer.error_message
    done = [q.fetch_job(j.id) for j in mates]
    assert [j.status for j in done] == ["finished"] * 3
    assert [j.attempts for j in done] == [1, 1, 1]      # not charged for the crash
    pids = [int(p) for p in r.lrange(key, 0, -1)]
    assert pids.count(pids[0]) == 4                     # all four began in one horse
    assert len(pids) == 8                               # and each ran once more, apart


def _one_horse(queue, burst, settings, r, *calls):
    """Enqueue ``(func, *args[, options])`` calls, each given the Redis URL and a key for
    its pid first, run a burst worker of async horses: the jobs as they ended, the pids."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    jobs = [_enqueue(q, func, settings.redis_url, key, *args, **options)
            for func, args, options in calls]
    burst(settings=_async(settings))
    return [q.fetch_job(j.id) for j in jobs], [int(p) for p in r.lrange(key, 0, -1)]


def test_a_job_named_as_holding_the_loop_is_not_blamed_for_a_death_nobody_asked(
        queue, burst, settings, r):
    # the blocker holds the loop 1.5 s (named), then sleeps on it; the killer SIGKILLs
    # the horse meanwhile: the worker asked no kill, so no hold explains the death and
    # nobody is known to have caused it: both are given back, the killer pays alone
    (blocker, killer), pids = _one_horse(
        queue, burst, settings, r, ("block_then_sleep", (1.5, 2.0), {}),
        ("kill_own_horse_after", (0.5,), {}))
    assert (blocker.status, blocker.attempts) == ("finished", 1), blocker.error_message
    assert "SIGKILL" in killer.error_message
    assert pids.count(pids[0]) == 2 and len(pids) == 4     # one horse, then each alone


def test_a_job_that_blocked_the_loop_once_is_not_blamed_once_the_loop_turned_again(
        queue, burst, settings, r):
    # the blocker holds the loop 1.5 s (named), then sleeps on it; a quick mate reports
    # after the block (the loop turned again); then the hog holds the loop past its
    # timeout and the worker kills the horse: the hog pays, the blocker is given back
    (blocker, quick, hog), pids = _one_horse(
        queue, burst, settings, r, ("block_then_sleep", (1.5, 3.0), {}),
        ("pushed_stamp", (0.2,), {}), ("sleep_then_block", (0.5, 10.0), {"timeout": 2}))
    assert (blocker.status, blocker.attempts) == ("finished", 1), blocker.error_message
    assert (quick.status, quick.attempts) == ("finished", 1)
    assert hog.status == "failed" and hog.failure_reason == "timeout"
    assert pids.count(pids[0]) == 3                     # all three began in one horse


def test_every_notice_names_its_jobs_board_entry():
    from fusionworker.runtime.protocol import (
        ExitNotice,
        HandoverNotice,
        MovedNotice,
        ProgressNotice,
        StartNotice,
        take_notices,
    )

    sent = [HandoverNotice(7, 3, 1, "m:f", shared=True, cap=50),
            StartNotice(7, 4, shared=True, cap=50), ProgressNotice(7, '{"p":0.5}', 4),
            ExitNotice(7, 0, b'{"ok": true, "result": 1}', 4), ExitNotice(7, 9, b"", 3),
            MovedNotice(8, 9, 5), StartNotice(9, 6), HandoverNotice(9, 6, 1, "m:g")]
    buf = bytearray(b"".join(n.encode() for n in sent))
    assert take_notices(buf) == sent and not buf


def test_async_horses_that_retire_often_never_wedge_the_fork_server(queue, processes):
    """Horses of 3 jobs each, 20 tasks at once: a horse often exits with its last report
    lines still in its pipe, and the server reads them while it reaps it, under the lease
    watchdog's lock (that read took the lock again: the server hung for good, and with it
    the worker, blocked sending it requests)."""
    q = queue()
    jobs = [_enqueue(q, "stamp", 0.01) for _ in range(300)]
    proc = processes.worker("--customq", "default", "--burst", "--concurrency", "40",
                            "--horse-jobs", "3", "--async-per-horse", "20")
    try:
        code = proc.wait(90)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker hung: {q.count} of 300 jobs still queued\n"
                             + processes.output(proc)[-2000:]) from None
    assert code == 0, processes.output(proc)[-2000:]
    assert {q.fetch_job(j.id).status for j in jobs} == {"finished"}


def test_a_blocked_loop_never_blocks_the_fork_server_with_large_arguments(queue, processes,
                                                                           settings, r):
    """A job holds its horse's loop (4 s); jobs of 40 KB arguments come next. The server
    handed them to that horse (the one with the most jobs): the first filled most of its
    job pipe, the second blocked the server in its write until the loop turned again, and
    with it every other job of the worker. A frame the pipe cannot take now goes to
    another horse: a sync job enqueued after them starts while the loop is still held."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    blocker = _enqueue(q, "pushed_block", settings.redis_url, key, 4.0, timeout=30)
    proc = processes.worker("--customq", "default", "--concurrency", "20", "--horse-jobs",
                            "100", "--async-per-horse", "10")
    wait_for(lambda: r.llen(key))                      # its loop is held from now on
    t0 = time.time()
    data = base64.b64encode(os.urandom(30_000)).decode()    # 40 KB that do not compress
    bigs = [_enqueue(q, "big_stamp", data, 0.1) for _ in range(3)]
    sync = _enqueue(q, "sync_stamp", 0.0)
    wait_for(lambda: q.fetch_job(sync.id).status == "finished", timeout=30)
    started = q.fetch_job(sync.id).result[1]
    assert started - t0 < 2.5, f"the sync job waited {started - t0:.1f} s behind the held loop"
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in bigs + [blocker]),
             timeout=30)
    assert [q.fetch_job(j.id).result[3] for j in bigs] == [40_000] * 3
    proc.terminate()
    assert proc.wait(30) == 0, processes.output(proc)[-2000:]


@pytest.mark.parametrize("culprit", ["cancel_mates", "stop_loop", "interrupt_loop"])
def test_a_task_that_cancels_its_mates_or_their_loop_costs_them_no_attempt(
        queue, burst, settings, r, culprit):
    """A job that cancels the other tasks of its loop, stops the loop, or raises
    KeyboardInterrupt out of it: its mates' tasks were cancelled and failed for good as
    ``CancelledError``, charged. A task cancelled by nothing of its horse's ends the
    horse, reporting nothing more: its mates go back uncharged (a shared death)."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    bad = _enqueue(q, culprit, settings.redis_url, key, max_retries=0)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 2.0, max_retries=0)
             for _ in range(3)]
    burst(settings=_async(settings))
    done = [q.fetch_job(j.id) for j in mates]
    assert [j.status for j in done] == ["finished"] * 3, [j.error_type for j in done]
    assert [j.attempts for j in done] == [1, 1, 1]      # given back uncharged
    pids = [int(p) for p in r.lrange(key, 0, -1)]
    assert pids.count(pids[0]) >= 4                     # all four began in one horse
    assert q.fetch_job(bad.id).status in ("finished", "failed")   # it ended, either way


def test_a_loop_held_by_a_task_a_finished_job_left_charges_no_running_job(
        queue, burst, settings, r, caplog):
    """A task left by a job that finished holds the loop; a mate's timeout passes
    meanwhile and the horse is killed. The monitor says no running job holds it
    (``!-``), so the mate goes back uncharged (a shared death) where it failed as a
    timeout, blamed for another's task."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    planter = _enqueue(q, "orphan_blocker", settings.redis_url, key, 0.3, 10.0)
    mate = _enqueue(q, "pushed_stamp", settings.redis_url, key, 0.5, timeout=2.5,
                    max_retries=0)
    # the monitor names the holder once the loop is held BLOCKED (1 s), from 0.3 s on:
    # a grace of 6 s leaves it 5.5 s before the kill on a loaded machine (1 s, then 3 s,
    # left too little under a doubly loaded CI run: the mate charged its timeout); the
    # planter's task holds the loop 10 s, past the kill at 2.5 + 6 s. The mate's second
    # run, in a new horse, has 2 s to spare over its 0.5 s: a timeout of 1 s (0.5 s to
    # spare for the horse's first Redis connection) ran out once under a loaded CI run
    burst(settings=_async(settings).replace(kill_grace=6.0))
    assert q.fetch_job(planter.id).status == "finished"
    done = q.fetch_job(mate.id)
    assert (done.status, done.attempts) == ("finished", 1), (done.status, done.error_message)
    assert r.hget(q.qkeys.job(mate.id), "shared_deaths") == "1"
    pids = [int(p) for p in r.lrange(key, 0, -1)]
    assert len(pids) == 3 and pids[0] == pids[1] != pids[2]   # it ran again, elsewhere


def test_a_retired_horse_exits_though_a_task_a_job_left_swallows_every_cancel(
        queue, processes, settings, r):
    """The horse's loop is not torn down by cancelling what is left (asyncio.run waits
    for those tasks: one that swallows every cancel kept a retired horse alive for good,
    beside its running worker)."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    job = _enqueue(q, "leave_stubborn_task", settings.redis_url, key)
    _enqueue(q, "pushed_stamp", settings.redis_url, key, 0.1)
    worker = processes.worker("-q", "default", "--concurrency", "2", "--horse-jobs", "2",
                              "--async-per-horse", "2")
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=30,
             what="the job that left the task finished")
    pid = q.fetch_job(job.id).result

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(gone, timeout=30, what="the retired async horse exited")
    assert worker.poll() is None                       # while its worker runs on


def test_a_job_writing_report_lines_for_its_mates_forges_no_outcome(queue, burst, settings,
                                                                    r):
    """A report line on a mate's entry that does not name the mate's job (a job wrote
    it) ended the mate as "finished", with the forger's result, while it still ran. The
    horse is killed instead; its jobs go back uncharged and run again apart."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    forger = _enqueue(q, "forge_mates", settings.redis_url, key)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 1.0, max_retries=0)
             for _ in range(3)]
    burst(settings=_async(settings))
    done = [q.fetch_job(j.id) for j in mates]
    assert [j.status for j in done] == ["finished"] * 3
    assert all(isinstance(j.result, list) for j in done), [j.result for j in done]
    assert [j.attempts for j in done] == [1, 1, 1]
    assert q.fetch_job(forger.id).result != "forged"


def test_a_task_factory_a_job_sets_keeps_no_job_of_the_horse_from_starting(
        queue, burst, settings, r):
    """A job's ``loop.set_task_factory(...)`` stayed on the horse's loop: the next jobs
    sent to it were never started (their timeout failed them). The horse makes its job
    tasks itself, puts its factory back after the job, and retires."""
    q = queue()
    key = f"{settings.prefix}:async:pids"
    setter = _enqueue(q, "raising_factory", settings.redis_url, key, 1.5)
    mates = [_enqueue(q, "pushed_stamp", settings.redis_url, key, 0.2, timeout=5,
                      max_retries=0) for _ in range(3)]
    burst(settings=_async(settings, k=4, concurrency=2))
    assert q.fetch_job(setter.id).status == "finished"
    done = [q.fetch_job(j.id) for j in mates]
    assert [j.status for j in done] == ["finished"] * 3, [j.error_message for j in done]
    pids = [int(p) for p in r.lrange(key, 0, -1)]
    assert pids.count(pids[0]) >= 2            # a mate ran in the setter's horse
