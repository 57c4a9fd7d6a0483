"""``fusionworker.testing``: users run their jobs inside their own test suites,
on a real Redis server and on fakeredis (with Lua)."""

from __future__ import annotations

from decimal import Decimal

import fakeredis
import pytest

from fusionworker import Queue
from fusionworker.testing import run_burst


@pytest.fixture(params=["redis", "fakeredis"])
def make_queue(request, r, settings):
    """The two recipes docs/testing.md gives: a real server with a prefix, or fakeredis."""
    client = r if request.param == "redis" else fakeredis.FakeRedis()

    def make(name="default"):
        return Queue(name, client, settings=settings)
    return make


def test_jobs_run_in_priority_then_fifo_order_with_their_results(make_queue):
    q = make_queue()
    low = q.enqueue("tests.jobs:add", 1, 1, priority=0)
    high1 = q.enqueue("tests.jobs:add", 2, 2, priority=5)
    high2 = q.enqueue("tests.jobs:add", 3, 3, priority=5)
    ran = run_burst(q)
    assert [j.id for j in ran] == [high1.id, high2.id, low.id]
    assert [j.result for j in ran] == [4, 6, 2]
    assert all(j.status == "finished" for j in ran)
    assert q.fetch_job(low.id).result == 2


def test_the_job_runs_in_this_process_so_monkeypatches_apply(make_queue, monkeypatch):
    monkeypatch.setattr("tests.jobs.patched_target", lambda value: f"patched {value}")
    q = make_queue()
    job = q.enqueue("tests.jobs:calls_patched_target", "x")
    [done] = run_burst(q)
    assert done.id == job.id and done.result == "patched x"


def test_arguments_and_results_cross_the_real_encoding(make_queue):
    q = make_queue()
    job = q.enqueue("tests.jobs:echo", Decimal("1.10"), when={1, 2})
    bad = q.enqueue("tests.jobs:not_serializable")
    ran = {j.id: j for j in run_burst(q)}
    assert ran[job.id].result == {"args": [Decimal("1.10")], "kwargs": {"when": {1, 2}}}
    assert ran[bad.id].status == "failed"
    assert ran[bad.id].error_type == "ResultNotSerializable"


def test_failures_are_recorded_as_a_worker_would(make_queue):
    q = make_queue()
    job = q.enqueue("tests.jobs:boom", "no credit")
    [done] = run_burst(q)
    assert done.status == "failed" and done.failure_reason == "exception"
    assert done.error_type == "ValueError" and "no credit" in done.traceback
    assert q.fetch_job(job.id).status == "failed"


def test_several_queues_and_max_jobs(make_queue):
    sms, email = make_queue("sms"), make_queue("email")
    for i in range(3):
        sms.enqueue("tests.jobs:add", i, 0)
        email.enqueue("tests.jobs:add", i, 10)
    first = run_burst([sms, email], max_jobs=2)
    assert len(first) == 2
    rest = run_burst([sms, email])
    assert len(rest) == 4
    assert sorted(j.result for j in first + rest) == [0, 1, 2, 10, 11, 12]


def test_an_async_job_runs_in_process_too(make_queue):
    q = make_queue()
    q.enqueue("tests.jobs:async_add", 20, 22)
    [done] = run_burst(q)
    assert done.status == "finished" and done.result == 42


def test_a_job_over_its_timeout_fails_as_a_timeout(make_queue):
    q = make_queue()
    q.enqueue("tests.jobs:sleep", 5, timeout=0.2)
    [done] = run_burst(q)
    assert done.status == "failed" and done.failure_reason == "timeout"


def test_dependents_are_released_and_run_in_the_same_burst(make_queue):
    q = make_queue()
    parent = q.enqueue("tests.jobs:add", 1, 2)
    child = q.enqueue("tests.jobs:add", 3, 4, depends_on=parent)
    ran = run_burst(q)
    assert [j.id for j in ran] == [parent.id, child.id]
    assert q.fetch_job(child.id).status == "finished" and q.fetch_job(child.id).result == 7


def test_a_failed_parent_cancels_its_dependent(make_queue):
    q = make_queue()
    parent = q.enqueue("tests.jobs:boom")
    child = q.enqueue("tests.jobs:add", 3, 4, depends_on=parent)
    assert [j.id for j in run_burst(q)] == [parent.id]
    assert q.fetch_job(child.id).status == "canceled"


def test_a_batch_fires_its_callbacks_in_the_same_burst(make_queue):
    from fusionworker import Batch

    q = make_queue()
    with Batch(on_success="tests.jobs:echo", on_complete="tests.jobs:echo", queue=q) as batch:
        jobs = [q.enqueue("tests.jobs:add", i, i, batch=batch) for i in range(3)]
    ran = run_burst(q)
    callbacks = batch.callback_ids()
    assert {j.id for j in ran} == {j.id for j in jobs} | set(callbacks.values())
    assert all(q.fetch_job(cid).status == "finished" for cid in callbacks.values())


def test_a_middleware_list_of_ones_own_keeps_the_dependency_middleware(make_queue):
    from fusionworker.core.workflows import DependencyMiddleware
    from fusionworker.testing import InProcessWorker

    q = make_queue()
    w = InProcessWorker(q.name, q.connection, settings=q.settings, middleware=[])
    assert [type(mw) for mw in w.middleware] == [DependencyMiddleware]


def test_a_worker_with_the_event_log_on_has_its_scripts_write_the_events(make_queue):
    """A test suite that adds the event log to its in-process worker (fakeredis with Lua
    too): claim.lua and finish.lua write the job's events, as in a real worker."""
    from fusionworker.events import EventsMiddleware, read_events
    from fusionworker.testing import InProcessWorker

    q = make_queue()
    job = q.enqueue("tests.jobs:add", 1, 2, priority=3)
    events = EventsMiddleware()
    InProcessWorker(q.name, q.connection, settings=q.settings, burst=True,
                    middleware=[events]).work()
    assert events.scripted and q.fetch_job(job.id).result == 3
    docs = [doc for _, doc in read_events(q.connection, q.settings.prefix, job_id=job.id)]
    assert [d["event"] for d in docs] == ["queued", "processing", "completed"]
    assert [d["attempt"] for d in docs] == [0, 1, 1] and docs[1]["priority"] == 3
    assert docs[1]["wait_time"] >= 0 and docs[2]["duration"] >= 0
