"""The fork server forks horses for the worker; the horse semantics stay the same."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import struct
import termios
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fusionworker.core.job import FailureReason, Job
from fusionworker.runtime.exits import HorseExit
from fusionworker.runtime.launch import ForkServerLauncher, LaunchSpec, OwnForkLauncher
from fusionworker.runtime.protocol import RunRequest
from fusionworker.runtime.slot import Slot
from tests.waiting import gone, processes_of, wait_for


def spec(**kw: Any) -> LaunchSpec:
    return LaunchSpec(allowed=("tests",), retryable=("fusionworker.exceptions.Retry",),
                      entries=8, deliver=lambda job, frame: None, **kw)


@pytest.fixture
def launcher() -> Iterator[ForkServerLauncher]:
    ln = ForkServerLauncher(spec())
    ln.start()
    assert ln.server is not None
    yield ln
    ln.close()


def until_done(ln: ForkServerLauncher | OwnForkLauncher, slots: list[Slot], timeout: float = 60.0) -> None:
    """What the loop does for running slots: wait, ask the launcher, kill at the deadline."""
    give_up = time.monotonic() + timeout
    while not all(s.done for s in slots):
        now = time.monotonic()
        assert now < give_up, "the horses did not end"
        for s in slots:
            if not s.done and now >= s.deadline and not s.killed:
                s.kill(FailureReason.TIMEOUT)
            s.escalate(now)
        select.select(ln.waitables(), [], [], 0.05)
        ln.poll(None)


def answered(ln: ForkServerLauncher, slots: list[Slot], timeout: float = 20.0) -> None:
    """What the loop's turns do until the fork server's answers are read: each slot
    knows its horse's pid (a launch does not wait for it)."""
    def known() -> bool:
        select.select(ln.waitables(), [], [], 0.05)
        ln.poll(None)
        return all(s.pid > 0 for s in slots)
    wait_for(known, timeout=timeout, what="the fork server's answers")


def run(ln: ForkServerLauncher, func: str, *args: object, timeout: float = 10.0,
        kill_after: float = 12.0) -> tuple[Slot, HorseExit]:
    job = Job(id="j1", queue="q", func=func, args=list(args), timeout=timeout)
    [slot] = ln.launch([job], [0], lambda: None)
    slot.deadline = slot.started + kill_after
    until_done(ln, [slot])
    return slot, slot.outcome(cold=False)


def test_result_comes_back_through_the_server(launcher: ForkServerLauncher) -> None:
    slot, exit_ = run(launcher, "tests.jobs:add", 2, 3)
    assert exit_.ok and exit_.result_json == "5"
    assert launcher.server is not None
    assert slot.pid != launcher.server.proc.pid  # a fresh process per job


def test_each_job_gets_a_fresh_process(launcher: ForkServerLauncher) -> None:
    pids = {run(launcher, "tests.jobs:noop")[0].pid for _ in range(3)}
    assert len(pids) == 3


@pytest.mark.slow
def test_crashes_exits_and_timeouts_keep_their_reasons(launcher: ForkServerLauncher) -> None:
    assert run(launcher, "tests.jobs:segfault")[1].reason == "segfault"
    assert run(launcher, "tests.jobs:hard_exit", 3)[1].reason == "exit"
    assert run(launcher, "tests.jobs:boom")[1].error_type == "ValueError"
    # a second: the fresh horse imports tests.jobs (and redis) under the same alarm first,
    # and a SIGALRM inside a library import that catches every exception is not a timeout
    exit_ = run(launcher, "tests.jobs:sleep", 5, timeout=1.0, kill_after=4)[1]
    assert exit_.reason == "timeout"
    # the death penalty is armed before the job's module is imported: leave the import
    # (up to ~1 s on a loaded machine) time to finish before the alarm
    exit_ = run(launcher, "tests.jobs:ignore_alarm_and_sleep", 30, timeout=1.5, kill_after=2.0)[1]
    assert exit_.reason == "timeout" and "killed" in exit_.error_message


