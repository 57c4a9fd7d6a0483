"""Async horses on the direct path (design.md, "Async horses"): the fork server makes an
async horse with the first request of an ``async def`` job and hands it over; the
worker writes the later jobs and reads every line itself. Real fork server, real horses.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fusionworker.core.job import FailureReason, Job
from fusionworker.runtime.launch import ForkServerLauncher
from fusionworker.runtime.slot import Slot, SlotState
from tests.runtime.test_direct_path import _launch as launch_direct
from tests.runtime.test_forkserver import spec, until_done
from tests.waiting import gone, processes_of, wait_for

JOBS = "tests.async_horse_jobs"


@pytest.fixture
def aio() -> Iterator[ForkServerLauncher]:
    ln = ForkServerLauncher(spec(warm=lambda: {"horse_jobs": 100, "async_per_horse": 10}))
    ln.start()
    yield ln
    ln.close()


def _launch(ln: ForkServerLauncher, func: str, *args: Any, entries: tuple[int, ...] = (0,),
            timeout: float = 30) -> list[Slot]:
    return launch_direct(ln, func, *args, entries=entries, timeout=timeout, module=JOBS)


def _answered(ln: ForkServerLauncher, slots: list[Slot]) -> None:
    wait_for(lambda: ln.poll(None) or all(s.pid > 0 for s in slots), what="the answers")


def test_a_burst_before_the_first_answer_shares_one_horse_and_later_jobs_skip_the_server(
        aio) -> None:
    """The worker does not know the function is async before the server's first answer:
    a burst of 4 goes to the server, which gives the horse it makes for the first the
    other three too (not a horse each). Then the worker knows: the next jobs are written
    to that horse at once (born running, nothing asked of the server)."""
    burst = _launch(aio, "stamp", 0.5, entries=(0, 1, 2, 3))
    _answered(aio, burst)
    [horse] = {s.pid for s in burst}
    assert all(s.mates is burst[0].mates for s in burst)
    later = _launch(aio, "stamp", 0.2, entries=(4, 5))
    assert [s.state for s in later] == [SlotState.RUNNING] * 2
    assert {s.pid for s in later} == {horse} and id(aio.server) not in aio.asked
    until_done(aio, burst + later)
    for slot in burst + later:
        exit_ = slot.outcome(cold=False)
        assert exit_.ok and exit_.result_json is not None
        assert exit_.result_json.startswith(f"[{horse},"), exit_


def test_lines_a_horse_wrote_before_its_jobs_answers_were_read_are_not_lost(aio) -> None:
    """Crash point of the wire: the server's answers for the jobs it gave a new async
    horse can be read after the horse already reported them (the handover and the
    answers are separate writes). Held back here on purpose: the horse's pipe is read
    first, then the answers; each job still ends with its own report, once."""
    held: list[Any] = []
    server = aio.server
    assert server is not None
    answer = server.on_start
    server.on_start = held.append
    burst = _launch(aio, "stamp", 0.0, entries=(0, 1, 2))
    wait_for(lambda: server.exits() and len(held) == 3, what="the answers, held back")
    pool = aio.pools[id(server)]
    [horse] = pool.async_horses.values()
    wait_for(lambda: pool.poll(None) is not None and len(horse.early) == 3,
             what="the three reports, read before their answers")
    assert answer is not None
    server.on_start = answer
    for notice in held:
        answer(notice)
    until_done(aio, burst, timeout=10)
    assert [s.outcome(cold=False).ok for s in burst] == [True] * 3
    assert not horse.early


def test_an_async_horse_killed_under_direct_jobs_ends_each_of_them(aio) -> None:
    """Crash point: the horse dies (SIGKILL from outside) with jobs the worker wrote it
    running: each slot ends with the death's status once the server reaped it (nobody
    known to blame: each is given back as a shared death)."""
    first = _launch(aio, "stamp", 30)
    _answered(aio, first)
    later = _launch(aio, "stamp", 30, entries=(1, 2))
    assert {s.pid for s in later} == {first[0].pid}
    procs = processes_of([first[0].pid])
    os.kill(first[0].pid, signal.SIGKILL)
    wait_for(lambda: gone(procs), what="the horse's death")
    until_done(aio, first + later, timeout=20)
    for slot in first + later:
        exit_ = slot.outcome(cold=False)
        assert exit_.reason == FailureReason.KILLED and exit_.shared, exit_
    assert not aio.pools[id(aio.server)].async_horses


def test_a_reload_lets_the_async_jobs_finish_then_the_horse_exits(aio) -> None:
    """SIGHUP (a new fork server): the old server's async horse takes no new job; the
    jobs it runs finish with their own reports, then it exits (EOF on its job pipe); the
    next async job goes to the new server."""
    first = _launch(aio, "stamp", 1.0, entries=(0, 1))
    _answered(aio, first)
    old = first[0].pid
    aio.renew()
    [after] = _launch(aio, "stamp", 0.1, entries=(2,))
    assert after.state is SlotState.ASKED          # to the new server
    until_done(aio, first + [after])
    assert all(s.outcome(cold=False).ok for s in first + [after])
    assert after.pid != old
    procs = processes_of([old])
    wait_for(lambda: gone(procs), what="the old horse's exit")


def _flood_spec(**warm: int) -> ForkServerLauncher:
    ln = ForkServerLauncher(spec(warm=lambda: {"horse_jobs": 100, **warm},
                                 result_cap=lambda: 1 << 20))     # a flood: past 3 MiB
    ln.start()
    return ln


def test_a_job_flooding_its_async_horses_report_pipe_costs_the_worker_nothing() -> None:
    """The hostile job writes 64 MiB of no line on its report pipe: the worker buffers at
    most twice the result cap and a MiB of it, kills the horse (which job did it is not
    known), and gives its jobs back as deaths of no known cause; the mate is not charged."""
    import resource

    ln = _flood_spec(async_per_horse=10)
    try:
        first = ln.launch([Job(id=f"w{i}", queue="q", func=f"{JOBS}:{func}", args=args,
                               timeout=30)
                           for i, (func, args) in enumerate((("stamp", [0]),
                                                             ("flood_report_pipe", [0, 0])))],
                          [0, 1], lambda: None)      # one burst: both known, one horse
        until_done(ln, first)
        assert first[0].pid == first[1].pid
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        mate, flood = (_launch(ln, "stamp", 30, entries=(2,))
                       + _launch(ln, "flood_report_pipe", 64, 30, entries=(3,)))
        assert mate.pid == flood.pid == first[0].pid          # one horse, written directly
        until_done(ln, [mate, flood], timeout=30)
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before   # KiB
        assert grew < 32 * 1024, grew
        for slot in (mate, flood):
            exit_ = slot.outcome(cold=False)
            assert exit_.reason == FailureReason.KILLED and exit_.shared, exit_
    finally:
        ln.close()


def test_a_job_flooding_a_handed_sync_horses_report_pipe_is_killed_and_pays() -> None:
    """The same on a warm sync horse the worker was handed: its job is known, it is killed
    and its attempt counted (killed, not shared); the worker's memory stays small."""
    import resource

    ln = _flood_spec()
    try:
        warm = [Job(id="w", queue="q", func="tests.jobs:noop", args=[], timeout=30)]
        until_done(ln, ln.launch(warm, [0], lambda: None))
        wait_for(lambda: ln.poll(None) or ln.pools[id(ln.server)].idle, what="the handover")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        job = Job(id="f", queue="q", func="tests.jobs:flood_report_pipe", args=[64, 30],
                  timeout=30)
        [slot] = ln.launch([job], [1], lambda: None)
        assert slot.state is SlotState.RUNNING            # written by the worker
        until_done(ln, [slot], timeout=30)
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew < 32 * 1024, grew
        exit_ = slot.outcome(cold=False)
        assert exit_.reason == FailureReason.KILLED and not exit_.shared, exit_
    finally:
        ln.close()


