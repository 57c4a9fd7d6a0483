"""Contracts inside: the reaper's outcomes are events and hooks,
every middleware hook is guarded alike."""

from __future__ import annotations

import time

from fusionworker.core.hooks import Middleware
from fusionworker.events import EventsMiddleware, MemorySink, read_events
from fusionworker.middleware.reaper import ReaperMiddleware, reap_once
from fusionworker.worker import Worker
from tests.cli.test_cli import cli  # noqa: F401 - fixture
from tests.middleware.test_reaper import claim, lost_twice
from tests.waiting import wait_for


def test_reaper_outcomes_are_events(queue, settings, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=1)
    sink = MemorySink()
    claim(q, worker="ghost.1")
    assert reap_once(r, settings, sink=sink)["reaped"] == [(q.name, job.id, "requeued")]
    lost_twice(q, job.id)
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
               defaults=False, middleware=[EventsMiddleware(sink), reaper, Broken(), rec])
    for expected in ("requeued", "abandoned"):
        if expected == "abandoned":
            lost_twice(q, job.id)
        claim(q)
        passes = reaper.passes            # a pass once the interval and the 100 ms lock are over
        wait_for(lambda p=passes: (reaper.on_tick(w), reaper.passes > p)[1], timeout=5)
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


def _burst_with_events(r, settings, prefix) -> None:
    """A burst worker on "default" whose events go to the stream, delivered when it ends."""
    from fusionworker.events import RedisStreamSink

    worker_sink = RedisStreamSink(r, prefix, flush_interval=0.01)
    w = Worker("default", r, settings=settings, burst=True,
               defaults=False, middleware=[EventsMiddleware(worker_sink)])
    assert w.work() == 0
    assert worker_sink.flush()
    worker_sink.close()


def test_events_of_one_job_are_in_time_order_though_the_producer_flushed_late(
        r, settings, prefix, cli):  # noqa: F811 - the fixture
    """The producer's buffered sink delivers ``queued`` after the worker's ``completed``
    (a sink of its own class: the plain stream sink's "queued" is the script's, below)."""
    import json

    from fusionworker.core.queue import Queue
    from fusionworker.events import RedisStreamSink, last_events

    class Buffered(RedisStreamSink):
        pass

    producer_sink = Buffered(r, prefix, flush_interval=3600)   # holds its events
    q = Queue("default", r, settings=settings, events=producer_sink)
    job = q.enqueue("tests.jobs:noop")
    time.sleep(0.005)                      # the worker's events happen later
    _burst_with_events(r, settings, prefix)
    assert producer_sink.flush()           # now, late
    producer_sink.close()
    arrival = [d["event"] for _, d in read_events(r, prefix, job_id=job.id)]
    assert arrival == ["processing", "completed", "queued"]       # the late delivery
    assert [d["event"] for _, d in last_events(r, prefix, job_id=job.id)] == [
        "queued", "processing", "completed"]
    out = cli("events", "--job", job.id, "--json").output.splitlines()
    assert [json.loads(line)["event"] for line in out] == ["queued", "processing", "completed"]


def test_the_queued_event_is_in_the_stream_before_the_job_can_start(r, settings, prefix):
    """With the plain stream sink, ``enqueue.lua`` XADDs "queued" with the job: it is in
    the stream though the producer's sink never flushed, ahead of the worker's events."""
    from fusionworker.core.queue import Queue
    from fusionworker.events import RedisStreamSink

    producer_sink = RedisStreamSink(r, prefix, flush_interval=3600)   # would hold its events
    q = Queue("default", r, settings=settings, events=producer_sink)
    job = q.enqueue("tests.jobs:noop")
    assert [d["event"] for _, d in read_events(r, prefix, job_id=job.id)] == ["queued"]
    assert producer_sink.stats()["buffered"] == 0
    _burst_with_events(r, settings, prefix)
    producer_sink.close()
    assert [d["event"] for _, d in read_events(r, prefix, job_id=job.id)] == [
        "queued", "processing", "completed"]


