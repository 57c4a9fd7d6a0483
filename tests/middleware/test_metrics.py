"""Metrics in-process: the worker middleware's registry and the exporter's collector."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import redis
from prometheus_client import generate_latest
from redis.backoff import NoBackoff
from redis.retry import Retry

from fusionworker.core.queue import Queue
from fusionworker.events import EventsMiddleware, MemorySink
from fusionworker.middleware.metrics import (
    MetricsMiddleware,
    QueueCollector,
    band_of,
    exporter_registry,
)
from fusionworker.worker import Outcome

pytestmark = pytest.mark.timeout(30)


def value(registry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_band_of_follows_queue_bands():
    assert [band_of(p) for p in (1023, 10, 9, 0, -1, -1023)] == [
        "high", "high", "normal", "normal", "low", "low"]


def test_middleware_counts_outcomes_and_reads_state_throttle_and_sink_at_scrape():
    sink = MemorySink()
    worker = SimpleNamespace(name="w.1", state="idle", hold_reason=None,
                             middleware=[EventsMiddleware(sink)])
    mw = MetricsMiddleware(port=0)
    worker.middleware.append(mw)
    mw.on_start(worker)  # port 0: no server
    job = SimpleNamespace(queue="sms", priority=-3, wait_time=0.25)
    mw.after_claim(worker, job)
    for status, reason in (("finished", "ok"), ("retry", "exception"), ("failed", "timeout"),
                           ("requeued", "shutdown")):
        mw.after_finish(worker, job, Outcome(status=status, reason=reason, duration=0.1))
    mw.after_finish(worker, job, Outcome(status="finished", reason="ok", recorded=False))
    reg = mw.registry
    assert value(reg, "fusionworker_jobs_processed_total", queue="sms") == 4
    assert value(reg, "fusionworker_jobs_completed_total", queue="sms") == 1
    assert value(reg, "fusionworker_jobs_retried_total", queue="sms") == 1
    assert value(reg, "fusionworker_jobs_failed_total", queue="sms") == 1
    assert value(reg, "fusionworker_jobs_timed_out_total", queue="sms") == 1
    assert value(reg, "fusionworker_jobs_requeued_total", queue="sms") == 1
    assert value(reg, "fusionworker_job_wait_seconds_count", queue="sms", band="low") == 1
    assert value(reg, "fusionworker_worker_state", state="idle") == 1
    # a worker is never "silent" to itself (a reader's word): no such series of its own
    assert value(reg, "fusionworker_worker_state", state="silent") is None
    assert value(reg, "fusionworker_worker_throttled") == 0
    worker.state, worker.hold_reason = "throttled", "throttled: RAM at 93.1%"
    assert value(reg, "fusionworker_worker_state", state="throttled") == 1
    assert value(reg, "fusionworker_worker_state", state="idle") == 0
    assert value(reg, "fusionworker_worker_throttled") == 1
    assert value(reg, "fusionworker_worker_throttled_by", resource="ram") == 1
    assert value(reg, "fusionworker_worker_throttled_by", resource="cpu") == 0
    worker.hold_reason = "CPU at 99.0% (throttle 95%)"
    assert value(reg, "fusionworker_worker_throttled_by", resource="cpu") == 1
    assert value(reg, "fusionworker_worker_throttled_by", resource="ram") == 0
    sink.emit({"event": "queued"})
    assert value(reg, "fusionworker_event_sink_delivered_total") == 1
    assert value(reg, "fusionworker_event_sink_dropped_total") == 0
    assert b"fusionworker_event_sink_buffered 0.0" in generate_latest(reg)
    mw.on_stop(worker)


def test_a_busy_port_is_logged_and_the_worker_goes_on(caplog):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        mw = MetricsMiddleware(port=port, addr="127.0.0.1")
        worker = SimpleNamespace(name="w.1", state="idle", middleware=[])
        mw.on_start(worker)  # must not raise
        mw.on_stop(worker)
    assert mw._server is None


def test_queue_collector_reads_redis(r, settings):
    q = Queue("cq", r, settings=settings, events=False)
    q.enqueue("tests.jobs:noop", priority=20)
    q.enqueue("tests.jobs:noop")
    reg = exporter_registry(r, settings)
    assert value(reg, "fusionworker_exporter_redis_up") == 1
    assert value(reg, "fusionworker_queue_pending", queue="cq", band="high") == 1
    assert value(reg, "fusionworker_queue_pending", queue="cq", band="normal") == 1
    assert value(reg, "fusionworker_queue_pending", queue="cq", band="low") == 0
    assert value(reg, "fusionworker_workers", state="idle") == 0
    assert value(reg, "fusionworker_suspended") == 0


def test_queue_collector_reports_redis_down_instead_of_failing(settings):
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                       decode_responses=True, retry=Retry(NoBackoff(), 0))
    collector = QueueCollector(dead, settings)
    families = list(collector.collect())
    assert [f.name for f in families] == ["fusionworker_exporter_redis_up"]
    assert families[0].samples[0].value == 0
