"""The fork server forks horses for the worker; the horse semantics stay the same."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fusionworker.core.job import Job
from fusionworker.runtime.forkserver import ForkServer
from fusionworker.runtime.horse import DeadlineBoard, Horse
from tests.waiting import gone, processes_of, wait_for


@pytest.fixture
def server() -> Iterator[ForkServer]:
    fs = ForkServer(("tests",), ("fusionworker.exceptions.Retry",))
    fs.start()
    yield fs
    fs.close()


def run(fs: ForkServer, func: str, *args: object, timeout: float = 10.0, kill_after: float = 12.0):
    job = Job(id="j1", queue="q", func=func, args=list(args), timeout=timeout)
    horse = Horse(job, allowed=("tests",), retryable=("fusionworker.exceptions.Retry",), server=fs)
    horse.start()
    return horse, horse.supervise(kill_after=kill_after)


def test_result_comes_back_through_the_server(server: ForkServer) -> None:
    horse, exit_ = run(server, "tests.jobs:add", 2, 3)
    assert exit_.ok and exit_.result_json == "5"
    assert horse.pid != server.proc.pid  # a fresh process per job


def test_each_job_gets_a_fresh_process(server: ForkServer) -> None:
    pids = {run(server, "tests.jobs:noop")[0].pid for _ in range(3)}
    assert len(pids) == 3


@pytest.mark.slow
def test_crashes_exits_and_timeouts_keep_their_reasons(server: ForkServer) -> None:
    assert run(server, "tests.jobs:segfault")[1].reason == "segfault"
    assert run(server, "tests.jobs:hard_exit", 3)[1].reason == "exit"
    assert run(server, "tests.jobs:boom")[1].error_type == "ValueError"
    exit_ = run(server, "tests.jobs:sleep", 5, timeout=0.2, kill_after=3)[1]
    assert exit_.reason == "timeout"
    # the death penalty is armed before the job's module is imported: leave the import
    # (up to ~1 s on a loaded machine) time to finish before the alarm
    exit_ = run(server, "tests.jobs:ignore_alarm_and_sleep", 30, timeout=1.5, kill_after=2.0)[1]
    assert exit_.reason == "timeout" and "killed" in exit_.error_message


def test_job_code_may_import_the_package(server: ForkServer) -> None:
    """The server skips fusionworker's __init__; job code importing it still works."""
    exit_ = run(server, "tests.jobs:retry_me")[1]
    assert exit_.error_type == "Retry" and exit_.retryable


def test_horse_group_dies_with_the_server_and_the_server_comes_back(
        server: ForkServer, r: Any, prefix: str, redis_url: str) -> None:
    key = f"{prefix}:pid"
    job = Job(id="j2", queue="q", func="tests.jobs:pid_then_sleep", args=[redis_url, key, 30],
              timeout=60)
    horse = Horse(job, allowed=("tests",), server=server)
    horse.start()
    assert int(wait_for(lambda: r.lindex(key, 0))) == horse.pid   # the job runs
    procs = processes_of([horse.pid])
    os.kill(server.proc.pid, signal.SIGKILL)
    exit_ = horse.supervise(kill_after=60)
    assert not exit_.ok and exit_.reason == "killed"
    assert "fork server died" in exit_.error_message
    wait_for(lambda: gone(procs), timeout=5, what=f"the horse {horse.pid} gone")
    assert run(server, "tests.jobs:add", 1, 1)[1].result_json == "2"   # restarted


def test_server_exits_when_the_worker_closes_it(server: ForkServer) -> None:
    proc = server.proc
    server.close()
    assert proc.poll() is not None


def test_requests_followed_by_the_workers_end_start_no_job(server: ForkServer) -> None:
    """A worker killed right after sending run requests: the server sees the requests and
    the end in one turn and starts none of them (nobody would record the job; its lease
    gives it back). The server is frozen while the request and the end are written, so
    both wait in the socket; the worker's side is only shut for writing, so a pid answer
    (a started job) would still reach the test."""
    proc = server.proc
    assert server.sock is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        job = Job(id="j1", queue="q", func="tests.jobs:noop", timeout=10)
        server.sock.sendall(server._run_msg(job))
        server.sock.shutdown(socket.SHUT_WR)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(10) == 0
    said = b""
    while chunk := server.sock.recv(1 << 16):
        said += chunk
    assert said == b""          # no {"pid": ...}: no horse was given the job


