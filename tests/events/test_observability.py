"""Observability end to end with real worker processes: Elasticsearch (loopback fake),
outage latency, overflow, /metrics of a worker and of the exporter, events --follow,
JSON logs."""

from __future__ import annotations

import json
import signal
import socket
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fusionworker.core.queue import Queue
from fusionworker.events import (
    FIELDS,
    ElasticsearchSink,
    EventsMiddleware,
    flush_default_sinks,
)
from tests.waiting import wait_for

from ..conftest import ROOT, worker_env
from ..es_server import EsServer

pytestmark = pytest.mark.timeout(60)

INDEX = "active-fusion-logs"


@pytest.fixture
def es():
    server = EsServer().start()
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def finished(q: Queue, job_id: str) -> bool:
    job = q.fetch_job(job_id)
    return job is not None and job.status in ("finished", "failed")


def worker_hash(r, prefix: str) -> dict[str, str]:
    names = r.smembers(f"{prefix}:workers")
    return r.hgetall(f"{prefix}:worker:{next(iter(names))}") if names else {}


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of ``/metrics`` on ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape_when_up(port: int, timeout: float = 15.0) -> dict:
    def attempt():
        try:
            return scrape(port)
        except OSError:
            return None
    return wait_for(attempt, timeout=timeout, interval=0.1)


# --------------------------------------------------------------------------- Elasticsearch


def test_real_worker_run_sends_every_event_to_elasticsearch(es, r, settings, processes):
    es_settings = settings.replace(elasticsearch_url=es.url)
    q = Queue("esq", r, settings=es_settings)  # producer: the shared sink goes to ES too
    ok = q.enqueue("tests.jobs:add", 2, 3, priority=10)
    bad = q.enqueue("tests.jobs:boom", "kaput")
    proc = processes.worker("--burst", "-q", "esq", env={"ELASTICSEARCH_URL": es.url})
    assert proc.wait(30) == 0, processes.output(proc)
    assert flush_default_sinks()
    docs = {(doc["job_id"], doc["event"]): (index, doc) for index, _, doc in es.indexed}
    assert set(docs) == {(ok.id, "queued"), (ok.id, "processing"), (ok.id, "completed"),
                         (bad.id, "queued"), (bad.id, "processing"), (bad.id, "failed")}
    assert len(es.indexed) == 6  # each exactly once
    assert {index for index, _ in docs.values()} == {INDEX}
    assert f"{INDEX}-template" in es.templates
    for _index, doc in docs.values():
        assert set(doc) == set(FIELDS)
        assert doc["queue"] == "esq" and doc["host"] and doc["@timestamp"].endswith("Z")
    worker_name = docs[(ok.id, "processing")][1]["worker"]
    assert worker_name and worker_name.endswith(f".{proc.pid}")
    done = docs[(ok.id, "completed")][1]
    assert (done["function"], done["priority"], done["attempt"]) == ("tests.jobs:add", 10, 1)
    assert done["duration"] > 0 and done["worker"] == worker_name
    assert docs[(ok.id, "processing")][1]["wait_time"] >= 0
    failed = docs[(bad.id, "failed")][1]
    assert (failed["error_type"], failed["error_message"], failed["reason"]) == (
        "ValueError", "kaput", "exception")
    assert docs[(bad.id, "queued")][1]["worker"] is None


def _latencies(r, q: Queue, n: int) -> list[float]:
    """Run ``n`` jobs one after the other; end-to-end latency of each (server clock)."""
    out = []
    for _ in range(n):
        job = q.enqueue("tests.jobs:noop")
        wait_for(lambda job=job: finished(q, job.id), timeout=10, interval=0.002)
        done = q.fetch_job(job.id)
        assert done.status == "finished"
        out.append(done.ended_at - done.enqueued_at)
    return out


