"""The fork server forks horses for the worker; the horse semantics stay the same."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from fusionworker.forkserver import ForkServer
from fusionworker.horse import Horse
from fusionworker.job import Job


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


def test_horse_group_dies_with_the_server_and_the_server_comes_back(server: ForkServer) -> None:
    job = Job(id="j2", queue="q", func="tests.jobs:sleep", args=[30], timeout=60)
    horse = Horse(job, allowed=("tests",), server=server)
    horse.start()
    time.sleep(0.3)
    os.kill(server.proc.pid, signal.SIGKILL)
    exit_ = horse.supervise(kill_after=60)
    assert not exit_.ok and exit_.reason == "killed"
    assert "fork server died" in exit_.error_message
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(horse.pid, 0)
            time.sleep(0.05)
    assert run(server, "tests.jobs:add", 1, 1)[1].result_json == "2"   # restarted


def test_server_exits_when_the_worker_closes_it(server: ForkServer) -> None:
    proc = server.proc
    server.close()
    assert proc.poll() is not None