def _exit_of(fs: ForkServer, pid: int) -> dict:
    """The server's exit message of horse ``pid`` (waits for it)."""
    while True:
        exits, died = fs.exits()
        if pid in exits:
            return exits[pid]
        assert not died
        select.select([fs.sock], [], [], 1.0)


def test_the_server_kills_a_horse_at_its_board_deadline_with_nobody_else_watching() -> None:
    """The lease watchdog is the server's (horse.LeaseWatchdog): the horses' parent side
    (this test) neither supervises nor kills; the server alone enforces each board entry."""
    board = DeadlineBoard(slots=2)
    fs = ForkServer(("tests",), (), board_fd=board.fd)
    try:
        job = Job(id="j1", queue="q", func="tests.jobs:sleep", args=[30], timeout=60)
        board.set(time.monotonic() + 0.5, 1)       # entry 1: over in half a second
        board.set(time.monotonic() + 30.0, 0)      # entry 0: far ahead
        doomed, spared = fs.spawn_many([job, job], [1, 0])
        msg = _exit_of(fs, doomed)
        assert os.WIFSIGNALED(msg["status"]) and os.WTERMSIG(msg["status"]) == signal.SIGKILL
        os.kill(spared, 0)                         # the other entry's horse lives on
        board.set(0.0, 0)                          # no deadline: nothing kills it either
        os.kill(spared, signal.SIGTERM)
        assert os.WTERMSIG(_exit_of(fs, spared)["status"]) == signal.SIGTERM
    finally:
        fs.close()
        board.close()


def test_a_renewed_board_entry_keeps_the_horse_alive_past_its_first_deadline() -> None:
    board = DeadlineBoard(slots=1)
    fs = ForkServer(("tests",), (), board_fd=board.fd)
    try:
        board.set(time.monotonic() + 1.0)
        [pid] = fs.spawn_many([Job(id="j1", queue="q", func="tests.jobs:sleep", args=[2],
                                   timeout=60)], [0])
        board.set(time.monotonic() + 60.0)         # a renewal reached Redis
        msg = _exit_of(fs, pid)
        assert msg["status"] == 0 and json.loads(msg["report"])["ok"]
    finally:
        fs.close()
        board.close()


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

    fs = ForkServer(("tests",), (), kill_children=kill_children)
    fs.start()
    child = 0
    try:
        _, exit_ = run(fs, "tests.jobs:spawn_sleeper", redis_url, f"{prefix}:child")
        child = int(exit_.result_json)
        assert child == int(r.lindex(f"{prefix}:child", 0))
        if kill_children:
            wait_for(lambda: _gone(child), timeout=5)
        else:
            run(fs, "tests.jobs:noop")             # a later horse is reaped: still alive
            assert not _gone(child)
    finally:
        fs.close()
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_remembered_function_follows_a_later_preload_that_rebinds_it(
        server: ForkServer) -> None:
    """The server resolves a job function once its module is preloaded (horse.resolved);
    preloading another module whose import rebinds it makes the next horse run the new
    one, as a horse resolving on its own would."""
    assert run(server, "tests.rebinding_jobs:which")[1].result_json == '"original"'
    assert run(server, "tests.rebinding_jobs:which")[1].result_json == '"original"'
    assert run(server, "tests.rebinding_patch:noop")[1].ok      # preloaded: rebinds
    assert run(server, "tests.rebinding_jobs:which")[1].result_json == '"patched"'


def test_horses_forked_ahead_for_a_batch_each_get_their_job(server: ForkServer) -> None:
    """A batch of requests makes the server fork that many horses ahead (READY_MAX at
    most); each must see its own job pipe's end (no other horse holds a copy of it), so
    every job of the next batches runs and reports (a smaller batch leaves horses ready
    and idle: one holding another's pipe end would keep that one waiting for good)."""
    for n in (6, 1, 3):
        jobs = [Job(id=f"j{i}", queue="q", func="tests.jobs:add", args=[i, 1], timeout=30)
                for i in range(n)]
        pids = server.spawn_many(jobs, list(range(n)))
        exits: dict[int, dict] = {}
        for _ in range(60):                    # each exit message is handed over once
            more, died = server.exits()
            exits.update(more)
            assert not died
            if len(exits) == len(pids):
                break
            select.select([server.sock], [], [], 1.0)
        assert [json.loads(exits[pid]["report"])["result"] for pid in pids] == [
            str(i + 1) for i in range(n)]