@pytest.mark.slow
def test_elasticsearch_outage_does_not_slow_jobs_and_everything_arrives(
        es, r, settings, processes, prefix):
    # the producer's events go to ES too, through a sink of its own with a short backoff
    producer = ElasticsearchSink(es.url, INDEX, flush_interval=0.1, backoff_initial=0.05,
                                 backoff_max=0.5, request_timeout=1.0)
    q = Queue("outage", r, settings=settings, events=producer)
    proc = processes.worker("-q", "outage", env={"ELASTICSEARCH_URL": es.url})
    wait_for(lambda: worker_hash(r, prefix).get("state") == "idle", timeout=15)
    baseline = _latencies(r, q, 15)

    es.set_mode("503")
    mark = len(es.requests)
    during = _latencies(r, q, 10)
    wait_for(lambda: any(p.endswith("_bulk") for _, p, _ in es.requests[mark:]), timeout=5)
    wait_for(lambda: int(worker_hash(r, prefix).get("events_errors", 0)) >= 1, timeout=5)
    errors_503 = int(worker_hash(r, prefix)["events_errors"])

    es.set_mode("down")  # connection refused
    during += _latencies(r, q, 10)
    wait_for(lambda: int(worker_hash(r, prefix).get("events_errors", 0)) > errors_503,
             timeout=10)
    buffered = int(worker_hash(r, prefix)["events_buffered"])
    assert buffered > 0

    print(f"latency median baseline {statistics.median(baseline) * 1000:.1f} ms, "
          f"during outage {statistics.median(during) * 1000:.1f} ms; max "
          f"{max(baseline) * 1000:.1f} / {max(during) * 1000:.1f} ms; buffered {buffered}")
    # jobs ran as fast as before (loose bound: this is a shared test machine)
    assert statistics.median(during) <= 2 * statistics.median(baseline) + 0.05, (
        baseline, during)
    assert max(during) < max(baseline) + 0.5, (baseline, during)

    es.set_mode("ok")
    expected = 35 * 3  # queued, processing, completed of every job
    wait_for(lambda: len({(d["job_id"], d["event"]) for _, _, d in es.indexed}) >= expected,
             timeout=30, interval=0.1)
    events = [(d["job_id"], d["event"]) for _, _, d in es.indexed]
    assert len(set(events)) == expected
    assert len(events) == expected  # nothing indexed twice (stable _id, retried batches)
    hb = wait_for(lambda: (h := worker_hash(r, prefix)).get("events_buffered") == "0" and h)
    assert hb["events_dropped"] == "0"
    assert producer.stats()["dropped"] == 0
    producer.close(1.0)
    out = processes.output(proc)
    assert "delivery failed" in out and "delivering again" in out
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def test_elasticsearch_overflow_is_counted_in_the_heartbeat_and_logged(
        es, r, settings, processes, prefix):
    es.set_mode("down")
    q = Queue("overflow", r, settings=settings, events=False)
    proc = processes.worker("-q", "overflow", env={"ELASTICSEARCH_URL": es.url,
                                                   "FUSIONWORKER_EVENT_BUFFER": "5"})
    wait_for(lambda: worker_hash(r, prefix).get("state") == "idle", timeout=15)
    jobs = [q.enqueue("tests.jobs:noop") for _ in range(10)]
    wait_for(lambda: all(finished(q, j.id) for j in jobs), timeout=15)
    hb = wait_for(lambda: (h := worker_hash(r, prefix)).get("events_dropped") == "15" and h,
                  timeout=5)
    assert hb["events_buffered"] == "5"  # 20 events, buffer of 5: 15 dropped, counted
    wait_for(lambda: "events dropped so far" in processes.output(proc), timeout=5)
    line = next(x for x in processes.output(proc).splitlines() if "dropped so far" in x)
    assert "buffer full (5 events)" in line


# --------------------------------------------------------------------------- Prometheus


