"""The event log: documents, buffering through outages, the Redis stream, Elasticsearch."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from types import SimpleNamespace

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fusionworker.core.config import load_settings
from fusionworker.core.keys import Keys
from fusionworker.events import (
    EVENTS,
    FIELDS,
    ElasticsearchSink,
    MemorySink,
    NullSink,
    RedisStreamSink,
    follow_events,
    make_event,
    make_sink,
    read_events,
)
from tests.waiting import wait_for

from ..es_server import EsServer

pytestmark = pytest.mark.timeout(30)

FAST = {"flush_interval": 0.05, "backoff_initial": 0.02, "backoff_max": 0.2}


def dead_redis() -> redis.Redis:
    """A client of a port nothing listens on, failing fast (no client-side retries)."""
    return redis.Redis(host="127.0.0.1", port=1, decode_responses=True,
                       socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))


class HungServer:
    """A loopback TCP server that accepts and reads but never answers (a hung Redis);
    leaving the ``with`` block closes it and every connection."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.received = b""
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                self.received += data
        except OSError:
            return

    def __enter__(self) -> HungServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def job(n: int = 0, queue: str = "sms") -> SimpleNamespace:
    return SimpleNamespace(id=f"job-{n}", queue=queue, func="app.tasks:send_sms",
                           priority=10, attempts=1)


@pytest.fixture
def es():
    server = EsServer().start()
    yield server
    server.stop()


@pytest.fixture
def sinks():
    made = []
    yield made
    for sink in made:
        sink.close(timeout=0.5)


def es_sink(es: EsServer, sinks: list, **kwargs) -> ElasticsearchSink:
    options = {**FAST, "request_timeout": 1.0, **kwargs}
    sink = ElasticsearchSink(es.url, "active-fusion-logs", **options)
    sinks.append(sink)
    return sink


# --------------------------------------------------------------------------- documents


def test_make_event_has_every_field_from_a_job_object():
    doc = make_event("failed", job(7), worker="sms.1234", host="box1", duration=1.5,
                     wait_time=0.25, error_type="ValueError", error_message="bad number",
                     timestamp=1705314600.123)
    assert tuple(doc) == FIELDS
    assert doc == {
        "@timestamp": "2024-01-15T10:30:00.123Z", "event": "failed", "job_id": "job-7",
        "queue": "sms", "function": "app.tasks:send_sms", "priority": 10, "attempt": 1,
        "worker": "sms.1234", "host": "box1", "duration": 1.5, "wait_time": 0.25,
        "error_type": "ValueError", "error_message": "bad number", "reason": None,
        "progress": None, "progress_message": None,
    }


def test_make_event_accepts_a_mapping_and_defaults_host_and_time():
    before = time.time()
    doc = make_event("queued", {"id": "j1", "queue": "email", "func": "m:f",
                                "priority": "5", "attempts": "0"})
    assert doc["job_id"] == "j1" and doc["queue"] == "email" and doc["function"] == "m:f"
    assert doc["priority"] == 5 and doc["attempt"] == 0
    assert doc["host"] == os.uname().nodename
    assert doc["duration"] is None and doc["error_type"] is None
    assert doc["@timestamp"].endswith("Z") and len(doc["@timestamp"]) == 24
    stamp = datetime.fromisoformat(doc["@timestamp"].replace("Z", "+00:00")).timestamp()
    assert abs(stamp - before) < 5


def test_make_event_rejects_unknown_event():
    assert "retry" in EVENTS and "canceled" in EVENTS
    with pytest.raises(ValueError, match="unknown event"):
        make_event("exploded", job())


def test_importing_events_does_not_import_elasticsearch():
    code = "import sys, fusionworker.events; print('elasticsearch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- Elasticsearch


