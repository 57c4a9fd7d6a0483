"""Bulk enqueue on the real Redis: ``Queue.prepare`` + ``Queue.enqueue_many``, and
``fusionworker enqueue --from-file``."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis
from click.testing import CliRunner

from fusionworker.cli import main
from fusionworker.core.job import SEQ_LIMIT
from fusionworker.core.queue import PreparedJob
from fusionworker.exceptions import InvalidFunction, PartialEnqueue, PriorityOutOfRange


def _written(r, q) -> int:
    """Keys of this queue that exist (nothing written -> 0)."""
    return sum(1 for _ in r.scan_iter(match=q.qkeys.base + "*", count=1000))


def test_prepare_validates_like_enqueue_and_writes_nothing(queue, r):
    q = queue("bulk")
    p = q.prepare("tests.jobs:add", 1, 2, priority=7, timeout=30, max_retries=2,
                  retry_delay=1.5, group="g", unique_key="u", job_id="j1",
                  on_failure_url="https://example.org/hook")
    assert isinstance(p, PreparedJob)
    assert (p.queue, p.id, p.func, p.priority, p.unique_key) == ("bulk", "j1", "tests.jobs:add",
                                                                 7, "u")
    for bad, error in ((("no_colon",), {}, ), InvalidFunction), \
                      ((("tests.jobs:noop",), {"priority": 5000}), PriorityOutOfRange), \
                      ((("tests.jobs:noop", object()), {}), TypeError), \
                      ((("tests.jobs:noop",), {"timeout": 0}), ValueError):
        args, kwargs = bad
        with pytest.raises(error):
            q.prepare(*args, **kwargs)
        with pytest.raises(error):
            q.enqueue(*args, **kwargs)
    assert _written(r, q) == 0


def test_a_prepared_job_holds_every_field_is_frozen_and_makes_its_payload_when_sent(queue):
    """prepare() makes the PreparedJob by one update of its __dict__ (a frozen dataclass's
    __init__ costs three times that): every field is set, it stays frozen, equal to one
    made by its __init__, and its enqueue_many entry is made only when a bulk write asks."""
    q = queue("bulk")
    p = q.prepare("tests.jobs:add", 1, 2, priority=3, job_id="j", depends_on=["a"])
    assert set(vars(p)) == {f.name for f in dataclasses.fields(PreparedJob)}
    assert p == PreparedJob(**vars(p))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.priority = 4  # type: ignore[misc]
    entry = json.loads(p.payload)
    assert entry[:3] == ["j", 3, "deferred"] and entry[6] == p.fields
    assert entry[7] == [f"{q.name}:a"]


def test_enqueue_many_writes_the_same_records_as_enqueue(queue, r):
    q, single = queue("bulk"), queue("single")
    specs = [
        (("tests.jobs:add", 1, 2), {"priority": 5, "timeout": 30, "max_retries": 3}),
        (("tests.jobs:echo", "x"), {"body": "hé ✓ \U0001f600", "retry_delay": 2.0}),
        (("tests.jobs:noop",), {"group": "g", "unique_key": "k1"}),
        (("tests.jobs:noop",), {"group": "g"}),
        (("tests.jobs:noop",), {"priority": -3, "on_failure_url": "https://example.org/h"}),
    ]
    jobs = q.enqueue_many([q.prepare(*a, **k) for a, k in specs])
    ones = [single.enqueue(*a, **k) for a, k in specs]
    assert len(jobs) == len(specs)
    skip = {"id", "queue", "enqueued_at"}
    for bulk_job, one in zip(jobs, ones):
        stored = q.fetch_job(bulk_job.id)
        assert stored == bulk_job  # the returned Job is what Redis holds
        assert not bulk_job.deduplicated
        a = {k: v for k, v in stored.to_dict().items() if k not in skip}
        b = {k: v for k, v in single.fetch_job(one.id).to_dict().items() if k not in skip}
        assert a == b
        assert single.fetch_job(one.id) == one   # enqueue's Job too is what Redis holds
        assert set(r.hkeys(q.qkeys.job(bulk_job.id))) == set(r.hkeys(single.qkeys.job(one.id)))
    # same placement: group g holds the first, the second waits on the group's list
    assert r.zrevrange(q.qkeys.pending, 0, -1) == [jobs[0].id, jobs[1].id, jobs[2].id, jobs[4].id]
    assert r.lrange(q.qkeys.base + "group:g", 0, -1) == [jobs[3].id]
    assert [j.seq for j in jobs] == [1, 2, 3, 4, 5]


def test_enqueue_returns_what_redis_holds_without_reading_it_back(queue, r):
    """enqueue builds its Job from what it sent and the script's answer (seq, enqueue
    time, due time): one round trip. A duplicate is the live job, read back."""
    q = queue("single")
    later = q.enqueue_in(30, "tests.jobs:add", 1, 2, priority=4, group="g", timeout=9)
    now = q.enqueue("tests.jobs:echo", "x", unique_key="u", max_retries=2, retry_delay=1.5)
    for job in (later, now):
        assert q.fetch_job(job.id) == job and job.seq > 0 and job.enqueued_at
    assert later.status == "scheduled" and later.scheduled_for == pytest.approx(
        later.enqueued_at + 30, abs=1e-3)
    r.hset(q.qkeys.job(now.id), "priority", 7)         # changed since: the duplicate shows it
    dup = q.enqueue("tests.jobs:echo", "x", unique_key="u")
    assert dup.deduplicated and dup.id == now.id and dup.priority == 7


def test_dedup_inside_a_call_and_against_live_jobs(queue):
    q = queue("bulk")
    live = q.enqueue("tests.jobs:noop", unique_key="taken")
    jobs = q.enqueue_many([
        q.prepare("tests.jobs:noop", unique_key="taken"),
        q.prepare("tests.jobs:add", 1, 1, unique_key="new"),
        q.prepare("tests.jobs:add", 2, 2, unique_key="new"),
        q.prepare("tests.jobs:noop", job_id=live.id),
    ])
    assert [j.deduplicated for j in jobs] == [True, False, True, True]
    assert jobs[0].id == live.id and jobs[3].id == live.id and jobs[0].status == "queued"
    assert jobs[2].id == jobs[1].id and jobs[2].args == [1, 1]
    assert q.count == 2


def test_chunks_keep_fifo_order_and_each_job_once(queue, r):
    q = queue("bulk")
    prepared = [q.prepare("tests.jobs:add", i, 0) for i in range(53)]
    jobs = q.enqueue_many(prepared, chunk_size=7)
    assert [j.id for j in jobs] == [p.id for p in prepared]
    assert r.zrevrange(q.qkeys.pending, 0, -1) == [p.id for p in prepared]
    assert [j.seq for j in jobs] == list(range(1, 54))
    # the same prepared jobs again: every one is a live duplicate, nothing new is written
    again = q.enqueue_many(prepared, chunk_size=10)
    assert all(j.deduplicated for j in again) and q.count == 53 and r.get(q.qkeys.seq) == "53"


def test_bad_items_are_refused_before_anything_is_written(queue, r):
    q, other = queue("bulk"), queue("other")
    good = [q.prepare("tests.jobs:noop") for _ in range(3)]
    with pytest.raises(TypeError, match="item 3"):
        q.enqueue_many([*good, {"func": "tests.jobs:noop"}])
    with pytest.raises(ValueError, match="item 1: prepared for queue 'other'"):
        q.enqueue_many([good[0], other.prepare("tests.jobs:noop")])
    with pytest.raises(ValueError, match="chunk_size"):
        q.enqueue_many(good, chunk_size=0)
    assert _written(r, q) == 0 and _written(r, other) == 0
    assert q.enqueue_many([]) == []


def test_a_chunk_is_all_or_nothing(queue, r):
    """The sequence runs out inside the second chunk: the first chunk is written whole,
    the second not at all, and PartialEnqueue says which jobs were written."""
    q = queue("bulk")
    r.set(q.qkeys.seq, SEQ_LIMIT - 8)  # room for 7 more jobs
    prepared = [q.prepare("tests.jobs:noop") for _ in range(10)]
    with pytest.raises(PartialEnqueue) as caught:
        q.enqueue_many(prepared, chunk_size=5)
    assert [j.id for j in caught.value.jobs] == [p.id for p in prepared[:5]]
    assert isinstance(caught.value.__cause__, redis.ResponseError)
    assert r.zrevrange(q.qkeys.pending, 0, -1) == [p.id for p in prepared[:5]]
    assert all(q.fetch_job(p.id) is None for p in prepared[5:])
    # a first chunk that does not fit: a plain error, nothing written
    r.set(q.qkeys.seq, SEQ_LIMIT - 3)
    fresh = [q.prepare("tests.jobs:noop") for _ in range(5)]
    with pytest.raises(redis.ResponseError, match="sequence exhausted"):
        q.enqueue_many(fresh)
    assert all(q.fetch_job(p.id) is None for p in fresh) and q.count == 5


def test_scheduled_jobs_and_events(queue, r, settings):
    from fusionworker.core.queue import Queue
    from fusionworker.events import MemorySink

    sink = MemorySink()
    q = Queue("bulk", r, settings=settings, events=sink)
    now = q.prepare("tests.jobs:noop")
    later = q.prepare_call("tests.jobs:noop", _when=("in", 60))
    jobs = q.enqueue_many([now, later, q.prepare("tests.jobs:noop", job_id=now.id)])
    assert [j.status for j in jobs] == ["queued", "scheduled", "queued"]
    assert jobs[1].scheduled_for == pytest.approx(jobs[1].enqueued_at + 60, abs=0.01)
    assert q.fetch_job(later.id) == jobs[1]
    assert [d["job_id"] for d in sink.docs if d["event"] == "queued"] == [now.id, later.id]


def test_a_bulk_larger_than_the_event_buffer_drops_no_event(r, settings):
    """Events that go through the producer's sink (not the script): back-pressure."""
    from fusionworker.core.keys import Keys
    from fusionworker.core.queue import Queue
    from fusionworker.events import RedisStreamSink

    class OwnSink(RedisStreamSink):  # not the plain stream sink: the producer emits
        pass

    sink = OwnSink(r, settings.prefix, buffer_size=100, batch_size=50, flush_interval=0.05)
    q = Queue("bulk", r, settings=settings, events=sink)
    jobs = q.enqueue_many([q.prepare("tests.jobs:noop") for _ in range(1000)], chunk_size=60)
    assert sink.flush(10.0)
    assert sink.stats()["dropped"] == 0
    assert r.xlen(Keys(settings.prefix).events) == 1000 == len(jobs)
    sink.close()


