"""The worker's job events written by its scripts (events/middleware.py, ``ScriptEvents``):
claim.lua writes ``processing``, progress.lua ``progress``, finish.lua the outcome, when the
event log is the plain Redis stream sink of the worker's own prefix on its own Redis.

They must be the documents the hooks would emit, in the order the steps ran, and an event
that cannot be written must never cost the step its write."""

from __future__ import annotations

import logging
import math
import random

import pytest

from fusionworker.core.queue import Queue
from fusionworker.core.scripts import _lib
from fusionworker.events import FIELDS, EventsMiddleware, MemorySink, read_events
from fusionworker.events.middleware import ScriptEvents

pytestmark = pytest.mark.timeout(60)

#: what differs between two runs of the same jobs
_VOLATILE = ("@timestamp", "job_id", "worker", "wait_time", "duration")


def _workload(q: Queue) -> dict[str, str]:
    """One job of each way to end (and one that reports progress): role -> id."""
    refused = Queue(q.name, q.connection, events=False,
                    settings=q.settings.replace(allowed_modules=("json",)))
    return {
        "ok": q.enqueue("tests.jobs:add", 1, 2, priority=10).id,
        "boom": q.enqueue("tests.jobs:boom", "no luck").id,
        "slow": q.enqueue("tests.jobs:sleep", 5, timeout=0.3).id,
        "flaky": q.enqueue("tests.jobs:conn_error", max_retries=1, retry_delay=60).id,
        "refused": refused.enqueue("json:dumps", 1).id,
        "progress": q.enqueue("tests.progress_jobs:async_report", 0.25).id,
    }


def _shape(docs: list[dict], roles: dict[str, str], worker: str) -> dict[str, list[dict]]:
    """Each role's documents in order, what differs between runs taken out (checked)."""
    role_of = {job_id: role for role, job_id in roles.items()}
    out: dict[str, list[dict]] = {}
    for doc in docs:     # the stream leaves None out; in FIELDS' order, as the sink writes
        assert list(doc) == [name for name in FIELDS if name in doc]
        doc = {name: doc.get(name) for name in FIELDS}
        assert doc["worker"] == worker
        for name in ("wait_time", "duration"):
            assert doc[name] is None or doc[name] >= 0
        shaped = {k: v for k, v in doc.items() if k not in _VOLATILE}
        shaped["has"] = [k for k in ("wait_time", "duration") if doc[k] is not None]
        out.setdefault(role_of[doc["job_id"]], []).append(shaped)
    return out


def test_the_scripts_write_the_documents_the_hooks_would(r, settings, burst, prefix):
    hooked_q = Queue("hooked", r, settings=settings, events=False)
    hooked_roles = _workload(hooked_q)
    sink = MemorySink()
    hooked_mw = EventsMiddleware(sink)
    hooked = burst("hooked", middleware=[hooked_mw])
    assert not hooked_mw.scripted                    # a memory sink: the hooks emit

    scripted_q = Queue("scripted", r, settings=settings, events=False)
    scripted_roles = _workload(scripted_q)
    scripted_mw = EventsMiddleware()
    scripted = burst("scripted", middleware=[scripted_mw])
    assert scripted_mw.scripted                      # the plain stream sink: the scripts write

    written = [doc for _, doc in read_events(r, prefix, queue="scripted")]
    want = _shape(sink.docs, hooked_roles, hooked.name)
    for docs in want.values():
        for doc in docs:
            doc["queue"] = "scripted"
    assert _shape(written, scripted_roles, scripted.name) == want
    # the sink counts what the scripts wrote in its place (its metric, the heartbeat's)
    assert scripted_mw.sink is not None
    assert scripted_mw.sink.stats()["delivered"] == len(written) == len(sink.docs) == 13
    assert [d["event"] for d in want["progress"]] == ["processing", "progress", "completed"]
    assert [d["event"] for d in want["slow"]] == ["processing", "timeout"]


