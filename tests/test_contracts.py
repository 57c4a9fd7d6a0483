"""Contracts inside (issue 12): the reaper's outcomes are events and hooks,
every middleware hook is guarded alike."""

from __future__ import annotations

import time

from fusionworker.events import EventsMiddleware, MemorySink, read_events
from fusionworker.middleware import Middleware
from fusionworker.reaper import ReaperMiddleware, reap_once
from fusionworker.worker import Worker
from tests.test_cli import cli  # noqa: F401 - fixture
from tests.test_reaper import claim


def test_reaper_outcomes_are_events(queue, settings, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=1)
    sink = MemorySink()
    claim(q, worker="ghost.1")
    assert reap_once(r, settings, sink=sink)["reaped"] == [(q.name, job.id, "requeued")]
    claim(q, worker="ghost.2")
    assert reap_once(r, settings, sink=sink)["reaped"] == [(q.name, job.id, "abandoned")]
    got = [(d["event"], d["job_id"], d.get("worker")) for d in sink.docs]
    assert got == [("requeued", job.id, "ghost.1"), ("abandoned", job.id, "ghost.2")]
    assert sink.docs[1]["error_type"] == "Abandoned"


def test_reaper_without_a_sink_writes_to_the_default_stream(queue, settings, r, prefix):
    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=3)
    claim(q)
    reap_once(r, settings)
    from fusionworker.events import flush_default_sinks
    assert flush_default_sinks(5.0)
    events = [e["event"] for _, e in read_events(r, prefix, job_id=job.id)]
    assert "requeued" in events


class Recorder(Middleware):
    def __init__(self) -> None:
        self.reaped: list[tuple[str, str, str]] = []

    def on_job_reaped(self, worker, job, outcome):
        self.reaped.append((job.id, job.status, outcome))


class Broken(Middleware):
    def on_job_reaped(self, worker, job, outcome):
        raise RuntimeError("broken plugin")

    def describe(self):
        raise RuntimeError("broken describe")


def test_reaper_calls_on_job_reaped_on_every_middleware_guarded(queue, settings, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=1)
    s = settings.replace(reaper_interval=0.05)
    rec, sink = Recorder(), MemorySink()
    reaper = ReaperMiddleware(s)
    w = Worker(q.name, r, settings=s, burst=True,
               middleware=[EventsMiddleware(sink), reaper, Broken(), rec])
    for expected in ("requeued", "abandoned"):
        claim(q)
        time.sleep(0.12)                  # past the interval and the 100 ms lock
        reaper.on_tick(w)
        assert rec.reaped[-1] == (job.id, "queued" if expected == "requeued" else "failed",
                                  expected)
    assert [d["event"] for d in sink.docs] == ["requeued", "abandoned"]


def test_describe_that_raises_does_not_end_the_worker(burst, queue, r, settings):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    w = burst(q.name, middleware=[Broken()])
    assert w.successful == 1
    assert q.fetch_job(job.id).status == "finished"
    assert w.heartbeat() is True
    assert r.hget(w.key, "last_heartbeat")


def test_events_of_one_job_are_in_time_order_though_the_producer_flushed_late(
        r, settings, prefix, cli):  # noqa: F811 - the fixture
    """The producer's buffered sink delivers ``queued`` after the worker's ``completed``."""
    import json

    from fusionworker.events import RedisStreamSink, last_events
    from fusionworker.queue import Queue

    producer_sink = RedisStreamSink(r, prefix, flush_interval=3600)   # holds its events
    q = Queue("default", r, settings=settings, events=producer_sink)
    job = q.enqueue("tests.jobs:noop")
    time.sleep(0.005)                      # the worker's events happen later
    worker_sink = RedisStreamSink(r, prefix, flush_interval=0.01)
    w = Worker("default", r, settings=settings, burst=True,
               middleware=[EventsMiddleware(worker_sink)])
    assert w.work() == 0
    assert worker_sink.flush()
    worker_sink.close()
    assert producer_sink.flush()           # now, late
    producer_sink.close()
    arrival = [d["event"] for _, d in read_events(r, prefix, job_id=job.id)]
    assert arrival == ["processing", "completed", "queued"]       # the late delivery
    assert [d["event"] for _, d in last_events(r, prefix, job_id=job.id)] == [
        "queued", "processing", "completed"]
    out = cli("events", "--job", job.id, "--json").output.splitlines()
    assert [json.loads(line)["event"] for line in out] == ["queued", "processing", "completed"]