def test_job_code_may_import_the_package(launcher: ForkServerLauncher) -> None:
    """The server skips fusionworker's __init__; job code importing it still works."""
    exit_ = run(launcher, "tests.jobs:retry_me")[1]
    assert exit_.error_type == "Retry" and exit_.retryable


def test_horse_group_dies_with_the_server_and_the_server_comes_back(
        launcher: ForkServerLauncher, r: Any, prefix: str, redis_url: str) -> None:
    key = f"{prefix}:pid"
    job = Job(id="j2", queue="q", func="tests.jobs:pid_then_sleep", args=[redis_url, key, 30],
              timeout=60)
    [slot] = launcher.launch([job], [0], lambda: None)
    answered(launcher, [slot])
    assert int(wait_for(lambda: r.lindex(key, 0))) == slot.pid   # the job runs
    procs = processes_of([slot.pid])
    assert launcher.server is not None
    os.kill(launcher.server.proc.pid, signal.SIGKILL)
    until_done(launcher, [slot])
    exit_ = slot.outcome(cold=False)
    assert not exit_.ok and exit_.reason == "killed"
    assert "fork server died" in exit_.error_message
    wait_for(lambda: gone(procs), timeout=5, what=f"the horse {slot.pid} gone")
    assert run(launcher, "tests.jobs:add", 1, 1)[1].result_json == "2"   # restarted


def test_server_exits_when_the_worker_closes_it(launcher: ForkServerLauncher) -> None:
    assert launcher.server is not None
    proc = launcher.server.proc
    launcher.close()
    assert proc.poll() is not None


def test_requests_followed_by_the_workers_end_start_no_job(launcher: ForkServerLauncher) -> None:
    """A worker killed right after sending run requests: the server sees the requests and
    the end in one turn and starts none of them (nobody would record the job; its lease
    gives it back). The server is frozen while the request and the end are written, so
    both wait in the socket; the worker's side is only shut for writing, so a pid answer
    (a started job) would still reach the test."""
    server = launcher.server
    assert server is not None and server.sock is not None
    proc = server.proc
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        job = Job(id="j1", queue="q", func="tests.jobs:noop", timeout=10)
        server.sock.sendall(RunRequest.of(job).encode())
        server.sock.shutdown(socket.SHUT_WR)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(10) == 0
    said = b""
    while chunk := server.sock.recv(1 << 16):
        said += chunk
    assert said == b""          # no {"pid": ...}: no horse was given the job