def test_the_scripts_write_the_events_the_sink_writes(queue, r, settings):
    """With the default sink (the Redis stream) ``enqueue.lua`` and each chunk of
    ``enqueue_many.lua`` XADD the "queued" events themselves: the same documents, and
    the same job histories, that the producer's sink writes (a sink of another class)."""
    from fusionworker.core.keys import Keys
    from fusionworker.core.queue import Queue
    from fusionworker.events import RedisStreamSink, default_sink
    from fusionworker.events.history import HISTORY_TTL
    from fusionworker.events.schema import _iso_utc

    class OwnSink(RedisStreamSink):  # not the plain stream sink: the producer emits
        pass

    own = OwnSink(r, settings.prefix)
    via_sink = Queue("bulk", r, settings=settings, events=own)
    q = queue("bulk")
    specs = [(("tests.jobs:add", 1, 2), {"priority": -7, "group": "g"}),
             (("tests.jobs:noop",), {"priority": 1000}),
             (("tests.jobs:noop",), {"at_front": True})]
    sunk = [via_sink.enqueue(*a, **k) for a, k in specs]
    assert own.flush(5.0) and own.stats()["delivered"] == 3
    own.close()
    sink = default_sink(settings, r)
    delivered = sink.stats()["delivered"]
    ones = [q.enqueue(*a, **k) for a, k in specs]
    jobs = q.enqueue_many([q.prepare(*a, **k) for a, k in specs])
    later = [q.enqueue_in(60, "tests.jobs:noop"),
             *q.enqueue_many([q.prepare_call("tests.jobs:noop", _when=("in", 60))])]
    assert sink.stats()["delivered"] == delivered and sink.stats()["buffered"] == 0
    stream = r.xrange(Keys(settings.prefix).events)
    docs = {f["job_id"]: (sid, f) for sid, f in stream}
    assert len(docs) == len(stream) == 11
    for made in zip(sunk, ones, jobs):
        found = []
        for job in made:
            sid, doc = docs[job.id]
            assert [json.loads(h) for h in r.lrange(q.qkeys.job_events(job.id), 0, -1)] \
                == [[sid, doc]]
            doc = dict(doc)
            assert doc.pop("@timestamp") == _iso_utc(job.enqueued_at)
            assert doc.pop("job_id") == job.id
            found.append(doc)
        assert found[0] == found[1] == found[2] and found[0]["event"] == "queued"
        assert found[0]["queue"] == "bulk"
    assert [docs[j.id][1]["event"] for j in later] == ["queued", "queued"]
    assert HISTORY_TTL - 60 < r.ttl(q.qkeys.job_events(ones[0].id)) <= HISTORY_TTL
    assert q.enqueue("tests.jobs:noop", job_id=ones[1].id).deduplicated   # no event
    assert r.xlen(Keys(settings.prefix).events) == 11


