"""OpenTelemetry (extra [otel]): the queue.* instruments and producer -> job traces.

The real SDK everywhere: the test process traces and counts with
``InMemorySpanExporter`` / ``InMemoryMetricReader``; the horses (forked by
the worker's fork server, another interpreter) use the real SDK with a
JSON-lines file exporter (``tests/otel_setup.py``) that the test reads.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from fusionworker.core import tracing
from fusionworker.core.hooks import Middleware
from fusionworker.core.job import Job
from fusionworker.core.queue import Queue
from fusionworker.exceptions import PriorityOutOfRange
from fusionworker.middleware import otel
from fusionworker.middleware.otel import OtelMiddleware
from fusionworker.runtime.launch import LaunchSpec, OwnForkLauncher
from fusionworker.worker import Worker, default_middleware
from tests.otel_setup import JsonLinesSpanExporter, read_spans
from tests.waiting import wait_for


class Telemetry:
    def __init__(self, tmp_path: Any) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.horse_file = str(tmp_path / "horse-spans.jsonl")

    def horse_spans(self, n: int) -> list[dict[str, Any]]:
        """Wait for ``n`` spans from the horses (they flush after reporting), sorted by start."""
        spans = wait_for(lambda: (lambda s: s if len(s) >= n else None)(
            read_spans(self.horse_file)))
        assert len(spans) == n, spans
        return sorted(spans, key=lambda s: s["start_time"])

    def points(self, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        """Data points of metric ``name`` by sorted attributes."""
        out = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            out[tuple(sorted(point.attributes.items()))] = point
        return out


@pytest.fixture
def tel(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    t = Telemetry(tmp_path)
    monkeypatch.setenv("FW_TEST_OTEL_SPANS", t.horse_file)   # read by the fork server
    otel.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    assert Queue.enqueue_call is not Queue._fw_plain           # the traced one is in place
    yield t
    otel.uninstrument()
    tracing.set_horse_tracing(None)
    assert "_fw_plain" not in Queue.__dict__                   # and taken out again


@pytest.fixture
def otel_settings(settings: Any) -> Any:
    return settings.replace(otel=True, otel_setup="tests.otel_setup:setup", retry_jitter=0.0)


def run_burst(r: Any, settings: Any, tel: Telemetry, queues: str = "default") -> OtelMiddleware:
    mw = OtelMiddleware(settings, meter_provider=tel.meter_provider)
    worker = Worker(queues, r, settings=settings, burst=True, defaults=False, middleware=[mw])
    assert worker.work() == 0
    return mw


def hexid(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


def producer_spans(tel: Telemetry) -> list[Any]:
    return [s for s in tel.spans.get_finished_spans() if s.kind == SpanKind.PRODUCER]


def test_enqueue_and_run_give_a_producer_and_a_consumer_span_in_one_trace(r, otel_settings, tel):
    q = Queue("default", r, settings=otel_settings)
    job = q.enqueue("tests.jobs:add", 2, 3, priority=10)
    [send] = producer_spans(tel)
    assert send.name == "send default"
    assert send.attributes["messaging.system"] == "fusionworker"
    assert send.attributes["messaging.destination.name"] == "default"
    assert send.attributes["messaging.message.id"] == job.id
    assert send.attributes["fusionworker.job.function"] == "tests.jobs:add"
    assert send.attributes["fusionworker.job.deduplicated"] is False
    # the W3C trace context of the producer span is in the job record
    trace_id, span_id = hexid(send.context.trace_id, 32)[2:], hexid(send.context.span_id, 16)[2:]
    flags = f"{int(send.context.trace_flags):02x}"
    assert int(flags, 16) & 1                              # sampled
    assert r.hget(q.qkeys.job(job.id), "traceparent") == f"00-{trace_id}-{span_id}-{flags}"

    run_burst(r, otel_settings, tel)
    assert q.fetch_job(job.id).result == 5
    [process] = tel.horse_spans(1)
    assert process["name"] == "process default"
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["context"]["trace_id"] == hexid(send.context.trace_id, 32)
    assert process["parent_id"] == hexid(send.context.span_id, 16)
    attrs = process["attributes"]
    assert attrs["messaging.system"] == "fusionworker"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.destination.name"] == "default"
    assert attrs["messaging.message.id"] == job.id
    assert attrs["fusionworker.job.attempt"] == 1
    assert attrs["fusionworker.job.priority"] == 10
    assert attrs["fusionworker.job.outcome"] == "ok"
    assert process["status"]["status_code"] == "UNSET"
    assert process["events"] == []


def test_a_failed_job_span_has_the_exception_and_error_status(r, otel_settings, tel):
    q = Queue("default", r, settings=otel_settings)
    job = q.enqueue("tests.jobs:boom", "kaput")
    run_burst(r, otel_settings, tel)
    assert q.fetch_job(job.id).status == "failed"
    [process] = tel.horse_spans(1)
    assert process["context"]["trace_id"] == hexid(producer_spans(tel)[0].context.trace_id, 32)
    assert process["status"]["status_code"] == "ERROR"
    assert process["status"]["description"] == "ValueError: kaput"
    assert process["attributes"]["fusionworker.job.outcome"] == "exception"
    assert process["attributes"]["error.type"] == "ValueError"
    [event] = process["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "kaput"
    assert "raise ValueError(message)" in event["attributes"]["exception.stacktrace"]


def test_a_retried_job_gives_one_span_per_attempt_in_one_trace(r, otel_settings, tel,
                                                              redis_url, prefix):
    q = Queue("default", r, settings=otel_settings)
    job = q.enqueue("tests.jobs:flaky", redis_url, f"{prefix}:flaky", 2, max_retries=3,
                    retry_delay=0.0)
    run_burst(r, otel_settings, tel)
    assert q.fetch_job(job.id).status == "finished"
    [send] = producer_spans(tel)
    spans = tel.horse_spans(3)
    assert [s["attributes"]["fusionworker.job.attempt"] for s in spans] == [1, 2, 3]
    assert [s["attributes"]["fusionworker.job.outcome"] for s in spans] == [
        "exception", "exception", "ok"]
    assert [s["status"]["status_code"] for s in spans] == ["ERROR", "ERROR", "UNSET"]
    assert all(s["attributes"]["fusionworker.job.retryable"] for s in spans[:2])
    assert {s["context"]["trace_id"] for s in spans} == {hexid(send.context.trace_id, 32)}
    assert {s["parent_id"] for s in spans} == {hexid(send.context.span_id, 16)}
    assert len({s["context"]["span_id"] for s in spans}) == 3


def test_the_five_queue_instruments_carry_the_values_of_a_known_run(r, otel_settings, tel):
    q = Queue("default", r, settings=otel_settings)
    ids = [q.enqueue("tests.jobs:add", 1, 1, priority=10).id for _ in range(2)]
    ids.append(q.enqueue("tests.jobs:add", 1, 2, job_id="fixed").id)
    ids.append(q.enqueue("tests.jobs:boom").id)
    assert q.enqueue("tests.jobs:add", 1, 2, job_id="fixed").deduplicated   # not counted
    high, normal = ("band", "high"), ("band", "normal")
    where = ("queue", "default")

    def key(*attrs: tuple[str, Any]) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted(attrs))

    mw = OtelMiddleware(otel_settings, meter_provider=tel.meter_provider)
    worker = Worker("default", r, settings=otel_settings, burst=True, defaults=False,
                    middleware=[mw])
    mw.on_start(worker)          # the depth callback reads the worker's queues from Redis
    depth = tel.points("queue.depth")
    assert {k: p.value for k, p in depth.items()} == {
        key(where, high): 2, key(where, normal): 2, key(where, ("band", "low")): 0}
    assert worker.work() == 0
    assert [q.fetch_job(i).status for i in ids] == ["finished"] * 3 + ["failed"]

    enq = tel.points("queue.enqueue.total")
    assert {k: p.value for k, p in enq.items()} == {key(where, high): 2, key(where, normal): 2}
    sched = tel.points("queue.schedule.total")
    assert {k: p.value for k, p in sched.items()} == {key(where, high): 2, key(where, normal): 2}
    active = tel.points("queue.active")      # +1 at each claim, -1 at each outcome
    assert {k: p.value for k, p in active.items()} == {key(where, high): 0, key(where, normal): 0}
    wait = tel.points("queue.wait_time")
    assert {k: p.count for k, p in wait.items()} == {key(where, high): 2, key(where, normal): 2}
    assert all(p.min >= 0 for p in wait.values())
    depth = tel.points("queue.depth")
    assert {p.value for p in depth.values()} == {0}
    outcomes = tel.points("fusionworker.job.outcomes")
    assert {k: p.value for k, p in outcomes.items()} == {
        key(where, ("status", "finished"), ("reason", "ok")): 3,
        key(where, ("status", "failed"), ("reason", "exception")): 1}
    duration = tel.points("fusionworker.job.duration")
    assert {k: p.count for k, p in duration.items()} == {
        key(where, ("status", "finished")): 3, key(where, ("status", "failed")): 1}


def test_an_unreachable_otlp_endpoint_does_not_hold_jobs_back(r, settings, processes, queue):
    """Built-in OTLP set-up, collector on a closed loopback port; the horses' flush may
    take longer than this test's whole wait (20 s), so jobs can only all finish in time
    if no outcome waits for it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()                                     # nothing listens there now
    q = queue("default")
    ids = [q.enqueue("tests.jobs:add", i, i).id for i in range(8)]
    proc = processes.worker("-q", "default", env={
        "FUSIONWORKER_OTEL": "on", "FUSIONWORKER_OTEL_FLUSH_TIMEOUT": "20",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "20", "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    wait_for(lambda: all(r.hget(q.qkeys.job(i), "status") == "finished" for i in ids))
    assert [q.fetch_job(i).result for i in ids] == [2 * i for i in range(8)]
    # tracing was on: the horses did try to export their spans (and are still retrying)
    wait_for(lambda: "/v1/traces" in processes.output(proc)
             and "Connection refused" in processes.output(proc))


def test_switched_off_nothing_is_traced_counted_or_stored(r, settings, queue, burst):
    assert settings.otel is False                              # the default
    assert not any(isinstance(mw, OtelMiddleware) for mw in default_middleware(settings))
    assert tracing.producer is None and tracing.horse_tracing is None       # the hot paths' one test
    assert "_fw_plain" not in Queue.__dict__                   # enqueue_call is the plain one
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2)
    burst()
    assert q.fetch_job(job.id).result == 3
    assert tracing.producer is None and tracing.horse_tracing is None
    fields = r.hkeys(q.qkeys.job(job.id))
    assert "id" in fields and not {"traceparent", "tracestate"} & set(fields)


def test_otel_on_without_a_setup_function_is_a_clear_error(settings):
    with pytest.raises(ValueError, match="expected module:function"):
        tracing._configured = False
        try:
            otel.configure_sdk("no_colon_here")
        finally:
            tracing._configured = False


def test_a_refused_enqueue_ends_its_span_with_the_error_and_counts_nothing(r, otel_settings, tel):
    q = Queue("default", r, settings=otel_settings)
    with pytest.raises(PriorityOutOfRange):
        q.enqueue("tests.jobs:add", 1, 2, priority=5000)
    [send] = producer_spans(tel)
    assert send.status.status_code == StatusCode.ERROR
    assert [e.attributes["exception.type"] for e in send.events] == [
        "fusionworker.exceptions.PriorityOutOfRange"]
    assert "messaging.message.id" not in send.attributes
    assert tel.points("queue.enqueue.total") == {}
    assert q.count == 0


def test_a_job_that_enqueues_gives_a_producer_span_under_its_consumer_span(
        r, otel_settings, tel, monkeypatch, redis_url, prefix):
    monkeypatch.setenv("FUSIONWORKER_OTEL", "on")   # the horse's own Queue reads it
    q = Queue("default", r, settings=otel_settings)
    job = q.enqueue("tests.jobs:enqueue_child_with_env_settings", redis_url, prefix)
    run_burst(r, otel_settings, tel)
    child_id = q.fetch_job(job.id).result
    process, send_child = sorted(tel.horse_spans(2), key=lambda s: s["kind"])
    assert process["kind"] == "SpanKind.CONSUMER" and send_child["kind"] == "SpanKind.PRODUCER"
    assert send_child["name"] == "send child"
    assert send_child["attributes"]["messaging.message.id"] == child_id
    assert send_child["parent_id"] == process["context"]["span_id"]
    assert send_child["context"]["trace_id"] == process["context"]["trace_id"]
    child = Queue("child", r, settings=otel_settings).fetch_job(child_id)
    assert child.traceparent.split("-")[1:3] == [process["context"]["trace_id"][2:],
                                                 send_child["context"]["span_id"][2:]]


def test_the_jobs_of_an_async_horse_each_get_their_own_span(r, otel_settings, tel,
                                                            monkeypatch, redis_url, prefix):
    """Three ``async def`` jobs at once on one horse (``--async-per-horse``): one CONSUMER
    span each, under its own producer span; what a job enqueues is under its own job's
    span, not a mate's (the span is current in its task only); a failure is an error."""
    monkeypatch.setenv("FUSIONWORKER_OTEL", "on")   # the horse's own Queue reads it
    s = otel_settings.replace(horse_jobs=100, async_per_horse=10, concurrency=4)
    q = Queue("default", r, settings=s)
    jobs = [q.enqueue("tests.async_horse_jobs:enqueue_child_after", redis_url, prefix, 0.3)
            for _ in range(3)]
    boom = q.enqueue("tests.jobs:async_boom", "async kaput")
    run_burst(r, s, tel)
    assert [q.fetch_job(j.id).status for j in jobs] == ["finished"] * 3
    sends = {span.attributes["messaging.message.id"]: span for span in producer_spans(tel)}
    spans = tel.horse_spans(7)                    # 4 jobs, and 3 children enqueued
    consumers = {s["attributes"]["messaging.message.id"]: s for s in spans
                 if s["kind"] == "SpanKind.CONSUMER"}
    assert set(consumers) == {j.id for j in jobs} | {boom.id}
    for job_id, span in consumers.items():        # each under its own producer span
        assert span["parent_id"] == hexid(sends[job_id].context.span_id, 16)
        assert span["context"]["trace_id"] == hexid(sends[job_id].context.trace_id, 32)
    starts = [consumers[j.id]["start_time"] for j in jobs]
    ends = [consumers[j.id]["end_time"] for j in jobs]
    assert max(starts) < min(ends)                # they ran at once, on one loop
    children = {s["attributes"]["messaging.message.id"]: s for s in spans
                if s["kind"] == "SpanKind.PRODUCER"}
    for job in jobs:
        child_id = q.fetch_job(job.id).result
        assert children[child_id]["parent_id"] == consumers[job.id]["context"]["span_id"]
    failed = consumers[boom.id]
    assert failed["status"]["status_code"] == "ERROR"
    assert failed["status"]["description"] == "ValueError: async kaput"
    assert failed["attributes"]["fusionworker.job.outcome"] == "exception"


def test_a_horse_forked_by_the_worker_itself_is_traced_and_reports_first(tmp_path):
    """The fallback without a fork server: the horse is forked from this process, whose
    real SDK provider (file exporter) it inherits; garbage trace context starts a root."""
    path = str(tmp_path / "fallback.jsonl")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(path)))
    parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    try:
        tracing.set_horse_tracing(otel.HorseTracing(2.0, provider))
        launcher = OwnForkLauncher(LaunchSpec(allowed=("tests",), retryable=(), entries=1,
                                              deliver=lambda job, frame: None))
        for job_id, traceparent in (("j1", parent), ("j2", "garbage")):
            job = Job(id=job_id, queue="q", func="tests.jobs:boom", args=["x"], timeout=10,
                      attempts=2, traceparent=traceparent)
            [slot] = launcher.launch([job], [0], lambda: None)
            wait_for(lambda s=slot: launcher.poll(None) or s.done, timeout=10,
                     what="the horse's end")
            exit_ = slot.outcome(cold=False)
            assert exit_.error_type == "ValueError" and exit_.error_message == "x"
    finally:
        tracing.set_horse_tracing(None)
    first, second = sorted(wait_for(lambda: (lambda s: s if len(s) == 2 else None)(
        read_spans(path))), key=lambda s: s["attributes"]["messaging.message.id"])
    assert first["context"]["trace_id"] == "0x" + "ab" * 16
    assert first["parent_id"] == "0x" + "cd" * 8
    assert first["attributes"]["fusionworker.job.attempt"] == 2
    assert first["status"]["status_code"] == "ERROR"
    assert second["parent_id"] is None                      # bad context: a root span
    assert second["context"]["trace_id"] != first["context"]["trace_id"]