def _takes(pid: int, sig: int) -> bool:
    """The process ``pid`` does not ignore ``sig`` (its SigIgn mask)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("SigIgn:"):
                return not int(line.split()[1], 16) & (1 << (sig - 1))
    return False


def test_the_server_kills_a_horse_at_its_board_deadline_with_nobody_else_watching() -> None:
    """The lease watchdog is the server's (deadlines.LeaseWatchdog): the horses' parent
    side (this test) neither polices nor kills; the server alone enforces each entry."""
    ln = ForkServerLauncher(spec())
    ln.start()
    try:
        job = Job(id="j1", queue="q", func="tests.jobs:sleep", args=[30], timeout=60)
        ln.set_deadline(1, time.monotonic() + 0.5)       # entry 1: over in half a second
        ln.set_deadline(0, time.monotonic() + 30.0)      # entry 0: far ahead
        doomed, spared = ln.launch([job, job], [1, 0], lambda: None)
        answered(ln, [doomed, spared])
        until_done(ln, [doomed])
        exit_ = doomed.outcome(cold=False)
        assert exit_.reason == "killed" and "SIGKILL" in (exit_.error_message or "")
        os.kill(spared.pid, 0)                           # the other entry's horse lives on
        ln.set_deadline(0, 0.0)                          # no deadline: nothing kills it either
        # a horse ignores SIGTERM (its server's) until it set up its job's signals: on a
        # loaded machine that can come after the answer and the other horse's death
        wait_for(lambda: _takes(spared.pid, signal.SIGTERM), what="the horse's signals")
        os.kill(spared.pid, signal.SIGTERM)
        until_done(ln, [spared])
        assert "SIGTERM" in (spared.outcome(cold=False).error_message or "")
    finally:
        ln.close()


def test_a_renewed_board_entry_keeps_the_horse_alive_past_its_first_deadline() -> None:
    ln = ForkServerLauncher(spec())
    ln.start()
    try:
        ln.set_deadline(0, time.monotonic() + 1.0)
        [slot] = ln.launch([Job(id="j1", queue="q", func="tests.jobs:sleep", args=[2],
                                timeout=60)], [0], lambda: None)
        ln.set_deadline(0, time.monotonic() + 60.0)      # a renewal reached Redis
        until_done(ln, [slot])
        assert slot.outcome(cold=False).ok
    finally:
        ln.close()


def _gone(pid: int) -> bool:
    """Not running (gone, or a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("kill_children", [True, False])
def test_the_server_kills_what_a_job_left_in_its_group_as_it_reaps_the_horse(
        kill_children: bool, redis_url: str, r, prefix: str) -> None:
    """While the server runs on (the worker keeps it): the job's child dies when its horse
    is reaped, unless FUSIONWORKER_KILL_JOB_CHILDREN is off."""
    from tests.conftest import wait_for

    ln = ForkServerLauncher(spec(kill_children=kill_children))
    ln.start()
    child = 0
    try:
        _, exit_ = run(ln, "tests.jobs:spawn_sleeper", redis_url, f"{prefix}:child")
        child = int(exit_.result_json)
        assert child == int(r.lindex(f"{prefix}:child", 0))
        if kill_children:
            wait_for(lambda: _gone(child), timeout=5)
        else:
            run(ln, "tests.jobs:noop")             # a later horse is reaped: still alive
            assert not _gone(child)
    finally:
        ln.close()
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_remembered_function_follows_a_later_preload_that_rebinds_it(
        launcher: ForkServerLauncher) -> None:
    """The server resolves a job function once its module is preloaded (Server.resolved);
    preloading another module whose import rebinds it makes the next horse run the new
    one, as a horse resolving on its own would."""
    assert run(launcher, "tests.rebinding_jobs:which")[1].result_json == '"original"'
    assert run(launcher, "tests.rebinding_jobs:which")[1].result_json == '"original"'
    assert run(launcher, "tests.rebinding_patch:noop")[1].ok      # preloaded: rebinds
    assert run(launcher, "tests.rebinding_jobs:which")[1].result_json == '"patched"'


def test_horses_forked_ahead_for_a_batch_each_get_their_job(launcher: ForkServerLauncher) -> None:
    """A batch of requests makes the server fork that many horses ahead (READY_MAX at
    most); each must see its own job pipe's end (no other horse holds a copy of it), so
    every job of the next batches runs and reports (a smaller batch leaves horses ready
    and idle: one holding another's pipe end would keep that one waiting for good)."""
    for n in (6, 1, 3):
        jobs = [Job(id=f"j{i}", queue="q", func="tests.jobs:add", args=[i, 1], timeout=30)
                for i in range(n)]
        slots = launcher.launch(jobs, list(range(n)), lambda: None)
        until_done(launcher, slots)
        assert [s.outcome(cold=False).result_json for s in slots] == [
            str(i + 1) for i in range(n)]


def test_notices_cut_anywhere_are_read_once_and_in_order() -> None:
    # the worker reads its fork server's socket in chunks of any size: every notice,
    # an exit notice and its report frame included, comes out once, whole, in order
    from fusionworker.runtime.protocol import (
        ExitNotice,
        MovedNotice,
        ProgressNotice,
        StartNotice,
        take_notices,
    )

    sent = [StartNotice(11), ProgressNotice(11, '{"progress": 0.5}'),
            ExitNotice(11, 0, b'{"ok": true, "result": "x\\ny"}'), MovedNotice(12, 13),
            StartNotice(13), ExitNotice(13, 9, b"")]
    wire = b"".join(n.encode() for n in sent)
    for cut in range(len(wire) + 1):
        buf, got = bytearray(), []
        for part in (wire[:cut], wire[cut:]):
            buf.extend(part)
            got += take_notices(buf)
        assert got == sent, cut
        assert not buf


def test_an_answer_and_the_end_read_together_are_taken_in_one_poll(launcher) -> None:
    # a launch does not wait for the server's answer: the slot knows its horse's pid
    # when the loop reads it. A short job's answer and its end then come in one read,
    # and the server's socket is waited on while the slot has nothing but a request
    # out (else the loop would sleep until its next timer)
    job = Job(id="quick", queue="q", func="tests.jobs:noop", args=[], timeout=10)
    [slot] = launcher.launch([job], [0], lambda: None)
    assert slot.pid == 0 and slot.forked and not slot.done
    assert launcher.waitables()
    wait_for(lambda: select.select(launcher.waitables(), [], [], 0.05)[0], timeout=10,
             what="the answer on the socket")
    answered = _unread(launcher)
    # the horse ran and ended meanwhile: its end came after the answer, unread
    wait_for(lambda: _unread(launcher) > answered, timeout=30, what="the end after the answer")
    time.sleep(0.05)                  # (the rest of a notice written in two parts)
    launcher.poll(None)
    assert slot.pid > 0 and slot.done and slot.outcome(cold=False).ok


def _unread(ln: ForkServerLauncher) -> int:
    """Bytes waiting to be read on the descriptors the loop waits on."""
    total = 0
    for fd in ln.waitables():
        fileno = fd if isinstance(fd, int) else fd.fileno()
        total += struct.unpack("i", fcntl.ioctl(fileno, termios.FIONREAD, b"\0\0\0\0"))[0]
    return total


def _stop_server(ln: ForkServerLauncher) -> int:
    """SIGSTOP the launcher's fork server: it reads no request and answers nothing."""
    assert ln.server is not None and ln.server.proc is not None
    os.kill(ln.server.proc.pid, signal.SIGSTOP)
    return ln.server.proc.pid


def _one(ln: ForkServerLauncher, func: str, *args: object, timeout: float = 10.0) -> Slot:
    [slot] = ln.launch([Job(id="j1", queue="q", func=func, args=list(args), timeout=timeout)],
                       [0], lambda: None)
    return slot


def test_requests_a_dead_server_never_answered_go_to_a_new_fork_server(
        launcher: ForkServerLauncher, caplog: pytest.LogCaptureFixture) -> None:
    # crash point: the request is sent, the server dies before it answers (stopped,
    # then SIGKILLed). The request goes to a new fork server, whose horse runs the job
    # once: its parent is a fork server, not the worker (a job that kills its parent
    # kills a fork server, never the worker: design.md, "Only the culprit pays")
    server_pid = _stop_server(launcher)
    try:
        slot = _one(launcher, "tests.hostile_jobs:parent")
        assert slot.pid == 0
    finally:
        os.kill(server_pid, signal.SIGKILL)
    until_done(launcher, [slot])
    exit_ = slot.outcome(cold=False)
    assert launcher.server is not None and launcher.server.proc is not None
    assert exit_.ok and exit_.result_json == f"[{launcher.server.proc.pid}]"
    assert launcher.server.proc.pid != server_pid and os.getpid() != launcher.server.proc.pid
    assert slot.origin is launcher.server and slot.asked_again
    assert "the fork server died before starting 1 job(s): asking a new one" in caplog.text


def _stop_on_submit(monkeypatch: pytest.MonkeyPatch, server: Any) -> None:
    """``server`` is SIGSTOPped as soon as it was sent a request (left unread in its
    socket): it dies unanswered when the test SIGKILLs it."""
    submit = server.submit

    def submit_then_stop(jobs: Any, entries: Any = None) -> None:
        submit(jobs, entries)
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)

    monkeypatch.setattr(server, "submit", submit_then_stop)