def test_the_processing_event_says_the_wait_as_python_reads_the_record(r, settings, burst,
                                                                      prefix):
    q = Queue("wait", r, settings=settings, events=False)
    plain = q.enqueue("tests.jobs:noop")
    due = q.enqueue("tests.jobs:noop")
    # a job that became due after its enqueue (as a delayed one does): the wait runs from then
    enqueued = float(r.hget(q.qkeys.job(due.id), "enqueued_at"))
    r.hset(q.qkeys.job(due.id), "scheduled_for", f"{enqueued + 0.001234:.6f}")
    burst("wait", middleware=[EventsMiddleware()])
    for job_id in (plain.id, due.id):
        raw = [f for _, f in r.xrange(f"{prefix}:events")
               if f["job_id"] == job_id and f["event"] == "processing"]
        job = q.fetch_job(job_id)
        assert job is not None and job.wait_time is not None
        assert raw[0]["wait_time"] == repr(job.wait_time)     # Python's text, exactly
        assert raw[0]["attempt"] == "1" and raw[0]["priority"] == "0"


def test_py_float_writes_what_python_repr_writes(r):
    """``py_float`` of _lib.lua against ``repr`` for floats like the waits it writes and
    for the edges (whole, tiny, huge)."""
    local, lib = _lib()
    script = r.register_script(
        f"{local}\n{lib}\nlocal out = {{}}\n"
        "for i, a in ipairs(ARGV) do out[i] = py_float(tonumber(a)) end\nreturn out\n")
    rng = random.Random(7)
    values = [0.0, 1.0, 2.0, 0.5, 0.1, 1e-05, 1.5e-07, 123.456, 1e14, 2.0 ** 49,
              math.nextafter(0.1, 1.0)]
    for _ in range(400):
        start = 1_795_900_000 + rng.random() * 1e6
        values.append(float(f"{start + rng.random() * 3:.6f}") - float(f"{start:.6f}"))
        values.append(rng.random() * 10 ** rng.randint(-6, 6))
    assert script(args=[repr(v) for v in values]) == [repr(v) for v in values]


def test_an_event_that_cannot_be_written_costs_the_step_nothing(r, settings, burst, prefix,
                                                                caplog):
    q = Queue("lost", r, settings=settings, events=False)
    ok, bad = q.enqueue("tests.jobs:add", 1, 2), q.enqueue("tests.jobs:boom")
    r.set(q.qkeys.job_events(bad.id), "not a list")     # its history: another type
    mw = EventsMiddleware()
    with caplog.at_level(logging.WARNING):
        burst("lost", middleware=[mw])
    assert mw.scripted
    assert q.fetch_job(ok.id).status == "finished"
    assert q.fetch_job(bad.id).status == "failed"       # recorded, its events lost
    assert f"the outcome of job {bad.id} was recorded, its event was not" in caplog.text
    stats = mw.sink.stats()    # the failed job's processing and outcome events are counted
    assert (stats["delivered"], stats["dropped"]) == (2, 2)   # dropped: the scripts said so
    assert [e["event"] for _, e in read_events(r, prefix, job_id=ok.id)] == [
        "processing", "completed"]
    r.delete(f"{prefix}:events")
    r.set(f"{prefix}:events", "not a stream")           # the stream: another type
    again = q.enqueue("tests.jobs:add", 2, 3)
    burst("lost", middleware=[EventsMiddleware()])
    assert q.fetch_job(again.id).status == "finished" and q.fetch_job(again.id).result == 5
    assert r.get(f"{prefix}:events") == "not a stream"


def test_the_scripts_write_only_for_the_plain_sink_of_this_prefix(r, settings, burst):
    from fusionworker.events import RedisStreamSink

    class Mine(RedisStreamSink):
        pass

    q = Queue("which", r, settings=settings, events=False)
    cases = [(EventsMiddleware(RedisStreamSink(r, settings.prefix)), True),
             (EventsMiddleware(RedisStreamSink(r, settings.prefix + "-other")), False),
             (EventsMiddleware(Mine(r, settings.prefix)), False),
             (EventsMiddleware(MemorySink()), False)]
    for mw, scripted in cases:
        job = q.enqueue("tests.jobs:noop")
        burst("which", middleware=[mw])
        assert mw.scripted is scripted
        assert q.fetch_job(job.id).status == "finished"


