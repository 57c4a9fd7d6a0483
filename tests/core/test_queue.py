"""Queue API on the real Redis: encoding, priority/FIFO, dedup, admin operations."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta

import pytest

from fusionworker.core.config import load_settings
from fusionworker.core.job import PRIORITY_MAX, PRIORITY_MIN, SEQ_LIMIT, score
from fusionworker.core.queue import Queue, find_queue_of, known_queues
from fusionworker.events.reader import job_history
from fusionworker.exceptions import InvalidFunction, InvalidOperation, NoSuchJob, PriorityOutOfRange
from tests import jobs


def test_enqueue_stores_a_json_record(queue):
    q = queue("sms")
    job = q.enqueue("tests.jobs:add", 1, 2, priority=10, timeout=30, max_retries=3)
    fetched = q.fetch_job(job.id)
    assert fetched is not None
    assert (fetched.func, fetched.args, fetched.kwargs) == ("tests.jobs:add", [1, 2], {})
    assert (fetched.priority, fetched.timeout, fetched.max_retries) == (10, 30.0, 3)
    assert fetched.status == "queued" and fetched.attempts == 0
    assert fetched.enqueued_at is not None and fetched.queue == "sms"
    assert q.fetch_job("nope") is None
    assert "sms" in known_queues(q.connection, q.settings.prefix)


def test_callable_is_stored_by_name_and_kwargs_clash_uses_enqueue_call(queue):
    q = queue()
    job = q.enqueue(jobs.echo, "x", body="hi")
    assert job.func == "tests.jobs:echo" and job.kwargs == {"body": "hi"}
    job = q.enqueue_call(jobs.echo, args=[1], kwargs={"priority": "mine", "timeout": 1})
    assert job.kwargs == {"priority": "mine", "timeout": 1} and job.priority == 0


def test_bad_input_is_refused_with_clear_errors(queue):
    q = queue()
    with pytest.raises(InvalidFunction):
        q.enqueue("no_colon")
    with pytest.raises(InvalidFunction):
        q.enqueue(lambda: 1)
    with pytest.raises(PriorityOutOfRange):
        q.enqueue("tests.jobs:noop", priority=PRIORITY_MAX + 1)
    with pytest.raises(TypeError):
        q.enqueue("tests.jobs:noop", object())
    assert q.count == 0


def test_score_encoding_is_exact_at_the_extremes(queue, r):
    assert score(PRIORITY_MAX, 1) < 2**52 and score(PRIORITY_MIN, SEQ_LIMIT - 1) > -(2**52)
    q = queue()
    r.set(q.qkeys.seq, SEQ_LIMIT - 3)
    top = q.enqueue("tests.jobs:noop", priority=PRIORITY_MAX)
    bottom = q.enqueue("tests.jobs:noop", priority=PRIORITY_MIN)
    assert int(r.zscore(q.qkeys.pending, top.id)) == PRIORITY_MAX * SEQ_LIMIT - (SEQ_LIMIT - 2)
    assert r.zscore(q.qkeys.pending, bottom.id) == float(PRIORITY_MIN * SEQ_LIMIT - (SEQ_LIMIT - 1))
    assert int(r.zscore(q.qkeys.pending, bottom.id)) == PRIORITY_MIN * SEQ_LIMIT - (SEQ_LIMIT - 1)
    import redis
    with pytest.raises(redis.ResponseError, match="sequence exhausted"):
        q.enqueue("tests.jobs:noop")


def test_priority_then_fifo(queue, r):
    q = queue()
    ids = [q.enqueue("tests.jobs:noop", priority=p).id for p in (0, 5, 0, -3, 5, 1023, -1023)]
    order = r.zrevrange(q.qkeys.pending, 0, -1)
    expected = [ids[5], ids[1], ids[4], ids[0], ids[2], ids[3], ids[6]]
    assert order == expected


def _produce(url, prefix, producer, n):
    settings = load_settings(environ={}, redis_url=url, prefix=prefix,
                             allowed_modules=("tests",))
    q = Queue("fifo", settings=settings)
    for i in range(n):
        q.enqueue("tests.jobs:noop", job_id=f"p{producer}-{i:04d}", priority=i % 2)


def test_fifo_across_producer_processes(settings, r):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_produce, args=(settings.redis_url, settings.prefix, p, 200))
             for p in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    q = Queue("fifo", r, settings=settings)
    order = r.zrevrange(q.qkeys.pending, 0, -1)
    assert len(order) == 800
    seqs = [int(r.hget(q.qkeys.job(j), "seq")) for j in order]
    prios = [int(r.hget(q.qkeys.job(j), "priority")) for j in order]
    assert prios == sorted(prios, reverse=True)
    for prio in (0, 1):
        band = [s for s, p in zip(seqs, prios) if p == prio]
        assert band == sorted(band), "FIFO inside a priority follows arrival order at Redis"
    for producer in range(4):
        mine = [int(j.split("-")[1]) for j in order if j.startswith(f"p{producer}-")]
        for prio in (0, 1):
            sub = [i for i in mine if i % 2 == prio]
            assert sub == sorted(sub), "each producer's own order is kept"


def test_dedup_by_job_id_and_unique_key(queue, r, settings):
    q = queue()
    first = q.enqueue("tests.jobs:noop", job_id="same")
    again = q.enqueue("tests.jobs:noop", job_id="same")
    assert again.deduplicated and again.id == first.id and q.count == 1
    a = q.enqueue("tests.jobs:noop", unique_key="user-7")
    b = q.enqueue("tests.jobs:noop", unique_key="user-7")
    assert b.deduplicated and b.id == a.id and q.count == 2


def test_dedup_window_after_finish(queue, burst, settings):
    q = queue()
    q.enqueue("tests.jobs:noop", unique_key="k")
    burst()
    assert q.enqueue("tests.jobs:noop", unique_key="k").deduplicated  # finished < 30 s ago
    short = Queue("default", q.connection, settings=settings.replace(dedup_window=0))
    assert not short.enqueue("tests.jobs:noop", unique_key="k").deduplicated


def test_cancel_delete_reprioritize(queue, r):
    q = queue()
    a = q.enqueue("tests.jobs:noop")
    b = q.enqueue("tests.jobs:noop")
    assert q.cancel(a.id).status == "canceled" and q.count == 1
    with pytest.raises(InvalidOperation):
        q.cancel(a.id)
    q.reprioritize(b.id, 7)
    assert q.fetch_job(b.id).priority == 7
    assert int(r.zscore(q.qkeys.pending, b.id)) == 7 * SEQ_LIMIT - q.fetch_job(b.id).seq
    q.delete(b.id)
    assert q.fetch_job(b.id) is None and q.count == 0
    with pytest.raises(NoSuchJob):
        q.delete(b.id)
    with pytest.raises(NoSuchJob):
        q.reprioritize("missing", 1)


def test_delayed_jobs_are_scheduled(queue):
    q = queue()
    j1 = q.enqueue_in(60, "tests.jobs:noop")
    j2 = q.enqueue_at(datetime.now(UTC) + timedelta(hours=1), "tests.jobs:noop")
    assert j1.status == j2.status == "scheduled" and q.count == 0
    assert q.stats()["scheduled"] == 2
    past = q.enqueue_at(datetime.now(UTC) - timedelta(seconds=5), "tests.jobs:noop")
    assert past.status == "queued"


def test_stats_bands_and_find(queue):
    q = queue("bands")
    q.enqueue("tests.jobs:noop", priority=20)
    q.enqueue("tests.jobs:noop", priority=3)
    q.enqueue("tests.jobs:noop", priority=0)
    low = q.enqueue("tests.jobs:noop", priority=-5)
    stats = q.stats()
    assert stats["pending"] == 4
    assert stats["bands"] == {"high": 1, "normal": 2, "low": 1}
    assert stats["oldest_age"] is not None and stats["oldest_age"] >= 0
    assert find_queue_of(q.connection, low.id, q.settings.prefix) == "bands"
    q.pause()
    assert q.stats()["paused"] and q.is_paused


def test_events_true_means_the_default_sink_and_a_non_sink_is_refused_at_once(
        r, settings, caplog):
    """``events=True`` reads as "on" (the default sink, as ``None``): its enqueue writes
    the "queued" event and warns of nothing; a value that is no sink is a TypeError when
    the Queue is made, not a warning at every enqueue after its write."""
    q = Queue("evq", r, settings=settings, events=True)
    job = q.enqueue(jobs.noop)
    events = job_history(r, settings.prefix, "evq", job.id)
    assert [doc["event"] for _, doc in events] == ["queued"], events
    assert not [rec for rec in caplog.records if rec.levelname == "WARNING"]
    with pytest.raises(TypeError, match="events must be None, True, False or a sink"):
        Queue("evq", r, settings=settings, events="yes")