@pytest.mark.slow
def test_worker_metrics_endpoint_after_a_known_run(r, settings, processes, prefix, redis_url):
    port = free_port()
    q = Queue("mq", r, settings=settings, events=False)
    proc = processes.worker("-q", "mq", "--metrics-port", str(port))
    idle = ("fusionworker_worker_state", (("state", "idle"),))
    scrape_when_up(port)   # the endpoint answers from start; idle once the loop polls
    before = wait_for(lambda: (m := scrape(port)).get(idle) == 1 and m, timeout=15)
    assert before[idle] == 1
    jobs = [q.enqueue("tests.jobs:add", i, i, priority=10) for i in range(3)]
    jobs.append(q.enqueue("tests.jobs:boom"))
    jobs.append(q.enqueue("tests.jobs:sleep", 5, timeout=0.5))
    jobs.append(q.enqueue("tests.jobs:flaky", redis_url, f"{prefix}:flaky", 1,
                          max_retries=1, retry_delay=0.1))
    wait_for(lambda: all(finished(q, j.id) for j in jobs), timeout=20)
    mq = (("queue", "mq"),)
    # the worker counts an outcome once its write returned: a moment after Redis shows it
    m = wait_for(lambda: (m := scrape(port)).get(("fusionworker_jobs_processed_total", mq)) == 7
                 and m.get(("fusionworker_job_duration_seconds_count", mq)) == 7 and m,
                 timeout=5, what="the seventh outcome counted")
    assert m[("fusionworker_jobs_processed_total", mq)] == 7
    assert m[("fusionworker_jobs_completed_total", mq)] == 4
    assert m[("fusionworker_jobs_failed_total", mq)] == 2
    assert m[("fusionworker_jobs_retried_total", mq)] == 1
    assert m[("fusionworker_jobs_timed_out_total", mq)] == 1
    assert m[("fusionworker_job_duration_seconds_count", mq)] == 7
    assert m[("fusionworker_job_duration_seconds_sum", mq)] >= 0.5  # the timed-out job
    assert m[("fusionworker_job_wait_seconds_count", (("band", "high"), ("queue", "mq")))] == 3
    assert m[("fusionworker_job_wait_seconds_count", (("band", "normal"), ("queue", "mq")))] == 4
    assert m[("fusionworker_worker_throttled", ())] == 0
    assert m[("fusionworker_event_sink_dropped_total", ())] == 0
    wait_for(lambda: scrape(port)[("fusionworker_event_sink_delivered_total", ())] == 14,
             timeout=5)
    assert sum(v for (n, _), v in m.items() if n == "fusionworker_worker_state") == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert "metrics on http://127.0.0.1:" in processes.output(proc)  # loopback by default


def test_exporter_reports_queue_and_worker_gauges(r, settings, processes, burst):
    q = Queue("exq", r, settings=settings, events=False)
    for priority in (10, 12, 0, -5):
        q.enqueue("tests.jobs:noop", priority=priority)
    q.enqueue_in(600, "tests.jobs:noop")
    for job_id in q.job_ids("queued"):        # enqueued an hour ago: a gauge that can be 0
        stamp = float(r.hget(q.qkeys.job(job_id), "enqueued_at"))   # only by mistake
        r.hset(q.qkeys.job(job_id), "enqueued_at", stamp - 3600)
    paused = Queue("exp", r, settings=settings, events=False)
    paused.enqueue("tests.jobs:noop")
    paused.pause()
    Queue("exf", r, settings=settings, events=False).enqueue("tests.jobs:boom")
    burst("exf")
    port = free_port()
    exporter = processes.start("exporter", "--port", str(port))
    idle = processes.worker("-q", "exidle")
    m = scrape_when_up(port)
    assert m[("fusionworker_exporter_redis_up", ())] == 1

    def gauge(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted(labels.items())))]

    assert gauge("fusionworker_queue_pending", queue="exq", band="high") == 2
    assert gauge("fusionworker_queue_pending", queue="exq", band="normal") == 1
    assert gauge("fusionworker_queue_pending", queue="exq", band="low") == 1
    assert gauge("fusionworker_queue_scheduled", queue="exq") == 1
    assert gauge("fusionworker_queue_paused", queue="exp") == 1
    assert gauge("fusionworker_queue_paused", queue="exq") == 0
    assert gauge("fusionworker_queue_failed", queue="exf") == 1
    assert gauge("fusionworker_queue_started", queue="exq") == 0
    assert gauge("fusionworker_queue_oldest_job_age_seconds", queue="exq") >= 3600
    assert gauge("fusionworker_queue_oldest_job_age_seconds", queue="exf") == 0  # none pending
    m = wait_for(lambda: (s := scrape(port))[("fusionworker_workers", (("state", "idle"),))] == 1
                 and s, timeout=15)
    assert m[("fusionworker_workers", (("state", "busy"),))] == 0
    # --queues limits the report
    exporter.send_signal(signal.SIGTERM)
    assert exporter.wait(10) == 0
    port2 = free_port()
    processes.start("exporter", "--port", str(port2), "--queues", "exq")
    m2 = scrape_when_up(port2)
    assert {dict(labels).get("queue") for (n, labels) in m2 if n == "fusionworker_queue_pending"} \
        == {"exq"}
    assert m2[("fusionworker_workers", (("state", "idle"),))] == 0  # exidle serves another queue
    # a misspelt queue is said at start (its gauges would read 0 for good); a queue with
    # no job yet but a live worker on it is not, nor is a known one
    port3 = free_port()
    typo = processes.start("exporter", "--port", str(port3), "--queues", "exqq,exidle,exq")
    m3 = scrape_when_up(port3)
    assert m3[("fusionworker_queue_pending", (("band", "high"), ("queue", "exqq")))] == 0
    out = processes.output(typo)
    assert "no job was ever enqueued to queue 'exqq' and no live worker serves it" in out, out
    assert "'exidle'" not in out and "'exq'" not in out.split("(known:")[0]
    idle.send_signal(signal.SIGTERM)
    assert idle.wait(15) == 0