def test_a_request_two_servers_died_without_answering_runs_nowhere_else(
        launcher: ForkServerLauncher, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    # a request that may be what kills a server is asked again once only: the second
    # server dies before answering too (stopped as soon as it was sent the request,
    # then SIGKILLed). The job is started nowhere else, above all not in a horse of the
    # worker (a job that kills its parent would kill the worker): it ends as a death of
    # a fork server it shared (given back, shared_deaths + 1), so it runs alone next
    server = launcher.server
    assert server is not None
    first = _stop_server(launcher)
    slot = _one(launcher, "tests.hostile_jobs:parent")
    _stop_on_submit(monkeypatch, server)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: (launcher.poll(None), slot.asked_again)[1], what="asked again")
    assert server.proc is not None and server.proc.pid != first
    os.kill(server.proc.pid, signal.SIGKILL)
    monkeypatch.undo()
    until_done(launcher, [slot])
    exit_ = slot.outcome(cold=False)
    assert not exit_.ok and exit_.shared and exit_.reason == FailureReason.KILLED
    assert slot.pid == 0 and not launcher.own.running        # no horse of the worker
    assert "a second one died before starting it; it is started nowhere else" in caplog.text
    assert run(launcher, "tests.jobs:add", 2, 2)[1].result_json == "4"   # the next job runs