def test_a_producer_that_dies_right_after_enqueue_loses_no_queued_event(r, settings, prefix):
    """The crash point the script closes: the producer (a horse, a web process) ends with
    ``os._exit`` the moment ``enqueue`` returned, before its sink's thread could deliver
    anything; the plain stream sink's "queued" was written with the job. A sink of
    another class still buffers it, and it dies with the process."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT, worker_env

    code = (
        "import os\n"
        "from fusionworker import Queue\n"
        "from fusionworker.events import RedisStreamSink\n"
        "class Own(RedisStreamSink):\n"
        "    pass\n"
        "plain = Queue('default').enqueue('tests.jobs:noop')\n"
        "q = Queue('default')\n"
        "own = Queue('default', events=Own(q.connection, q.settings.prefix, flush_interval=60))\n"
        "print(plain.id, own.enqueue('tests.jobs:noop').id, flush=True)\n"
        "os._exit(0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=worker_env(settings),
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    plain, own = proc.stdout.split()
    assert [d["event"] for _, d in read_events(r, prefix, job_id=plain)] == ["queued"]
    history = r.lrange(f"{prefix}:{{default}}:job_events:{plain}", 0, -1)
    assert [json.loads(h)[1]["event"] for h in history] == ["queued"]
    assert read_events(r, prefix, job_id=own) == []        # the buffered one died with it
    assert r.exists(f"{prefix}:{{default}}:job:{own}")    # its job did not


def test_admin_state_changes_are_events(r, settings):
    """requeue (one and all), delete, empty and reprioritize each emit an event."""
    from fusionworker.core.queue import Queue

    sink = MemorySink()
    q = Queue("adm", r, settings=settings, events=sink)
    a = q.enqueue("tests.jobs:noop", max_retries=0)
    b = q.enqueue("tests.jobs:noop")
    c = q.enqueue("tests.jobs:noop")
    q.reprioritize(b.id, 5)
    q.delete(b.id)
    for tag in ("x", "y"):         # job a fails (abandoned) twice
        lost_twice(q, a.id)
        claim(q, worker=f"ghost.{tag}")
        reap_once(r, settings, sink=MemorySink())   # abandoned: lost under it 3 times
        if tag == "x":
            q.requeue(a.id)
    assert q.requeue_all_failed() == 1
    q.empty()
    got = [(d["event"], d["job_id"], d.get("reason")) for d in sink.docs]
    assert got == [
        ("queued", a.id, None), ("queued", b.id, None), ("queued", c.id, None),
        ("reprioritized", b.id, None), ("deleted", b.id, None),
        ("requeued", a.id, "manual"), ("requeued", a.id, "manual"),
        ("deleted", a.id, "emptied"), ("deleted", c.id, "emptied"),
    ]
    # a requeue of all names each job's function, as a single requeue does
    assert {d["function"] for d in sink.docs if d["event"] == "requeued"} == {"tests.jobs:noop"}
    assert sink.docs[4]["function"] == "tests.jobs:noop"      # the record read before delete
    # an emptied job's event names its function too
    assert [d["function"] for d in sink.docs if d.get("reason") == "emptied"] == [
        "tests.jobs:noop"] * 2


def test_cron_run_is_a_queued_event(r, settings):
    from fusionworker.core.queue import Queue
    from fusionworker.middleware import cron
    from tests.middleware.test_cron import server_now, set_due

    cron.register(r, settings, "tick", "0 3 * * *", "tests.jobs:noop", queue="crq")
    set_due(r, settings, "tick", server_now(r) - 1, queue="crq")
    sink = MemorySink()
    w = Worker("crq", r, settings=settings, burst=True,
               defaults=False, middleware=[EventsMiddleware(sink), cron.CronScheduler()])
    cron.CronScheduler().on_tick(w)
    [doc] = sink.docs
    assert doc["event"] == "queued" and doc["queue"] == "crq"
    assert doc["function"] == "tests.jobs:noop"
    assert Queue("crq", r, settings=settings, events=False).job_ids() == [doc["job_id"]]
