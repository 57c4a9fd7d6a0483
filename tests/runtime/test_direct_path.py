"""The direct path (design.md, "The direct path"): once a warm horse exists, the
worker writes its jobs and reads its reports itself; the fork server forks, reaps and
keeps its lease watchdog. Each crash point of the design, with real processes.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fusionworker.core.job import FailureReason, Job
from fusionworker.runtime.launch import ForkServerLauncher
from fusionworker.runtime.protocol import unread
from fusionworker.runtime.slot import Slot, SlotState
from tests.runtime.test_forkserver import spec, until_done
from tests.waiting import gone, processes_of, wait_for

JOBS = "tests.jobs"


def _warm(**extra: int) -> dict[str, int]:
    return {"horse_jobs": 10, "max_rss_mib": 0, **extra}


@pytest.fixture
def warm() -> Iterator[ForkServerLauncher]:
    ln = ForkServerLauncher(spec(warm=_warm))
    ln.start()
    yield ln
    ln.close()


def _launch(ln: ForkServerLauncher, func: str, *args: Any, entries: tuple[int, ...] = (0,),
            timeout: float = 30, module: str = JOBS) -> list[Slot]:
    jobs = [Job(id=f"j{entry}-{time.monotonic_ns()}", queue="q", func=f"{module}:{func}",
                args=list(args), timeout=timeout) for entry in entries]
    return ln.launch(jobs, list(entries), lambda: None)


def _handed(ln: ForkServerLauncher, count: int = 1) -> list[int]:
    """Run ``count`` jobs at once until their horses are handed to the worker: their pids."""
    slots = _launch(ln, "noop", entries=tuple(range(count)))
    until_done(ln, slots)
    assert all(s.outcome(cold=False).ok for s in slots)
    pool = ln.pools[id(ln.server)]
    wait_for(lambda: len(pool.idle) == count, what="the handed horses")
    return [s.pid for s in slots]


def test_a_warm_horses_later_jobs_go_from_the_worker_to_the_horse(warm) -> None:
    [horse] = _handed(warm)
    [slot] = _launch(warm, "identity", 5)
    # bound at once: no request went to the fork server, no answer is awaited
    assert slot.pid == horse and slot.state is SlotState.RUNNING and not warm.asked
    until_done(warm, [slot])
    exit_ = slot.outcome(cold=False)
    assert exit_.ok and exit_.result_json == "5"
    assert warm.pools[id(warm.server)].idle[0].pid == horse     # it stays, idle in the worker


def test_a_job_whose_frame_passes_the_direct_limit_goes_through_the_server(warm) -> None:
    """A frame the horse's pipe might not take in one write (over DIRECT_MAX) is the
    fork server's to hand (the worker never blocks on a pipe); the next small job goes
    to the handed horse again."""
    from fusionworker.runtime.direct import DIRECT_MAX

    _handed(warm)
    text = "x" * (DIRECT_MAX + 1000)
    [big] = _launch(warm, "identity", text)
    assert big.state is SlotState.ASKED and warm.asked       # a request to the server
    until_done(warm, [big])
    exit_ = big.outcome(cold=False)
    assert exit_.ok and exit_.result_json == f'"{text}"'
    pool = warm.pools[id(warm.server)]
    wait_for(lambda: pool.idle, what="an idle handed horse")
    [small] = _launch(warm, "identity", 7)
    assert small.state is SlotState.RUNNING and small.pid in pool.by_pid
    until_done(warm, [small])
    assert small.outcome(cold=False).result_json == "7"


def test_the_handed_pipes_are_close_on_exec(warm) -> None:
    _handed(warm, 2)
    for horse in warm.pools[id(warm.server)].idle:
        for fd in (horse.job_w, horse.fd):
            assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC


@pytest.mark.parametrize(("func", "args", "reason"), [
    ("segfault", (), "segfault"), ("hard_exit", (3,), "exit"), ("kill_self", (), None)])
def test_a_handed_horse_that_dies_in_its_job_keeps_the_reason(warm, func, args, reason) -> None:
    [horse] = _handed(warm)
    [slot] = _launch(warm, func, *args)
    assert slot.pid == horse
    until_done(warm, [slot])          # its status comes from the server (GoneNotice)
    exit_ = slot.outcome(cold=False)
    assert not exit_.ok
    if reason is not None:
        assert exit_.reason == reason
    else:
        assert "SIGKILL" in (exit_.error_message or "")
    assert not warm.pools[id(warm.server)].by_pid      # dropped, never reused


def _took_job(ln: ForkServerLauncher, pid: int) -> bool:
    """The handed horse ``pid`` read the job the worker wrote on its job pipe."""
    return not unread(ln.pools[id(ln.server)].by_pid[pid].job_w)


def test_a_fork_server_death_under_direct_jobs_costs_them_nothing(warm) -> None:
    horses = _handed(warm, 2)
    slots = _launch(warm, "sleep", 30, entries=(0, 1))
    assert sorted(s.pid for s in slots) == sorted(horses)
    wait_for(lambda: all(_took_job(warm, pid) for pid in horses), what="both took their job")
    procs = processes_of(horses)
    assert warm.server is not None and warm.server.proc is not None
    warm.server.proc.kill()
    until_done(warm, slots, timeout=20)
    for slot in slots:
        exit_ = slot.outcome(cold=False)
        assert exit_.reason == FailureReason.KILLED and exit_.shared   # given back, uncharged
    wait_for(lambda: gone(procs), what="the horses died with their fork server")
    assert not warm.pools        # their pipes are closed
    [after] = _launch(warm, "identity", 1)       # a new fork server serves
    until_done(warm, [after])
    assert after.outcome(cold=False).ok


def test_a_job_handed_on_after_its_fork_server_died_ends_with_that_death(
        warm, tmp_path) -> None:
    """A handed horse killed with its job unread in its pipe, its fork server dead too,
    and the turn reads the horses' pipes before the server's socket (a select() that
    saw them first): the job is not asked of a server started again in place, under
    which the slots of the dead one would wait for notices that never come; every job
    of the dead server ends as its death (given back, uncharged); or, while the server
    is still dying (its main thread gone, and its horses with it, a thread of it still
    holding its socket), the job that never ran is asked of it, and once more of a new
    server when its end is read, as any unanswered request: it runs there, once."""
    horses = _handed(warm, 2)
    os.kill(horses[0], signal.SIGSTOP)           # it cannot read the job written to it
    slots = _launch(warm, "sleep_first", str(tmp_path), 30, entries=(0, 1))
    assert sorted(s.pid for s in slots) == sorted(horses)
    pool = warm.pools[id(warm.server)]
    wait_for(lambda: _took_job(warm, horses[1]), what="the running horse took its job")
    procs = processes_of(horses)
    assert warm.server is not None and warm.server.proc is not None
    warm.server.proc.kill()
    wait_for(lambda: gone(procs), what="the horses died with their fork server")
    unread = next(s for s in slots if s.pid == horses[0])
    warm.poll([pool.ep])                         # the pool first: the server's EOF unread
    until_done(warm, slots, timeout=20)
    for slot in slots:
        exit_ = slot.outcome(cold=False)
        if slot is unread and exit_.ok:          # asked again: it ran once, elsewhere
            assert slot.pid not in horses and slot.asked_again
            continue
        assert exit_.reason == FailureReason.KILLED and exit_.shared   # given back, uncharged


def test_the_fork_server_kills_a_handed_horse_at_its_board_deadline() -> None:
    """The board says whose entry it is (the worker writes the owner): the server's
    watchdog kills the handed horse at the deadline; the horse is stopped (its own
    lease cannot act) and the worker's side here polices nothing."""
    ln = ForkServerLauncher(spec(warm=_warm))
    ln.start()
    try:
        [horse] = _handed(ln)
        ln.set_deadline(0, time.monotonic() + 60)
        [slot] = _launch(ln, "sleep", 30)
        assert slot.pid == horse
        os.kill(horse, signal.SIGSTOP)
        ln.set_deadline(0, time.monotonic() + 0.3)
        until_done(ln, [slot], timeout=10)
        exit_ = slot.outcome(cold=False)
        assert exit_.reason == FailureReason.KILLED and "SIGKILL" in (exit_.error_message or "")
    finally:
        ln.close()