def test_an_async_horse_dead_before_its_handover_was_read_ends_its_job(aio) -> None:
    """Crash point: the horse dies right after its first frame (its job exits it), before
    the worker read the handover: the worker adopts a horse whose pipe is at its end,
    and the server's notice of the death ends the job (no known culprit: given back as a
    shared death, to run again apart), nothing waits for a report."""
    [slot] = _launch(aio, "exit_now", 3)
    time.sleep(1.0)                          # dead and reaped before anything is read
    until_done(aio, [slot], timeout=10)
    exit_ = slot.outcome(cold=False)
    assert not exit_.ok and exit_.shared, exit_
    assert not aio.pools[id(aio.server)].async_horses


def test_a_fork_server_killed_while_it_makes_an_async_horse_hangs_nothing(aio) -> None:
    """Crash point: the server dies with an async job's request in hand (read or not,
    its frame written to a new horse or not, the handover sent or not). Unanswered, the
    request is asked again of a new server and runs there; answered, the horse died with
    the server (PDEATHSIG) and the job ends as a shared death. Either way it ends once,
    and the next async job runs."""
    server = aio.server
    assert server is not None and server.proc is not None
    [slot] = _launch(aio, "stamp", 0.0)
    os.kill(server.proc.pid, signal.SIGKILL)
    until_done(aio, [slot], timeout=20)
    exit_ = slot.outcome(cold=False)
    assert exit_.ok or exit_.shared, exit_
    [after] = _launch(aio, "stamp", 0.0, entries=(1,))
    until_done(aio, [after], timeout=20)
    assert after.outcome(cold=False).ok


def _traced(pid: int) -> bool:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("TracerPid")) != 0


@pytest.mark.skipif(shutil.which("strace") is None,
                    reason="needs strace (Debian's package; .ci/run installs it)")
def test_a_fork_server_dead_between_a_new_async_horses_first_frame_and_its_handover(
        aio, settings) -> None:
    """Crash point, hit exactly: strace kills the fork server at the entry of its first
    ``sendmsg``, the handover of the async horse it has just written the job's frame to
    (a handover is its only ``sendmsg``). The request was never answered: it is asked
    again of a new server and the job ends once, with the new horse's report. The first
    horse, which may have begun the job, died with its server (PDEATHSIG), so the job
    never ran in two horses at once."""
    server = aio.server
    assert server is not None and server.proc is not None
    first = server.proc
    pid = first.pid
    key = f"{settings.prefix}:ran"
    tracer = subprocess.Popen(["strace", "-q", "-p", str(pid), "-o", os.devnull,
                               "-e", "trace=sendmsg",
                               "-e", "inject=sendmsg:signal=SIGKILL:when=1"])
    try:
        wait_for(lambda: _traced(pid), what="strace attached to the fork server")
        [slot] = _launch(aio, "pushed_stamp", settings.redis_url, key, 0.2)
        until_done(aio, [slot], timeout=30)
    finally:
        tracer.kill()
        tracer.wait()
    assert first.wait(timeout=10) == -signal.SIGKILL     # killed where it hands over
    exit_ = slot.outcome(cold=False)
    assert exit_.ok and exit_.result_json is not None, exit_
    ran = [int(p) for p in redis.Redis.from_url(settings.redis_url).lrange(key, 0, -1)]
    winner = json.loads(exit_.result_json)[0]
    assert ran[-1] == winner and len(ran) <= 2, ran      # once, or begun by the dead one
    assert server.proc is not first and winner != pid        # a new server's horse
    assert gone(processes_of(ran[:-1]))