def test_es_documents_reach_the_index_with_every_field(es, sinks):
    sink = es_sink(es, sinks)
    docs = [make_event(event, job(i), worker="w.1", duration=0.5, timestamp=1705314600 + i)
            for i, event in enumerate(("queued", "processing", "completed"))]
    for doc in docs:
        sink.emit(doc)
    assert sink.flush(5)
    assert [(index, doc) for index, _id, doc in es.indexed] == [
        ("active-fusion-logs", doc) for doc in docs]
    assert all(set(doc) == set(FIELDS) for _, _, doc in es.indexed)
    stats = sink.stats()
    assert stats["delivered"] == 3 and stats["buffered"] == 0 and stats["errors"] == 0
    bulk_headers = [h for method, path, h in es.requests if path.endswith("/_bulk")]
    assert "compatible-with=9" in bulk_headers[0]["content-type"]


def test_es_index_template_is_put_once_with_explicit_mappings(es, sinks):
    sink = es_sink(es, sinks, batch_size=2)
    for i in range(6):
        sink.emit(make_event("queued", job(i)))
    assert sink.flush(5)
    assert len(es.bulks) >= 3
    template = es.templates["active-fusion-logs-template"]
    assert template["index_patterns"] == ["active-fusion-logs*"]
    props = template["template"]["mappings"]["properties"]
    for field in ("event", "job_id", "queue", "function", "worker", "host", "error_type"):
        assert props[field] == {"type": "keyword"}
    assert props["@timestamp"] == {"type": "date"}
    assert props["priority"]["type"] == props["attempt"]["type"] == "integer"
    assert props["duration"]["type"] == props["wait_time"]["type"] == "float"
    assert props["error_message"] == {"type": "text"}
    puts = [path for method, path, _ in es.requests if path.startswith("/_index_template/")]
    assert puts == ["/_index_template/active-fusion-logs-template"]


def test_es_template_refusal_does_not_stop_delivery(es, sinks, caplog):
    es.template_status = 403
    sink = es_sink(es, sinks)
    sink.emit(make_event("queued", job()))
    assert sink.flush(5)
    assert len(es.indexed) == 1 and es.templates == {}
    assert "cannot put index template" in caplog.text


def test_es_outage_buffers_then_delivers_every_event_exactly_once(es, sinks):
    sink = es_sink(es, sinks, batch_size=100)
    emitted = 0

    def emit_many(n: int) -> None:
        nonlocal emitted
        for i in range(n):
            sink.emit(make_event("processing", job(emitted + i)))
        emitted += n

    emit_many(50)
    assert sink.flush(5)

    es.set_mode("503")
    emit_many(200)
    wait_for(lambda: sink.stats()["errors"] >= 2)
    assert "503" in sink.stats()["last_error"] or "Unavailable" in sink.stats()["last_error"]

    es.set_mode("down")
    errors = sink.stats()["errors"]
    emit_many(1000)  # invariant 8: see test_emit_never_waits_for_a_hung_elasticsearch
    wait_for(lambda: sink.stats()["errors"] >= errors + 2)
    assert "Connection" in sink.stats()["last_error"]
    assert sink.stats()["buffered"] == 1200
    assert not sink.flush(0.1)

    es.set_mode("ok")
    assert sink.flush(10)
    # None lost, none twice in the index: a batch whose reply was lost under load
    # (client timeout after the server took it) is sent again with the same _id,
    # which Elasticsearch indexes as an overwrite, not a second document.
    by_id = {_id: doc for _, _id, doc in es.indexed}
    assert sorted(doc["job_id"] for doc in by_id.values()) == sorted(
        f"job-{i}" for i in range(emitted))
    assert all(by_id[_id] == doc for _, _id, doc in es.indexed)  # a re-send is identical
    stats = sink.stats()
    assert stats["delivered"] == emitted and stats["dropped"] == 0 and stats["buffered"] == 0



def test_emit_never_waits_for_a_hung_elasticsearch(es, sinks):
    """Invariant 8: while the delivery thread waits on a server that does not answer,
    every emit() returns at once (the events wait in the buffer, not the caller)."""
    sink = es_sink(es, sinks, batch_size=100, request_timeout=30)
    es.set_mode("hold")
    sink.emit(make_event("processing", job(0)))
    wait_for(lambda: es.held >= 1)            # the delivery thread waits for an answer
    for i in range(1, 1000):
        sink.emit(make_event("processing", job(i)))
    assert es.held == 1 and es.indexed == [] and sink.stats()["delivered"] == 0
    assert sink.stats()["buffered"] == 1000
    es.set_mode("ok")                         # the held request is answered now
    assert sink.flush(10)
    assert sorted(int(doc["job_id"][4:]) for _, _, doc in es.indexed) == list(range(1000))