def test_a_job_a_handed_horse_declines_goes_to_the_server_and_the_horse_stays() -> None:
    """A handed horse written a job of a function it has not run says its verdict
    before any of the job's code runs: an ``async def`` job (async horses run those)
    or a ``@job(horse_jobs=1)`` one is declined and goes to the server (an async horse,
    a fresh one), the horse stays idle; the function's next jobs go to the server
    straight away. A function it may run: it says the cap and runs it."""
    ln = ForkServerLauncher(spec(warm=lambda: _warm(async_per_horse=2)))
    ln.start()
    try:
        [horse] = _handed(ln)
        pool = ln.pools[id(ln.server)]
        for func, args, result in (("async_add", (1, 2), "3"), ("fresh_pid", (), None)):
            [slot] = _launch(ln, func, *args)
            assert slot.pid == horse           # written to the handed horse, which declines
            until_done(ln, [slot])
            exit_ = slot.outcome(cold=False)
            assert exit_.ok and slot.pid != horse and slot.asked_again is False
            if result is not None:
                assert exit_.result_json == result and slot.mates is not None  # async horse
            assert [h.pid for h in pool.idle] == [horse]    # nothing ran in it: still idle
            [again] = _launch(ln, func, *args)
            if result is None:                 # now known: a fresh horse's, to the server
                assert again.state is SlotState.ASKED
            else:                              # the async horse the server handed over
                assert again.state is SlotState.RUNNING and again.pid == slot.pid
            until_done(ln, [again])
            assert again.outcome(cold=False).ok and again.pid != horse
        [direct] = _launch(ln, "identity", 7)
        assert direct.pid == horse and direct.state is SlotState.RUNNING
        until_done(ln, [direct])
        assert direct.outcome(cold=False).result_json == "7"
        assert pool.caps[f"{JOBS}:identity"] == 10 and f"{JOBS}:identity" in pool.idle[0].funcs
    finally:
        ln.close()