def test_a_suspect_whose_own_server_dies_before_answering_pays_for_it_alone(
        launcher: ForkServerLauncher, monkeypatch: pytest.MonkeyPatch) -> None:
    # crash point: a suspect (shared_deaths > 0) is sent to a fork server of its own,
    # which dies before it answers (stopped as soon as it was sent the request, then
    # SIGKILLed). Nothing else ran there: the death is the job's (`killed`, an attempt),
    # and the job is not asked of another server nor forked by the worker
    new_server = launcher._new_server

    def stopping(warm: bool) -> Any:
        made = new_server(warm)
        if not warm:                    # the suspect's own server
            _stop_on_submit(monkeypatch, made)
        return made

    monkeypatch.setattr(launcher, "_new_server", stopping)
    shared = launcher.server
    assert shared is not None and shared.proc is not None
    shared_pid = shared.proc.pid
    job = Job(id="sus", queue="q", func="tests.hostile_jobs:parent", args=[], timeout=10,
              shared_deaths=1)
    [slot] = launcher.launch([job], [0], lambda: None)
    assert slot.alone and slot.origin is not shared and slot.origin is not None
    assert slot.origin.proc is not None
    os.kill(slot.origin.proc.pid, signal.SIGKILL)
    until_done(launcher, [slot])
    exit_ = slot.outcome(cold=False)
    assert not exit_.ok and not exit_.shared and exit_.reason == FailureReason.KILLED
    assert "started for this job alone died before it said" in exit_.error_message
    assert slot.pid == 0 and not slot.asked_again and not launcher.own.running
    assert launcher.server is shared and shared.proc.pid == shared_pid   # not asked there