def test_es_per_item_429_is_retried_and_other_item_errors_are_counted(es, sinks, caplog):
    sink = es_sink(es, sinks)
    es.item_status = 429
    for i in range(5):
        sink.emit(make_event("queued", job(i)))
    wait_for(lambda: len(es.bulks) >= 3)
    assert es.indexed == [] and sink.stats()["buffered"] == 5
    es.item_status = None
    assert sink.flush(5)
    assert sorted(doc["job_id"] for _, _, doc in es.indexed) == [f"job-{i}" for i in range(5)]

    es.item_status = 400
    bulks = len(es.bulks)
    for i in range(3):
        sink.emit(make_event("failed", job(i)))
    assert sink.flush(5)  # rejected documents are not retried
    assert len(es.bulks) == bulks + 1
    stats = sink.stats()
    assert stats["rejected"] == 3 and stats["delivered"] == 5
    assert "3 of 3 documents rejected" in caplog.text


def test_make_sink_picks_elasticsearch_when_url_is_set(es, r, prefix, sinks):
    settings = load_settings(environ={}, elasticsearch_url=es.url, event_buffer=123,
                             elasticsearch_index="my-events", prefix=prefix)
    sink = make_sink(settings, r, flush_interval=0.05)
    sinks.append(sink)
    assert isinstance(sink, ElasticsearchSink) and sink.buffer_size == 123
    sink.emit(make_event("queued", job()))
    assert sink.flush(5)
    assert es.indexed[0][0] == "my-events"