class _Collector:
    """A loopback OTLP/HTTP endpoint: keeps every decoded export request."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[Any] = []
        self.metrics: list[Any] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                import gzip

                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    req = ExportTraceServiceRequest.FromString(body)
                    collector.spans.extend(
                        (rs.resource, span) for rs in req.resource_spans
                        for ss in rs.scope_spans for span in ss.spans)
                elif self.path == "/v1/metrics":
                    req = ExportMetricsServiceRequest.FromString(body)
                    collector.metrics.extend(
                        (rm.resource, metric) for rm in req.resource_metrics
                        for sm in rm.scope_metrics for metric in sm.metrics)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_worker_exports_spans_and_metrics_over_otlp_as_the_environment_says(
        r, settings, processes, queue):
    collector = _Collector()
    try:
        q = queue("default")
        job = q.enqueue("tests.jobs:add", 20, 22, priority=10)
        processes.worker("-q", "default", env={
            "FUSIONWORKER_OTEL": "on", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_METRIC_EXPORT_INTERVAL": "200", "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "sms-workers"})
        wait_for(lambda: q.fetch_job(job.id).status == "finished")
        resource, span = wait_for(lambda: collector.spans and collector.spans[0])
        assert span.name == "process default" and span.kind == span.SPAN_KIND_CONSUMER
        attrs = {a.key: a.value for a in span.attributes}
        assert attrs["messaging.message.id"].string_value == job.id
        assert attrs["fusionworker.job.outcome"].string_value == "ok"
        names = {a.key: a.value.string_value for a in resource.attributes}
        assert names["service.name"] == "sms-workers"

        def schedule_total() -> Any:
            points = [p for _, m in collector.metrics if m.name == "queue.schedule.total"
                      for p in m.sum.data_points]
            return points and points[-1]

        point = wait_for(schedule_total)
        assert point.as_int == 1
        assert {a.key: a.value.string_value for a in point.attributes} == {
            "queue": "default", "band": "high"}
        # the outcome is recorded after the job's status is written: the next export has it
        wanted = {"queue.depth", "queue.active", "queue.schedule.total", "queue.wait_time",
                  "fusionworker.job.outcomes", "fusionworker.job.duration"}
        wait_for(lambda: wanted <= {m.name for _, m in collector.metrics})
    finally:
        collector.close()


def test_queue_active_is_one_while_the_job_runs_and_zero_after(r, otel_settings, tel):
    seen: list[int] = []

    class Look(Middleware):       # reads the real instrument while the horse runs
        def on_horse_tick(self, worker: Any, job: Any, horse_pid: int) -> None:
            seen.extend(p.value for p in tel.points("queue.active").values())

    q = Queue("default", r, settings=otel_settings)
    q.enqueue("tests.jobs:sleep", 0.3, priority=-5)
    mw = OtelMiddleware(otel_settings, meter_provider=tel.meter_provider)
    assert Worker("default", r, settings=otel_settings, burst=True,
                  defaults=False, middleware=[mw, Look()]).work() == 0
    assert seen and set(seen) == {1}
    assert {tuple(sorted(k)): p.value for k, p in tel.points("queue.active").items()} == {
        (("band", "low"), ("queue", "default")): 0}


def test_a_horse_killed_by_a_crash_leaves_no_span_but_its_outcome_is_counted(
        r, otel_settings, tel):
    q = Queue("default", r, settings=otel_settings)
    crashed = q.enqueue("tests.jobs:segfault", priority=5)
    after = q.enqueue("tests.jobs:add", 1, 1)          # runs second (lower priority)
    run_burst(r, otel_settings, tel)
    assert q.fetch_job(crashed.id).failure_reason == "segfault"
    [span] = tel.horse_spans(1)                        # the next job's span only
    assert span["attributes"]["messaging.message.id"] == after.id
    outcomes = {dict(k)["reason"]: p.value
                for k, p in tel.points("fusionworker.job.outcomes").items()}
    assert outcomes == {"segfault": 1, "ok": 1}
