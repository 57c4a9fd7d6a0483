"""The worker's and the producer's side of the event log (in-process, fast)."""

from __future__ import annotations

import pytest

from fusionworker.core.queue import Queue
from fusionworker.events import (
    FIELDS,
    EventsMiddleware,
    MemorySink,
    RedisStreamSink,
    default_sink,
    emit_job_event,
    flush_default_sinks,
    last_events,
    make_event,
    outcome_event,
    read_events,
)
from fusionworker.worker import Outcome

pytestmark = pytest.mark.timeout(30)


def by_job(docs: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for doc in docs:
        out.setdefault(doc["job_id"], []).append(doc["event"])
    return out


def test_worker_emits_processing_then_the_outcome_of_every_job(r, settings, burst):
    q = Queue("ev", r, settings=settings, events=False)
    ok = q.enqueue("tests.jobs:add", 1, 2, priority=10)
    bad = q.enqueue("tests.jobs:boom", "no luck")
    slow = q.enqueue("tests.jobs:sleep", 5, timeout=0.3)
    flaky = q.enqueue("tests.jobs:conn_error", max_retries=1, retry_delay=60)
    # a producer that allows more than the worker does: the worker refuses it
    refused = Queue("ev", r, settings=settings.replace(allowed_modules=("json",)),
                    events=False).enqueue("json:dumps", 1)
    sink = MemorySink()
    w = burst("ev", middleware=[EventsMiddleware(sink)])
    events = by_job(sink.docs)
    assert events == {
        ok.id: ["processing", "completed"], bad.id: ["processing", "failed"],
        slow.id: ["processing", "timeout"], flaky.id: ["processing", "retry"],
        refused.id: ["processing", "failed"],
    }
    for doc in sink.docs:
        assert tuple(doc) == FIELDS
        assert doc["worker"] == w.name and doc["host"] == w.host and doc["queue"] == "ev"
        assert doc["attempt"] == 1
        if doc["event"] == "processing":
            assert doc["wait_time"] is not None and doc["wait_time"] >= 0
            assert doc["duration"] is None
        else:
            assert doc["duration"] > 0 and doc["wait_time"] is None
    done = {d["job_id"]: d for d in sink.docs if d["event"] != "processing"}
    assert done[ok.id]["priority"] == 10 and done[ok.id]["function"] == "tests.jobs:add"
    assert done[ok.id]["error_type"] is None and done[ok.id]["reason"] is None
    assert (done[bad.id]["error_type"], done[bad.id]["error_message"],
            done[bad.id]["reason"]) == ("ValueError", "no luck", "exception")
    assert done[slow.id]["reason"] == "timeout"
    assert done[flaky.id]["error_type"] == "ConnectionError"
    assert done[refused.id]["reason"] == "refused"
    assert done[refused.id]["error_type"] == "FunctionNotAllowed"
    assert sink.stats()["delivered"] == 10


def test_outcome_mapping_including_cold_shutdown_requeue():
    assert outcome_event("finished", "ok") == "completed"
    assert outcome_event("retry", "exception") == "retry"
    assert outcome_event("failed", "timeout") == "timeout"
    assert outcome_event("failed", "abandoned") == "abandoned"
    assert outcome_event("failed", "segfault") == "failed"
    assert outcome_event("requeued", "shutdown") == "requeued"

    class FakeWorker:
        name, host = "w.1", "box"

    sink = MemorySink()
    mw = EventsMiddleware(sink)
    job = {"id": "j1", "queue": "sms", "func": "m:f", "priority": 0, "attempts": 1}
    mw.after_finish(FakeWorker(), _Attr(job), Outcome(status="requeued", reason="shutdown",
                                                      duration=0.2))
    # an attempt the reaper took back meanwhile: the reaper reports it, not the worker
    mw.after_finish(FakeWorker(), _Attr(job), Outcome(status="finished", reason="ok",
                                                      recorded=False))
    assert [(d["event"], d["reason"]) for d in sink.docs] == [("requeued", "shutdown")]


class _Attr:
    def __init__(self, data: dict) -> None:
        self.__dict__.update(data)


def test_middleware_makes_its_sink_reports_in_the_heartbeat_and_closes(r, settings, burst,
                                                                       prefix):
    q = Queue("ev", r, settings=settings, events=False)
    job = q.enqueue("tests.jobs:noop")
    mw = EventsMiddleware()
    w = burst("ev", middleware=[mw])
    assert isinstance(mw.sink, RedisStreamSink)
    assert mw.sink.stats()["buffered"] == 0 and mw.sink._closed  # closed at stop, flushed
    assert [e["event"] for _, e in read_events(r, prefix, job_id=job.id)] == [
        "processing", "completed"]
    described = mw.describe()
    assert described == {"events_buffered": 0, "events_dropped": 0, "events_errors": 0}
    assert w.state == "idle"


def test_heartbeat_hash_carries_the_sink_counters(r, settings):
    from fusionworker.worker import Worker

    sink = MemorySink()
    w = Worker("ev", r, settings=settings, defaults=False, middleware=[EventsMiddleware(sink)])
    w.register()
    try:
        w.heartbeat()
        data = r.hgetall(w.key)
        assert (data["events_buffered"], data["events_dropped"]) == ("0", "0")
    finally:
        w.deregister()


def test_queue_emits_queued_and_canceled_through_one_shared_sink(r, settings, prefix):
    a = Queue("sms", r, settings=settings)
    b = Queue("email", r, settings=settings)
    job = a.enqueue("tests.jobs:add", 1, 2)
    later = b.enqueue_in(600, "tests.jobs:noop")
    b.cancel(later.id)
    assert a._events is b._events is default_sink(settings, r)
    assert flush_default_sinks()
    docs = [e for _, e in read_events(r, prefix)]
    assert [(d["event"], d["job_id"]) for d in docs] == [
        ("queued", job.id), ("queued", later.id), ("canceled", later.id)]
    assert docs[0]["function"] == "tests.jobs:add" and "worker" not in docs[0]


def test_queue_events_false_disables_and_any_sink_is_accepted(r, settings, prefix):
    Queue("sms", r, settings=settings, events=False).enqueue("tests.jobs:noop")
    sink = MemorySink()
    Queue("sms", r, settings=settings, events=sink).enqueue("tests.jobs:noop")
    assert flush_default_sinks()
    assert read_events(r, prefix) == []
    assert [d["event"] for d in sink.docs] == ["queued"]


def test_default_sink_is_one_per_settings(r, settings):
    other = settings.replace(prefix=settings.prefix + "x")
    assert default_sink(settings, r) is default_sink(settings, r)
    assert default_sink(other, r) is not default_sink(settings, r)


def test_emit_job_event_for_the_reaper(r, settings, prefix):
    from fusionworker.worker import Worker

    job = {"id": "j9", "queue": "sms", "func": "m:f", "priority": 0, "attempts": 3}
    sink = MemorySink()
    w = Worker("sms", r, settings=settings, defaults=False, middleware=[EventsMiddleware(sink)])
    emit_job_event(w, "abandoned", job, worker="dead.1", reason="abandoned",
                   error_type="Abandoned", error_message="worker dead.1 stopped heartbeating")
    assert sink.docs[0]["event"] == "abandoned" and sink.docs[0]["worker"] == "dead.1"
    emit_job_event(settings, "requeued", job, connection=r, reason="worker died")
    bare = Worker("sms", r, settings=settings, defaults=False, middleware=[])
    emit_job_event(bare, "requeued", job, reason="worker died")
    assert flush_default_sinks()
    assert [e["reason"] for _, e in read_events(r, prefix)] == ["worker died", "worker died"]
    with pytest.raises(ValueError):
        emit_job_event(sink, "exploded", job)


def test_last_events_returns_the_newest_matching_oldest_first(r, prefix):
    sink = RedisStreamSink(r, prefix, flush_interval=0.01)
    for i in range(30):
        sink.emit(make_event("queued", {"id": f"j{i}", "queue": "a" if i % 2 else "b"}))
    assert sink.flush()
    sink.close()
    assert [e["job_id"] for _, e in last_events(r, prefix, count=3)] == ["j27", "j28", "j29"]
    assert [e["job_id"] for _, e in last_events(r, prefix, queue="a", count=2)] == ["j27", "j29"]
    ids = [i for i, _ in read_events(r, prefix)]
    assert [e["job_id"] for _, e in last_events(r, prefix, count=2, until=ids[9])] == ["j8", "j9"]
    assert last_events(r, prefix, job_id="nope") == []