def test_make_sink_without_the_client_explains_the_extra(monkeypatch, r):
    monkeypatch.setitem(sys.modules, "elasticsearch", None)
    settings = load_settings(environ={}, elasticsearch_url="http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match=r"pip install 'fusionworker\[elasticsearch\]'"):
        make_sink(settings, r)


# --------------------------------------------------------------------------- buffer bound


def test_overflow_is_dropped_counted_and_logged_once_per_interval(es, sinks, caplog):
    caplog.set_level(logging.WARNING, logger="fusionworker.events")
    es.set_mode("down")
    sink = es_sink(es, sinks, buffer_size=10)
    for i in range(25):
        sink.emit(make_event("queued", job(i)))
    assert sink.stats()["dropped"] == 15 and sink.stats()["buffered"] == 10
    wait_for(lambda: "dropped so far" in caplog.text)
    for i in range(25):
        sink.emit(make_event("queued", job(i)))
    errors = sink.stats()["errors"]      # the delivery thread went round twice since
    wait_for(lambda: sink.stats()["errors"] >= errors + 2)   # (a due log comes first)
    drop_logs = [r for r in caplog.records if "dropped so far" in r.getMessage()]
    assert len(drop_logs) == 1 and drop_logs[0].levelno == logging.WARNING
    assert sink.stats()["dropped"] == 40

    es.set_mode("ok")
    assert sink.flush(5)
    assert sorted(doc["job_id"] for _, _, doc in es.indexed) == [f"job-{i}" for i in range(10)]


# --------------------------------------------------------------------------- Redis stream


def test_redis_stream_sink_writes_a_capped_stream(r, prefix, sinks):
    sink = RedisStreamSink(r, prefix, maxlen=200, batch_size=500, **FAST)
    sinks.append(sink)
    for i in range(2000):
        sink.emit(make_event("completed", job(i), worker="w.1", duration=0.125))
    assert sink.flush(10)
    assert sink.stats()["delivered"] == 2000
    length = r.xlen(Keys(prefix).events)
    assert 200 <= length < 500  # MAXLEN ~ trims whole stream nodes
    _id, fields = r.xrevrange(Keys(prefix).events, count=1)[0]
    assert fields["job_id"] == "job-1999" and fields["duration"] == "0.125"
    assert fields["priority"] == "10" and "error_type" not in fields  # None is omitted


def test_read_events_filters_by_job_and_queue(r, prefix, sinks):
    sink = RedisStreamSink(r, prefix, **FAST)
    sinks.append(sink)
    for i in range(30):
        sink.emit(make_event("queued", job(i % 3, queue="sms" if i % 2 else "email")))
    sink.emit(make_event("failed", job(1, queue="sms"), error_type="KeyError", duration=2.5))
    assert sink.flush(5)

    everything = read_events(r, prefix)
    assert len(everything) == 31
    assert [e for _, e in everything][-1]["duration"] == 2.5  # typed again

    mine = read_events(r, prefix, job_id="job-1")
    assert len(mine) == 11 and all(e["job_id"] == "job-1" for _, e in mine)
    assert mine[-1][1]["event"] == "failed" and mine[-1][1]["error_type"] == "KeyError"
    sms = read_events(r, prefix, queue="sms")
    assert len(sms) == 16 and all(e["queue"] == "sms" for _, e in sms)
    both = read_events(r, prefix, job_id="job-1", queue="email")
    assert len(both) == 5

    first = read_events(r, prefix, count=10)
    rest = read_events(r, prefix, after=first[-1][0])
    assert [i for i, _ in first + rest] == [i for i, _ in everything]
    assert read_events(r, prefix, job_id="job-1", count=3) == mine[:3]


def test_read_events_blocks_for_new_events_and_follow_keeps_its_place(r, prefix, sinks):
    sink = RedisStreamSink(r, prefix, **FAST)
    sinks.append(sink)
    sink.emit(make_event("queued", job(1)))
    assert sink.flush(5)
    last = read_events(r, prefix)[-1][0]

    started = time.monotonic()
    assert read_events(r, prefix, after=last, block_ms=200) == []
    assert time.monotonic() - started >= 0.15

    follower = follow_events(r, prefix, job_id="job-2", block_ms=100)
    for _ in range(5):
        sink.emit(make_event("processing", job(3)))
    sink.emit(make_event("completed", job(2)))
    assert sink.flush(5)
    _id, event = next(follower)
    assert event["job_id"] == "job-2" and event["event"] == "completed"

    new = read_events(r, prefix, after=last, job_id="job-2", block_ms=1000)
    assert [e["event"] for _, e in new] == ["completed"]


def test_redis_outage_keeps_emit_fast_and_close_counts_the_loss(sinks, caplog):
    with HungServer() as hung:
        client = redis.Redis(port=hung.port, socket_timeout=3, decode_responses=True,
                             retry=Retry(NoBackoff(), 0))
        sink = RedisStreamSink(client, "unused", **FAST)
        sinks.append(sink)
        sink.emit(make_event("queued", job(0)))
        wait_for(lambda: hung.received)          # the delivery thread waits for an answer
        for i in range(1, 1000):
            sink.emit(make_event("queued", job(i)))
        # every emit returned while the delivery hangs: emit never waits for Redis
        assert sink.stats()["delivered"] == 0 and sink.stats()["buffered"] == 1000
    # the server is gone: the hung request fails, the next ones are refused
    wait_for(lambda: "delivery failed" in caplog.text)   # logged after it is counted
    assert sink.stats()["errors"] >= 1 and sink.stats()["buffered"] == 1000
    sink.close(timeout=0.2)
    assert sink.stats()["dropped"] == 1000 and sink.stats()["buffered"] == 0
    assert "1000 events not delivered at close" in caplog.text


# --------------------------------------------------------------------------- flush / close


def test_flush_and_close_semantics(r, prefix):
    sink = RedisStreamSink(r, prefix, flush_interval=30.0)
    assert sink.flush(0.1)  # nothing buffered
    sink.emit(make_event("queued", job(1)))
    assert sink.stats()["buffered"] == 1  # a partial batch waits for the interval...
    assert sink.flush(5)  # ...unless flushed
    assert r.xlen(Keys(prefix).events) == 1

    sink.emit(make_event("completed", job(1)))
    sink.close()
    assert r.xlen(Keys(prefix).events) == 2  # close delivers what is buffered
    sink.close()  # idempotent
    sink.emit(make_event("failed", job(1)))  # after close: dropped, counted
    assert sink.stats()["dropped"] == 1
    assert r.xlen(Keys(prefix).events) == 2


def test_short_lived_producer_delivers_its_event_at_exit(r, prefix, redis_url):
    code = textwrap.dedent(f"""
        import redis
        from fusionworker.events import RedisStreamSink, make_event
        conn = redis.Redis.from_url({redis_url!r}, decode_responses=True)
        sink = RedisStreamSink(conn, {prefix!r}, flush_interval=60.0)
        sink.emit(make_event("queued", {{"id": "cli-job", "queue": "sms"}}))
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20,
                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert [e["job_id"] for _, e in read_events(r, prefix)] == ["cli-job"]


def test_forked_child_starts_empty_and_does_not_resend_the_parents_events(sinks):
    dead = dead_redis()
    sink = RedisStreamSink(dead, "unused", **FAST)
    sinks.append(sink)
    for i in range(10):
        sink.emit(make_event("queued", job(i)))
    pid = os.fork()
    if pid == 0:  # child: a fresh, usable buffer
        ok = sink.stats()["buffered"] == 0
        sink.emit(make_event("queued", job(99)))
        ok = ok and sink.stats()["buffered"] == 1
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sink.stats()["buffered"] == 10


def test_null_and_memory_sinks():
    null = NullSink()
    null.emit(make_event("queued", job()))
    assert null.flush(0.1) and null.stats()["buffered"] == 0
    null.close()
    memory = MemorySink()
    memory.emit(make_event("queued", job()))
    assert [d["event"] for d in memory.docs] == ["queued"] and memory.stats()["delivered"] == 1


def test_process_hooks_are_installed_by_the_first_sink_not_by_the_import():
    # logging first: importing it registers its own atexit handler
    code = ("import atexit, logging; n = atexit._ncallbacks(); import fusionworker.events as e; "
            "a = atexit._ncallbacks(); e.NullSink(); b = atexit._ncallbacks(); e.NullSink(); "
            "print(a - n, b - n, atexit._ncallbacks() - n)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["0", "1", "1"]   # none at import, one with the first sink, once


@pytest.mark.parametrize("stamp", [
    0.0, 1.9995, 1.0000005, 1.0004995, 1.9999995, 1.9999994, 59.9999999,
    1764355233.0004995, 1764355233.9999996, 1764355233.123456, 4102444799.9996])
def test_an_events_timestamp_is_datetimes_iso_text_to_the_millisecond(stamp: float) -> None:
    """make_event writes @timestamp from a per-second cache; the text is exactly what
    datetime writes (microseconds rounded half to even, then cut to milliseconds), at
    the edges of a second too, and the cache never answers for another second."""
    from datetime import UTC

    expected = datetime.fromtimestamp(stamp, tz=UTC).isoformat(timespec="milliseconds")
    for first in (stamp, stamp - 1.0, stamp + 1.0):   # warm, stale and fresh cache
        make_event("completed", {"id": "j"}, timestamp=first)
        doc = make_event("completed", {"id": "j"}, timestamp=stamp)
        assert doc["@timestamp"] == expected.replace("+00:00", "Z")


def test_an_event_of_a_job_object_and_of_its_mapping_are_the_same() -> None:
    job = SimpleNamespace(id="j1", queue="q", func="m:f", priority="7", attempts=2)
    as_map = {"id": "j1", "queue": "q", "func": "m:f", "priority": "7", "attempts": 2}
    one = make_event("processing", job, timestamp=5.0, worker="w")
    two = make_event("processing", as_map, timestamp=5.0, worker="w")
    assert one == two
    assert (one["job_id"], one["queue"], one["function"], one["priority"],
            one["attempt"]) == ("j1", "q", "m:f", 7, 2)
    assert make_event("processing", {}, timestamp=5.0)["job_id"] is None