def test_the_scripts_timestamps_are_the_event_timestamps(r):
    """The script's own ISO-8601 formatting (events.make_event's @timestamp) over leap
    days, year ends and centuries, against Python's."""
    import datetime
    import re

    from fusionworker.core.scripts import source
    from fusionworker.events.schema import _iso_utc

    code = re.search(r"\nISO_LAST = .*?\nfunction iso_utc\(.*?\nend\n", source("enqueue_many"),
                     re.S)
    stamps = [(0, 0), (951782400, 0), (951868799, 999999), (946684799, 999000),
              (1709164800, 123456), (4107542399, 500), (4102444800, 1), (1700000000, 999),
              (253402300799, 999999), (-30610224000, 5000),  # years 9999 and 1000
              (1700000000, 999999.6)]    # rounds to the next second, as Python's does
    stamps += [(1000000000 + 86400 * 37 * k + 3607 * k, 1000 * k) for k in range(300)]
    # before the year 1000 the script writes four digits through string.format, as ISO
    # does (datetime's isoformat; the events never carry such a time)
    early = [(-62135596800, 0), (-31000000000, 7), (-30610224001, 999999)]
    texts = [repr(s + u / 1e6) for s, u in stamps + early]
    got = r.eval("local ISO_LAST, iso_utc" + code.group(0) + "local out = {}\n"
                 "for i = 1, #ARGV do\n"
                 "  out[#out + 1] = iso_utc(tonumber(ARGV[i]))\n"
                 "  out[#out + 1] = iso_utc(tonumber(ARGV[i]))\n"   # the kept answer
                 "end\nreturn out", 0, *texts)
    want = [_iso_utc(s + u / 1e6) for s, u in stamps]
    want += [datetime.datetime.fromtimestamp(s + u / 1e6, datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z") for s, u in early]
    assert got == [text for text in want for _ in range(2)]
    assert got[-6:-4] == ["0001-01-01T00:00:00.000Z"] * 2


def test_keys_of_the_wrong_type_refuse_the_chunk_before_any_write(queue, r, settings):
    from fusionworker.core.keys import Keys

    q = queue("bulk")
    for key in (q.qkeys.base + "deferred", Keys(settings.prefix).events, q.qkeys.pending):
        r.set(key, "not a set")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            q.enqueue_many([q.prepare("tests.jobs:noop") for _ in range(3)])
        assert _written(r, q) == (1 if key.startswith(q.qkeys.base) else 0)
        r.delete(key)
    events = Keys(settings.prefix).events   # enqueue.lua writes the stream too
    r.set(events, "not a stream")
    for when in (None, 60):
        with pytest.raises(redis.ResponseError, match=f"WRONGTYPE {events} holds a string"):
            if when is None:
                q.enqueue("tests.jobs:noop")
            else:
                q.enqueue_in(when, "tests.jobs:noop", group="g")
        assert _written(r, q) == 0 and r.get(events) == "not a stream"


def test_one_wake_up_per_chunk(queue, r):
    q = queue("bulk")
    pubsub = r.pubsub()
    pubsub.subscribe(q.qkeys.wake)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    q.enqueue_many([q.prepare("tests.jobs:noop") for _ in range(10)], chunk_size=4)
    messages = []
    while (msg := pubsub.get_message(timeout=0.5)) is not None:
        messages.append(msg["data"])
    pubsub.close()
    assert len(messages) == 3 and q.count == 10


@pytest.mark.slow
def test_worker_processes_run_bulk_enqueued_jobs(queue, r, settings, processes, prefix):
    q = queue("bulk")
    key = f"{prefix}:ran"
    jobs = q.enqueue_many([q.prepare("tests.jobs:record", settings.redis_url, key, i,
                                     priority=i % 3) for i in range(300)], chunk_size=64)
    procs = [processes.worker("--customq", "bulk", "--burst") for _ in range(2)]
    for proc in procs:
        assert proc.wait(60) == 0, processes.output(proc)
    assert sorted(int(v) for v in r.lrange(key, 0, -1)) == list(range(300))
    assert all(q.fetch_job(j.id).status == "finished" for j in jobs)


# -- fusionworker enqueue --from-file --------------------------------------------------


def _cli(settings, *args, input=None):
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    return CliRunner().invoke(main, list(args), env=env, input=input, catch_exceptions=False)


def test_from_file_enqueues_every_line(queue, settings, tmp_path):
    lines = [{"func": "tests.jobs:add", "args": [i, 1], "options": {"priority": i % 2}}
             for i in range(25)]
    lines.append({"func": "tests.jobs:echo", "kwargs": {"body": "hi"},
                  "options": {"job_id": "mine", "group": "g", "timeout": 5}})
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")  # blank lines are skipped
    result = _cli(settings, "enqueue", "bulk", "--from-file", str(path))
    assert result.exit_code == 0, result.output
    assert "26 jobs enqueued" in result.output
    q = queue("bulk")
    assert q.count == 26
    mine = q.fetch_job("mine")
    assert (mine.func, mine.kwargs, mine.group, mine.timeout) == ("tests.jobs:echo",
                                                                  {"body": "hi"}, "g", 5.0)
    # stdin too, and a re-run reports the duplicates
    result = _cli(settings, "enqueue", "bulk", "--from-file", "-", input=json.dumps(lines[-1]))
    assert result.exit_code == 0 and "0 jobs enqueued on bulk, 1 duplicate skipped" in result.output


@pytest.mark.parametrize("bad, message", [
    ("{not json", "line 3: not valid JSON"),
    ('["tests.jobs:noop"]', "line 3: expected a JSON object"),
    ('{"args": []}', "line 3: 'func' is required"),
    ('{"func": "nocolon"}', "line 3: invalid function reference"),
    ('{"func": "tests.jobs:noop", "args": {}}', "line 3: 'args' must be a JSON list"),
    ('{"func": "tests.jobs:noop", "kwargs": []}', "line 3: 'kwargs' must be a JSON object"),
    ('{"func": "tests.jobs:noop", "options": {"priority": 9999}}', "line 3: priority 9999"),
    ('{"func": "tests.jobs:noop", "options": {"colour": 1}}', "line 3: unknown option 'colour'"),
    ('{"func": "tests.jobs:noop", "extra": 1}', "line 3: unknown field 'extra'"),
])
def test_from_file_bad_line_is_named_and_nothing_is_written(queue, r, settings, tmp_path, bad,
                                                            message):
    path = tmp_path / "jobs.jsonl"
    good = json.dumps({"func": "tests.jobs:noop"})
    path.write_text("\n".join([good, good, bad, good]) + "\n")
    result = CliRunner().invoke(main, ["enqueue", "bulk", "--from-file", str(path)],
                                env={"REDIS_URL": settings.redis_url,
                                     "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"})
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert _written(r, queue("bulk")) == 0


def test_from_file_refuses_func_or_options_beside_it(settings, tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"func": "tests.jobs:noop"}) + "\n")
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    result = CliRunner().invoke(main, ["enqueue", "bulk", "tests.jobs:noop", "--from-file",
                                       str(path)], env=env)
    assert result.exit_code == 2 and "--from-file" in result.output
    result = CliRunner().invoke(main, ["enqueue", "bulk"], env=env)
    assert result.exit_code == 2 and "FUNC" in result.output