def test_script_events_block_is_the_documents_pairs():
    events = ScriptEvents("fw:events", 1000, "w.1", "box")
    job = {"id": "j", "queue": "q", "func": "m:f", "priority": 3, "attempts": 2}
    block = events.block("completed", job, duration=0.25)
    assert block[:3] == [1000, "copy", len(block) - 3]
    pairs = dict(zip(block[3::2], block[4::2]))
    assert pairs == {"event": "completed", "job_id": "j", "queue": "q", "function": "m:f",
                     "priority": "3", "attempt": "2", "worker": "w.1", "host": "box",
                     "duration": "0.25"}
    assert events.block("progress", job, progress=0.5)[1] == "keep"


def test_script_events_block_is_what_the_sink_writes_of_the_document():
    """The block is made without the document (each job's end pays it): it must hold what
    the sink writes of make_event's document, pair for pair, whatever the fields."""
    from fusionworker.core.job import Job
    from fusionworker.events.schema import make_event
    from fusionworker.events.sinks import stream_value

    events = ScriptEvents("fw:events", 1000, "w.1", "box")
    jobs = [{"id": "j", "queue": "q", "func": "m:f", "priority": 3, "attempts": 2},
            {"id": "j"}, Job("j2", "q", "m:g", priority=-5, attempts=0)]
    cases = [("completed", {"duration": 0.25}),
             ("failed", {"duration": 1, "error_type": "E", "error_message": "caf\u00e9",
                         "reason": "exception", "wait_time": 0.5}),
             ("progress", {"progress": 0.5, "progress_message": ""}),
             ("timeout", {"duration": 1e-7, "reason": "timeout", "error_message": None})]
    for job in jobs:
        for event, fields in cases:
            doc = make_event(event, job, worker="w.1", host="box", **fields)
            want = [x for k, v in doc.items() if v is not None and k != "@timestamp"
                    for x in (k, stream_value(v))]
            assert events.block(event, job, **fields)[3:] == want
    with pytest.raises(ValueError, match="unknown event"):
        events.block("nope", jobs[0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        events.block("completed", jobs[0], bogus=1)


def _kill_worker_when(r, settings, until) -> None:
    """Start a CLI worker on ``default``, SIGKILL its process group the moment
    ``until()`` holds (polled every 2 ms, 30 s at most)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT, worker_env

    proc = subprocess.Popen([sys.executable, "-m", "fusionworker", "worker", "default"],
                            env=worker_env(settings), cwd=str(ROOT), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not until():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _history(r, q: Queue, job_id: str) -> list[str]:
    import json

    return [json.loads(h)[1]["event"] for h in r.lrange(q.qkeys.job_events(job_id), 0, -1)]


def test_a_worker_killed_right_after_the_outcome_keeps_its_events(r, settings, prefix):
    """The crash point the scripts close: SIGKILL the worker the moment the job's record
    says finished. Through the sink (a buffer its thread delivers within a second) the
    processing and completed events died with it; written by claim.lua and finish.lua,
    they are in the stream and in the job's history."""
    q = Queue("default", r, settings=settings, events=False)
    job = q.enqueue("tests.jobs:noop")
    _kill_worker_when(r, settings,
                      lambda: r.hget(q.qkeys.job(job.id), "status") == "finished")
    assert [d["event"] for _, d in read_events(r, prefix, job_id=job.id)] == [
        "processing", "completed"]
    assert _history(r, q, job.id) == ["processing", "completed"]


def test_a_worker_killed_while_its_job_runs_keeps_the_processing_event(r, settings, prefix):
    """The claim's crash point: SIGKILL the worker the moment the record says started.
    claim.lua wrote the processing event with the start; no outcome follows (the reaper
    takes the job back once its lease is over, and says so with its own event)."""
    q = Queue("default", r, settings=settings, events=False)
    job = q.enqueue("tests.jobs:sleep", 30)
    _kill_worker_when(r, settings,
                      lambda: r.hget(q.qkeys.job(job.id), "status") == "started")
    assert [d["event"] for _, d in read_events(r, prefix, job_id=job.id)] == ["processing"]
    assert _history(r, q, job.id) == ["processing"]


def test_the_history_constants_of_the_scripts_are_pythons(r):
    """_lib.lua's HISTORY_* (every script that writes a history, history.lua included)
    and events/history.py's (what the docs, the reader and the tests say) are one cap
    and one pair of TTLs."""
    from fusionworker.events.history import HISTORY_CAP, HISTORY_GONE_TTL, HISTORY_TTL

    local, lib = _lib()
    got = r.eval(f"{local}\n{lib}\nreturn {{HISTORY_CAP, HISTORY_TTL, HISTORY_GONE_TTL}}", 0)
    assert got == [HISTORY_CAP, HISTORY_TTL, HISTORY_GONE_TTL]


def test_a_record_with_garbage_where_the_event_reads_reads_as_python_does(r, settings, burst,
                                                                         prefix):
    """claim.lua builds the processing event from the record: a hand-written record whose
    priority is not a number and whose times are not finite reads as ``Job.from_hash``
    reads it (priority 0, no enqueue time: no wait), in both of its events; it runs."""
    q = Queue("junk", r, settings=settings, events=False)
    junk = q.enqueue("tests.jobs:add", 1, 1)
    r.hset(q.qkeys.job(junk.id), mapping={"priority": "high", "enqueued_at": "-inf",
                                          "scheduled_for": "nan"})
    burst("junk", middleware=[EventsMiddleware()])
    assert q.fetch_job(junk.id).result == 2
    raw = [f for _, f in r.xrange(f"{prefix}:events") if f["job_id"] == junk.id]
    assert [f["event"] for f in raw] == ["processing", "completed"]
    assert raw[0]["priority"] == raw[1]["priority"] == "0" and "wait_time" not in raw[0]


def test_a_record_without_a_function_or_an_enqueue_time_gives_an_event_without_them(r, settings,
                                                                                   prefix):
    """The processing event names only what the record has: no ``function`` field (a
    hand-written record), no ``wait_time`` without a usable enqueue time; the fields it
    has keep their order."""
    q = Queue("bare", r, settings=settings, events=False)
    job = q.enqueue("tests.jobs:add", 1, 1)
    r.hdel(q.qkeys.job(job.id), "func")
    r.hset(q.qkeys.job(job.id), "enqueued_at", "soon")
    stream = f"{prefix}:events"
    q.scripts.claim(keys=[q.qkeys.base, stream],
                    args=["w1", "tok", 30, 60, "", 1000, "host-1", "bare"])
    ((_, doc),) = r.xrange(stream)
    assert list(doc) == ["@timestamp", "event", "job_id", "queue", "priority", "attempt",
                         "worker", "host"]
    assert (doc["event"], doc["job_id"], doc["queue"], doc["priority"], doc["attempt"],
            doc["worker"], doc["host"]) == ("processing", job.id, "bare", "0", "1", "w1",
                                            "host-1")


def test_a_progress_event_that_cannot_be_written_is_counted_dropped(r, settings, burst,
                                                                   prefix):
    """progress.lua writes the fields and says why the event was not written: the event
    log counts it dropped, as it does the lost processing and outcome events."""
    import threading

    q = Queue("lostp", r, settings=settings, events=False)
    key = f"{prefix}:go"
    job = q.enqueue("tests.progress_jobs:report_then_wait", settings.redis_url, key, 0.25,
                    "half")
    r.set(q.qkeys.job_events(job.id), "not a list")     # its history: another type

    def release() -> None:      # once the running job's progress is written
        for _ in range(400):
            if r.hget(q.qkeys.job(job.id), "progress") is not None:
                break
            threading.Event().wait(0.05)
        r.rpush(key, "go")

    helper = threading.Thread(target=release, daemon=True)
    helper.start()
    mw = EventsMiddleware()
    burst("lostp", middleware=[mw])
    helper.join(5)
    done = q.fetch_job(job.id)
    assert done.status == "finished" and done.progress == 1.0   # every write made
    assert mw.scripted
    stats = mw.sink.stats()     # processing, progress and completed: none written
    assert (stats["delivered"], stats["dropped"]) == (0, 3)
    assert r.get(q.qkeys.job_events(job.id)) == "not a list"
