"""Every way a job can end, through a real forked horse and the worker's recording."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fusionworker.core.queue import Queue
from fusionworker.exceptions import FunctionNotAllowed, InvalidFunction
from tests.conftest import ROOT, worker_env
from tests.conftest import run_one as _run_one


def test_success_records_result(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:add", 2, 3)
    assert job.status == "finished" and job.result == 5 and job.attempts == 1
    assert job.error is None and job.duration is not None and job.worker_name


def test_raising_job_fails_with_traceback(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:boom", "kaputt")
    assert job.status == "failed" and job.failure_reason == "exception"
    assert job.error == "ValueError: kaputt"
    assert "raise ValueError(message)" in job.traceback


def test_timeout_by_death_penalty(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:sleep", 10, timeout=0.3)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert job.error_type == "JobTimeoutError" and "0.3" in job.error_message


@pytest.mark.slow
def test_timeout_when_the_job_ignores_sigalrm_is_a_hard_kill(queue, burst, settings):
    q = queue()
    # the alarm is armed before the module is imported: leave the import time under load
    j = q.enqueue("tests.jobs:ignore_alarm_and_sleep", 30, timeout=1.5)
    burst(settings=settings.replace(kill_grace=0.5))
    job = q.fetch_job(j.id)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert "killed" in job.error_message


@pytest.mark.parametrize("func, reason, text", [
    ("tests.jobs:segfault", "segfault", "SIGSEGV"),
    ("tests.jobs:hard_exit", "exit", "status 3"),
    ("tests.jobs:kill_self", "killed", "SIGKILL"),
])
def test_horse_deaths_are_named(queue, burst, func, reason, text):
    job = _run_one(queue, burst, func)
    assert job.status == "failed" and job.failure_reason == reason
    assert text in job.error_message


def test_unserializable_result_fails_clearly(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:not_serializable")
    assert job.status == "failed" and job.error_type == "ResultNotSerializable"


def test_refused_and_unknown_functions(queue, burst, r, settings):
    q = queue()
    # written by a producer that allows more than the worker (allow-list "tests")
    refused = Queue("default", r, settings=settings.replace(allowed_modules=("json",))).enqueue(
        "json:dumps", [1])
    before = q.count
    with pytest.raises(InvalidFunction):       # tests.jobs is imported here: checked at enqueue
        q.enqueue("tests.jobs:does_not_exist")
    with pytest.raises(FunctionNotAllowed):    # one except catches every refusal (a typo too)
        q.enqueue("tests.jobs:_private")
    assert q.count == before                   # nothing written
    r.hset(q.qkeys.job("missing"), mapping={"id": "missing", "queue": "default",
                                             "func": "tests.jobs:does_not_exist", "args": "[]"})
    r.zadd(q.qkeys.pending, {"missing": 1})
    nomodule = q.enqueue("tests.nope:x")
    burst()
    assert q.fetch_job(refused.id).failure_reason == "refused"
    assert "FUSIONWORKER_ALLOWED_MODULES=tests" in q.fetch_job(refused.id).error_message
    assert q.fetch_job("missing").error_type == "InvalidFunction"
    assert q.fetch_job(nomodule.id).error_type == "ModuleNotFoundError"


def test_a_worker_with_nothing_allowed_refuses_to_start(settings):
    """Default deny: no allow-list and nothing registered -> exit 1 and one line what to set."""
    proc = subprocess.run([sys.executable, str(ROOT / "run_worker.py"), "worker", "--burst"],
                          env=worker_env(settings, FUSIONWORKER_ALLOWED_MODULES=""),
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "FUSIONWORKER_ALLOWED_MODULES" in lines[0] and "FUSIONWORKER_IMPORTS" in lines[0]


def test_garbage_payloads_fail_and_the_worker_goes_on(queue, burst, r):
    q = queue()
    k = q.qkeys
    # an id in the queue with no record at all
    r.zadd(k.pending, {"ghost": 5 * 2**42})
    # a record whose args are not JSON
    r.hset(k.job("badjson"), mapping={"id": "badjson", "queue": "default",
                                       "func": "tests.jobs:add", "args": "{nope", "priority": 4})
    r.zadd(k.pending, {"badjson": 4 * 2**42})
    # a record with no function
    r.hset(k.job("nofunc"), mapping={"id": "nofunc", "queue": "default", "args": "[]"})
    r.zadd(k.pending, {"nofunc": 3 * 2**42})
    good = q.enqueue("tests.jobs:add", 1, 1)
    burst()
    assert q.fetch_job("ghost").status == "failed"
    assert q.fetch_job("ghost").error_type == "MalformedJob"
    bad = q.fetch_job("badjson")
    assert bad.status == "failed" and bad.failure_reason == "malformed"
    assert "not valid JSON" in bad.error_message
    assert q.fetch_job("nofunc").failure_reason == "malformed"
    assert q.fetch_job(good.id).result == 2
    assert set(q.job_ids("failed")) == {"ghost", "badjson", "nofunc"}


def test_events_of_jobs_a_job_enqueues_are_delivered(queue, burst, r, prefix, redis_url, settings):
    q = queue()
    q.enqueue("tests.jobs:enqueue_child", redis_url, prefix)
    burst()
    from fusionworker.events import flush_default_sinks, read_events
    flush_default_sinks(2.0)
    events = [doc for _, doc in read_events(r, prefix, queue="child")]
    assert [e["event"] for e in events] == ["queued"]