# --------------------------------------------------------------------------- CLI and logs


def test_events_follow_shows_a_jobs_whole_life(r, settings, prefix, burst, tmp_path):
    out_path = tmp_path / "follow.out"
    with open(out_path, "wb") as out:
        follow = subprocess.Popen(
            [sys.executable, str(ROOT / "run_worker.py"), "events", "--follow", "--queue", "life"],
            env=worker_env(settings), stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))
    try:
        job = Queue("life", r, settings=settings).enqueue("tests.jobs:add", 20, 22)
        Queue("other", r, settings=settings).enqueue("tests.jobs:noop")
        assert flush_default_sinks()
        burst("life", middleware=[EventsMiddleware()])

        def lines() -> list[str]:
            return [x for x in Path(out_path).read_text().splitlines() if job.id in x]

        shown = wait_for(lambda: len(lines()) >= 3 and lines(), timeout=15)
        assert [line.split()[1] for line in shown] == ["queued", "processing", "completed"]
        assert all("life" in line and "tests.jobs:add" in line for line in shown)
        assert "worker " in shown[1] and " in " in shown[2]
        assert "other" not in Path(out_path).read_text()
        follow.send_signal(signal.SIGINT)
        assert follow.wait(10) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(5)
    # without --follow: the history, as JSON lines, filtered by job
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_worker.py"), "events", "--job", job.id, "--json"],
        env=worker_env(settings), capture_output=True, text=True, cwd=str(ROOT), timeout=20)
    docs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [d["event"] for d in docs] == ["queued", "processing", "completed"]
    assert all(d["job_id"] == job.id and d["id"] for d in docs)


def test_log_format_json_gives_json_lines_with_the_seed_messages(r, settings, processes):
    job = Queue("logq", r, settings=settings, events=False).enqueue("tests.jobs:add", 1, 1)
    proc = processes.start("--log-format", "json", "worker", "--burst", "-q", "logq")
    assert proc.wait(30) == 0
    lines = [x for x in processes.output(proc).splitlines() if x.strip()]
    docs = [json.loads(x) for x in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= set(d) for d in docs)
    messages = [d["message"] for d in docs]
    assert any(m.startswith("Worker ") and f"pulled job {job.id} from logq" in m
               for m in messages)
    assert any(f"finished job {job.id} in" in m for m in messages)


def test_log_level_flag_hides_info_lines(r, settings, processes):
    Queue("lvl", r, settings=settings, events=False).enqueue("tests.jobs:boom")
    proc = processes.start("--log-level", "WARNING", "worker", "--burst", "-q", "lvl")
    assert proc.wait(30) == 0
    out = processes.output(proc)
    assert "pulled job" not in out and "failed [exception] ValueError: boom" in out