def test_a_horse_that_declines_then_dies_costs_the_job_nothing() -> None:
    """Crash point: the handed horse wrote its verdict (it declines an ``async def``
    job) and is killed before the worker read it. Whichever the worker reads first, the
    pipe or the server's notice of the death, the job, of which nothing ran, goes to
    the server and runs once; the dead horse is dropped."""
    ln = ForkServerLauncher(spec(warm=lambda: _warm(async_per_horse=2)))
    ln.start()
    try:
        [horse] = _handed(ln)
        pool = ln.pools[id(ln.server)]
        [slot] = _launch(ln, "async_add", 1, 2)
        assert slot.pid == horse
        wait_for(lambda: unread(pool.by_pid[horse].fd) > 0, what="the horse's verdict")
        procs = processes_of([horse])
        os.kill(horse, signal.SIGKILL)
        wait_for(lambda: gone(procs), what="the horse's death")
        until_done(ln, [slot])
        exit_ = slot.outcome(cold=False)
        assert exit_.ok and exit_.result_json == "3" and slot.pid != horse
        assert horse not in pool.by_pid
    finally:
        ln.close()

def test_a_job_that_writes_a_refusal_itself_never_runs_twice_at_once(warm, tmp_path) -> None:
    """The hostile job writes the bytes of a warm horse's refusal on its own report
    pipe and runs on: the worker kills that horse and hands the job on only once the
    horse is gone, so the job's two runs never overlap (the first never ends)."""
    [horse] = _handed(warm)
    [slot] = _launch(warm, "writes_refusal", str(tmp_path), 1.5)
    assert slot.pid == horse
    until_done(warm, [slot])
    assert slot.outcome(cold=False).ok and slot.pid != horse    # it ran again, elsewhere
    time.sleep(1.5)                                  # the first run would have ended by now
    runs = (tmp_path / "runs").read_text().split("\n")[:-1]
    assert runs == [f"start {horse}", f"start {slot.pid}", f"end {slot.pid}"]
    assert horse not in warm.pools[id(warm.server)].by_pid    # the refusing horse is gone


def test_a_reload_lets_a_direct_job_finish_then_retires_its_horse(warm) -> None:
    [horse] = _handed(warm)
    [slot] = _launch(warm, "sleep", 1)
    assert slot.pid == horse
    procs = processes_of([horse])
    old = warm.server
    warm.renew()                                   # SIGHUP
    until_done(warm, [slot])
    assert slot.outcome(cold=False).ok             # it finished in its horse
    wait_for(lambda: gone(procs), what="the old server's horse retired")
    warm.tidy()
    assert old not in warm.retiring and id(old) not in warm.pools
    [after] = _launch(warm, "noop")
    until_done(warm, [after])
    assert after.pid != horse


def test_a_handed_horse_dies_with_its_worker(processes, queue, r, settings) -> None:
    q = queue()
    key = f"{settings.prefix}:direct:pids"
    w = processes.worker("--customq", "default", "--horse-jobs", "10")
    first = q.enqueue_call("tests.warm_jobs:pid")
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=30)
    horse = q.fetch_job(first.id).result[0]
    q.enqueue_call("tests.warm_jobs:sleep", args=[settings.redis_url, key, 60])
    wait_for(lambda: r.llen(key) == 1, timeout=20)
    assert int(r.lpop(key)) == horse               # the direct path: the same horse
    procs = processes_of([horse])
    w.kill()
    wait_for(lambda: gone(procs), timeout=20, what="the horse died with its worker")
