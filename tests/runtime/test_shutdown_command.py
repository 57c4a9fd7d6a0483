"""Stopping one worker from elsewhere (``fusionworker shutdown NAME``, RQ's
``send_shutdown_command`` and ``send_kill_horse_command``): real worker processes, the
crash points of docs/design.md, "Stopping one worker from elsewhere", each here."""

from __future__ import annotations

import os
import time

import pytest

from fusionworker import Worker
from fusionworker.core import admin
from fusionworker.core.command import (
    send_kill_horse_command,
    send_shutdown_command,
    send_stop_job_command,
)
from fusionworker.core.keys import Keys
from fusionworker.exceptions import InvalidOperation
from tests.cli.test_cli import cli  # noqa: F401 - the fixture
from tests.waiting import wait_for


def _running(r, settings, name, job_id):
    key = Keys(settings.prefix).worker(name)
    wait_for(lambda: job_id in (r.hget(key, "current_jobs") or ""), timeout=60,
             what=f"worker {name} runs {job_id}")


def test_a_warm_shutdown_lets_the_running_job_finish(processes, queue, r, settings,
                                                     cli):  # noqa: F811
    q = queue()
    proc = processes.worker("-q", q.name, "--name", "far")
    job = q.enqueue("tests.jobs:sleep", 1.5)
    _running(r, settings, "far", job.id)
    cli("shutdown", "far")                                 # the operator's command
    assert proc.wait(30) == 0
    assert job.get_status() == "finished"
    assert not r.exists(Keys(settings.prefix).worker("far"))   # the field went with it
    assert "warm shutdown asked from elsewhere" in processes.output(proc)


def test_a_cold_shutdown_gives_the_running_job_back_uncounted(processes, queue, r, settings):
    q = queue()
    proc = processes.worker("-q", q.name, "--name", "cold")
    job = q.enqueue("tests.jobs:sleep", 60)
    _running(r, settings, "cold", job.id)
    started = time.monotonic()
    send_shutdown_command(r, "cold", mode="cold", settings=settings)
    assert proc.wait(30) == 0 and time.monotonic() - started < 20   # not the job's 60 s
    fresh = q.fetch_job(job.id)
    assert fresh.get_status() == "queued" and fresh.attempts == 0


def test_an_idle_worker_hears_it_at_once_not_at_its_heartbeat(processes, queue, r, settings):
    """The control channel's message: the worker reads the request at once, though its
    next heartbeat is 60 s away."""
    q = queue()
    proc = processes.worker("-q", q.name, "--name", "idle",
                            env={"FUSIONWORKER_HEARTBEAT_INTERVAL": "60",
                                 "FUSIONWORKER_LEASE": "300"})
    wait_for(lambda: r.exists(Keys(settings.prefix).worker("idle")) or proc.poll() is not None,
             timeout=60, what="the worker registered")
    time.sleep(0.5)                                    # its first heartbeat is behind it
    assert proc.poll() is None
    asked = time.monotonic()
    send_shutdown_command(r, "idle", settings=settings)
    assert proc.wait(30) == 0 and time.monotonic() - asked < 15


def test_a_request_whose_message_was_lost_is_read_at_the_next_heartbeat(
        processes, queue, r, settings):
    """Crash point: the requester died after its write, before its PUBLISH (or the
    worker's pub/sub missed it): the heartbeat reads the field."""
    q = queue()
    proc = processes.worker("-q", q.name, "--name", "deaf")
    key = Keys(settings.prefix).worker("deaf")
    wait_for(lambda: r.exists(key) or proc.poll() is not None, timeout=60,
             what="the worker registered")
    r.hset(key, "shutdown", "warm")                    # written, never published
    assert proc.wait(30) == 0


def test_no_live_worker_of_that_name_is_refused_and_nothing_is_written(
        r, settings, cli):  # noqa: F811
    from fusionworker.command import send_shutdown_command as rqs_path

    assert rqs_path is send_shutdown_command           # RQ's module path
    key = Keys(settings.prefix).worker("nobody")
    with pytest.raises(InvalidOperation, match="no live worker named 'nobody'"):
        send_shutdown_command(r, "nobody", settings=settings)
    with pytest.raises(InvalidOperation, match="no live worker"):
        send_kill_horse_command(r, "nobody", settings=settings)
    for command in (send_shutdown_command, send_kill_horse_command, send_stop_job_command):
        with pytest.raises(TypeError, match="serializer= is not taken"):   # RQ's argument
            command(r, "nobody", object(), settings=settings)
    with pytest.raises(ValueError, match="mode must be"):
        admin.request_shutdown(r, "nobody", settings.prefix, "now")
    assert "no live worker named 'nobody'" in cli("shutdown", "nobody", code=1).output
    assert not r.exists(key)


def test_an_old_request_never_stops_a_new_worker_of_the_same_name(r, settings):
    """Crash point: a worker died with a request in its hash, which still lives; a new
    worker of the same name deletes the hash before it writes its own."""
    key = Keys(settings.prefix).worker("reborn")
    r.hset(key, mapping={"pid": os.getpid(), "shutdown": "cold"})
    w = Worker("default", r, settings=settings, name="reborn", defaults=False, middleware=[])
    w.register()
    try:
        assert r.hget(key, "shutdown") is None and r.hget(key, "name") == "reborn"
    finally:
        w.deregister()


def test_kill_horse_stops_the_running_job_and_the_worker_goes_on(processes, queue, r,
                                                                  settings):
    q = queue()
    proc = processes.worker("-q", q.name, "--name", "killer")
    job = q.enqueue("tests.jobs:sleep", 60)
    _running(r, settings, "killer", job.id)
    [stopped] = send_kill_horse_command(r, "killer", settings=settings)
    assert stopped.id == job.id
    wait_for(lambda: job.get_status() == "stopped", timeout=30, what="the job stopped")
    after = q.enqueue("tests.jobs:add", 2, 3)
    wait_for(lambda: after.get_status() == "finished", timeout=30, what="the next job")
    assert proc.poll() is None
