"""What Redis holds reaches the operator's terminal as text, never as its commands, and
one value no listing can show costs that value only: ``events``, ``job show``, ``job
list`` and ``info`` over records a job or another program wrote."""

from __future__ import annotations

import os
import time

import pytest
import redis
from click.testing import CliRunner

from fusionworker.cli import main
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue

#: an error text that would retitle a terminal (OSC), clear it and colour it (CSI)
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mfake: all jobs finished\x9b"


@pytest.fixture
def run(settings, prefix):
    def invoke(*args: str) -> tuple[int, str]:
        env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": prefix,
               "FUSIONWORKER_ALLOWED_MODULES": "tests", "FUSIONWORKER_LOG_LEVEL": "WARNING"}
        result = CliRunner().invoke(main, list(args), env=env)
        assert "Traceback" not in result.output and "unexpected error" not in result.output
        return result.exit_code, result.output
    return invoke


def test_a_jobs_own_text_is_shown_never_obeyed(run, r, settings, prefix, redis_url):
    job = Queue("default", r, settings=settings).enqueue("tests.jobs:add", 1, 2)
    raw = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    raw.hset(keys.queue("default").job(job.id), mapping={
        "status": "failed", "error_type": "ValueError", "error_message": HOSTILE,
        "traceback": f"In the job:\n  {HOSTILE}\n", "progress_message": HOSTILE,
        "progress": "0.5", "failure_reason": "exception"})
    raw.zadd(keys.queue("default").failed, {job.id: time.time()})
    raw.xadd(keys.events, {"event": "failed", "job_id": job.id, "queue": "default",
                           "function": "tests.jobs:add", "error_type": "ValueError",
                           "error_message": HOSTILE, "@timestamp": "2026-01-01T00:00:00Z"})
    for args in (["job", "show", job.id], ["job", "list", "-s", "failed"],
                 ["events", "-q", "default"]):
        code, output = run(*args)
        assert code == 0, (args, output)
        assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output, args
        assert "\\x1b]0;owned\\x07" in output, (args, output)    # shown, as text


def test_one_unreadable_event_or_batch_reference_costs_that_value_only(run, r, settings,
                                                                       prefix, redis_url):
    job = Queue("default", r, settings=settings).enqueue("tests.jobs:add", 1, 2)
    raw = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    raw.xadd(keys.events, {"event": "completed", "job_id": job.id, "queue": "default",
                           "@timestamp": "0001-01-01T00:00:00+14:00"})   # no local clock
    raw.xadd(keys.events, {"event": "completed", "job_id": job.id, "queue": "default",
                           "duration": "x", "wait_time": "inf", "progress": "half"})
    raw.hset(keys.queue("default").job(job.id), "batch", ":")
    raw.set(keys.queue("default").base + "max_active", "x")
    code, output = run("events", "-q", "default")
    assert code == 0 and "queued" in output and "in 'x'" in output, output
    assert "0001-01-01T00:00:00+14:00" in output, output
    code, output = run("job", "show", job.id)
    assert code == 0 and "batch     ':' (names no queue" in output, output
    for args in (["info"], ["info", "--json"], ["queue", "list"]):
        code, output = run(*args)
        assert code == 0, (args, output)


def test_what_any_program_wrote_into_redis_is_shown_never_obeyed(run, r, settings, prefix,
                                                                  redis_url):
    """A worker's heartbeat and a cron entry's fields, as another program may write
    them: every listing shows their control characters as text."""
    from fusionworker.core import cron

    raw = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    now = int(time.time())
    raw.sadd(keys.workers, "w1")
    raw.hset(keys.worker("w1"), mapping={
        "name": "w1" + HOSTILE, "host": "vm" + HOSTILE, "pid": "1", "state": "busy",
        "queues": "default" + HOSTILE, "last_heartbeat": now, "birth": now,
        "throttle": "memory" + HOSTILE})
    raw.expire(keys.worker("w1"), 600)
    cron.register(r, settings, "c1", "@hourly", "tests.jobs:add")
    raw.hset(keys.queue("default").cron_entry("c1"),
             mapping={"func": "tests.jobs:add" + HOSTILE, "last_status": "queued" + HOSTILE})
    for args in (["info"], ["info", "-W"], ["cron", "list"], ["queue", "list"]):
        code, output = run(*args)
        assert code == 0, (args, output)
        assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output, args


def test_a_jobs_error_neither_drives_the_terminal_nor_forges_a_line_of_the_worker_log(
        r, settings, prefix):
    """The worker's text log writes a job's error message with its control characters
    as text: no escape sequence reaches the terminal, and a newline in it cannot make
    a line of its own that reads like the worker's."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    forged = "12:00:00 INFO    all jobs finished"
    Queue("default", r, settings=settings).enqueue(
        "tests.jobs:boom", HOSTILE + "\n" + forged, max_retries=0)
    env = {**os.environ, "REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests", "FUSIONWORKER_LOG_FORMAT": "text"}
    done = subprocess.run([sys.executable, "-m", "fusionworker", "worker", "-q", "default",
                           "--burst"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    log = done.stdout + done.stderr
    assert "failed" in log and "\\x1b]0;owned\\x07" in log, log
    assert "\x1b" not in log and "\x07" not in log and "\x9b" not in log
    assert not any(line.startswith(forged) for line in log.splitlines()), log