def test_a_server_that_leaves_a_request_unanswered_is_killed_and_the_job_runs(
        launcher: ForkServerLauncher, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stopped (wedged) fork server: past ANSWER_TIMEOUT the worker kills it, and the
    # job it never answered for runs in a new fork server
    from fusionworker.runtime import launch

    monkeypatch.setattr(launch, "ANSWER_TIMEOUT", 0.5)
    server_pid = _stop_server(launcher)
    slot = _one(launcher, "tests.jobs:add", 3, 4)
    wait_for(lambda: (launcher.poll(None), slot.asked_again)[1], what="asked again")
    # the new server may take longer than 0.5 s to start and answer on a loaded machine:
    # killed as hung too, it would leave the request unanswered twice (run nowhere else)
    monkeypatch.setattr(launch, "ANSWER_TIMEOUT", 60.0)
    until_done(launcher, [slot])
    assert slot.outcome(cold=False).result_json == "7"
    assert slot.origin is launcher.server and slot.asked_again    # in a new fork server
    wait_for(lambda: _gone(server_pid), timeout=5, what="the stopped server killed")


def test_a_reload_with_an_answer_owed_keeps_the_old_server_until_it_answered(
        launcher: ForkServerLauncher) -> None:
    # crash point: SIGHUP (renew) while the server owes an answer. The old server is kept
    # (closing it would lose the answer and kill the job's horse): the job runs there,
    # the new server takes the next jobs, the old one goes once it is done
    old_pid = _stop_server(launcher)
    old = launcher.server
    slot = _one(launcher, "tests.jobs:add", 5, 6)
    launcher.renew()
    assert launcher.server is not old and old in launcher.retiring
    os.kill(old_pid, signal.SIGCONT)
    until_done(launcher, [slot])
    assert slot.outcome(cold=False).result_json == "11" and slot.origin is old
    launcher.tidy()
    assert not launcher.retiring                         # closed once it was done
    assert run(launcher, "tests.jobs:add", 1, 1)[1].result_json == "2"   # the new server


def test_a_kill_asked_before_the_answer_is_sent_once_the_pid_is_known(
        launcher: ForkServerLauncher) -> None:
    # crash point: the job's deadline passes while its request waits for the answer (the
    # server is stopped). Nothing is signalled then (pid 0 would be the worker's own
    # process group: this test process); the kill goes to the horse when it is known
    server_pid = _stop_server(launcher)
    try:
        slot = _one(launcher, "tests.jobs:sleep", 30, timeout=60)
        slot.kill(FailureReason.TIMEOUT)
        assert slot.killed and slot.pid == 0
    finally:
        os.kill(server_pid, signal.SIGCONT)
    until_done(launcher, [slot], timeout=20)
    exit_ = slot.outcome(cold=False)
    assert slot.pid > 0
    assert not exit_.ok and exit_.reason == "timeout"


def test_a_fresh_horse_flooding_its_report_pipe_costs_its_fork_server_nothing() -> None:
    """The hostile job writes 64 MiB of no report on every pipe it holds, through the
    fork server (a fresh horse): the server buffers at most twice the result cap and a
    MiB of it, then kills the horse; its job is the culprit (killed), the server lives
    on small and runs the next job."""
    ln = ForkServerLauncher(spec(result_cap=lambda: 1 << 20))
    ln.start()
    try:
        slot, exit_ = run(ln, "tests.jobs:flood_report_pipe", 64, 30, timeout=30,
                          kill_after=20)
        assert exit_.reason == FailureReason.KILLED, exit_
        assert ln.server is not None and ln.server.proc is not None
        with open(f"/proc/{ln.server.proc.pid}/status", encoding="ascii") as fh:
            peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
        assert peak < 60 * 1024, peak                      # KiB: not the flood's 64 MiB
        assert run(ln, "tests.jobs:add", 2, 3)[1].result_json == "5"
    finally:
        ln.close()


def test_a_horse_the_worker_forks_itself_flooding_its_report_pipe_is_killed() -> None:
    """The same hostile job on a horse the worker forked itself (no fork server runs):
    the worker reads at most twice the result cap and a MiB of it, then kills the horse;
    its job pays (killed) and the worker's memory stays small. Without the bound the
    horse lives on (its job sleeps 30 s after its flood)."""
    import resource

    ln = OwnForkLauncher(spec(result_cap=lambda: 1 << 20))
    ln.start()
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        job = Job(id="f", queue="q", func="tests.jobs:flood_report_pipe", args=[64, 30],
                  timeout=30)
        [slot] = ln.launch([job], [0], lambda: None)
        until_done(ln, [slot], timeout=20)
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew < 32 * 1024, grew                      # KiB: not the flood's 64 MiB
        exit_ = slot.outcome(cold=False)
        assert exit_.reason == FailureReason.KILLED, exit_
    finally:
        ln.close()
