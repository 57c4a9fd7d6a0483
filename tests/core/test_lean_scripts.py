"""The short paths of enqueue.lua, claim.lua and finish.lua keep their promises: a key
of the wrong type is refused with nothing written, and what a claim answers is the
record as Redis holds it."""

from __future__ import annotations

import threading

import pytest
import redis

from fusionworker.core.scripts import replies
from tests.waiting import wait_for

FIELDS = ["func", "tests.jobs:noop", "args", "[]", "kwargs", "{}", "queue", "lean"]


def _enqueue(q, job_id, mode="now", when=0):
    return q.scripts.enqueue(keys=[q.qkeys.base, q.keys.queues],
                             args=[job_id, 0, mode, when, "", 0, "", "", *FIELDS])


def _claim(q, token="tok", count=None):
    return q.scripts.claim(keys=[q.qkeys.base],
                           args=["w1", token, 30, 60] + ([count] if count else []))


def _state(r, q):
    """Every key of the queue with its value, and whether the queue is registered."""
    out = {}
    for key in sorted(r.scan_iter(match=q.qkeys.base + "*")):
        kind = r.type(key)
        out[key] = {"string": r.get, "hash": r.hgetall, "zset": lambda k: r.zrange(
            k, 0, -1, withscores=True), "set": r.smembers, "list": lambda k: r.lrange(
            k, 0, -1)}[kind](key)
    registry = q.keys.queues
    return out, r.type(registry) == "set" and r.sismember(registry, "lean")


@pytest.mark.parametrize("where", ["queues", "pending", "seq", "scheduled"])
def test_a_new_job_meeting_a_key_of_the_wrong_type_writes_nothing(queue, r, where):
    q = queue("lean")
    r.srem(q.keys.queues, "lean")
    _enqueue(q, "first")             # the sequence and the registries exist
    r.srem(q.keys.queues, "lean")
    key = {"queues": q.keys.queues, "pending": q.qkeys.pending, "seq": q.qkeys.seq,
           "scheduled": q.qkeys.scheduled}[where]
    saved = r.dump(key) if r.exists(key) else None
    r.delete(key)
    r.set(key, "not a set") if where != "seq" else r.hset(key, "x", "1")
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        _enqueue(q, "second", mode="in" if where == "scheduled" else "now",
                 when=60 if where == "scheduled" else 0)
    assert _state(r, q) == before        # the INCR and the SADD before it were undone
    r.delete(key)
    if saved is not None:
        r.restore(key, 0, saved)
    if where == "queues":
        r.sadd(q.keys.queues, "other")   # a registry holding others is kept as it was


def test_a_refused_enqueue_leaves_the_registry_as_it_was(queue, r):
    q = queue("lean")
    r.sadd(q.keys.queues, "other")
    r.srem(q.keys.queues, "lean")
    r.set(q.qkeys.pending, "not a zset")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        _enqueue(q, "a")
    assert not r.sismember(q.keys.queues, "lean") and r.sismember(q.keys.queues, "other")
    assert not r.exists(q.qkeys.seq) and not r.exists(q.qkeys.job("a"))


@pytest.mark.parametrize("outcome,registry", [("finished", "finished"), ("retry", "scheduled")])
def test_an_outcome_meeting_a_registry_of_the_wrong_type_writes_nothing(
        queue, r, outcome, registry):
    q = queue("lean")
    _enqueue(q, "a")
    assert replies.claim(_claim(q)).kind == "job"
    r.set(q.qkeys.registry(registry), "not a zset")
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.scripts.finish(keys=[q.qkeys.base], args=["a", "tok", outcome, 500, 60, 5, 0,
                                                    "", "result", "1"])
    assert _state(r, q) == before
    assert r.hget(q.qkeys.job("a"), "token") == "tok"


def _minutes(q, *triples, result_ttl=500):
    return q.scripts.minutes(keys=[q.qkeys.base], args=[result_ttl, *triples])


def test_a_finish_writes_no_minute_count_and_answers_its_time(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    claimed = replies.claim(_claim(q))
    done = replies.finish(q.scripts.finish(keys=[q.qkeys.base], args=[
        "a", "tok", "finished", 500, 60, 0, 0]))
    assert done.outcome == "finished" and done.at == float(r.hget(q.qkeys.job("a"), "ended_at"))
    assert float(claimed.now or 0) <= done.at
    assert not list(r.scan_iter(match=q.qkeys.base + "minute:*"))


def test_a_minute_count_on_a_key_of_another_type_is_skipped_not_refused(queue, r):
    q = queue("lean")
    r.set(q.qkeys.minute(100), "not a hash")
    assert _minutes(q, 100, "finished", 2, 101, "failed", 1) == 2    # both taken
    assert r.get(q.qkeys.minute(100)) == "not a hash"
    assert r.hgetall(q.qkeys.minute(101)) == {"failed": "1"}
    assert 7100 < r.ttl(q.qkeys.minute(101)) <= 7200


def test_the_first_finished_count_of_a_minute_prunes_the_finished_registry(queue, r):
    q = queue("lean")
    now = float(r.time()[0])
    minute = int(now // 60)
    r.zadd(q.qkeys.registry("finished"), {"old": now - 1000, "recent": now - 10})
    assert _minutes(q, minute, "failed", 1) == 1                 # not a finished count
    assert r.zcard(q.qkeys.registry("finished")) == 2
    assert _minutes(q, minute, "finished", 3) == 1               # makes the field: prunes
    assert r.zrange(q.qkeys.registry("finished"), 0, -1) == ["recent"]
    r.zadd(q.qkeys.registry("finished"), {"old": now - 1000})
    r.expire(q.qkeys.minute(minute), 50)
    assert _minutes(q, minute, "finished", 2) == 1               # the field was there
    assert r.zrange(q.qkeys.registry("finished"), 0, -1) == ["old", "recent"]
    assert r.hgetall(q.qkeys.minute(minute)) == {"failed": "1", "finished": "5"}
    assert r.ttl(q.qkeys.minute(minute)) <= 50                   # its TTL set once
    assert _minutes(q, minute + 1, "finished", 1, result_ttl=0) == 1   # kept forever: no prune
    assert r.zcard(q.qkeys.registry("finished")) == 2


def test_a_finished_registry_of_another_type_is_not_pruned_and_the_count_kept(queue, r):
    q = queue("lean")
    r.set(q.qkeys.registry("finished"), "not a zset")
    assert _minutes(q, 7, "finished", 1) == 1
    assert r.hgetall(q.qkeys.minute(7)) == {"finished": "1"}
    assert r.get(q.qkeys.registry("finished")) == "not a zset"


def test_a_count_claim_stops_before_an_entry_it_could_not_dead_letter(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    r.zadd(q.qkeys.pending, {"ghost": -2**43})          # after a, no record
    _enqueue(q, "b")
    r.zadd(q.qkeys.pending, {"b": -2**44})              # after the ghost
    r.set(q.qkeys.failed, "not a zset")
    got = replies.claim(_claim(q, count=3))
    assert [c.job_id for c in got.jobs] == ["a"] and got.missing == ()
    assert r.zrange(q.qkeys.pending, 0, -1) == ["b", "ghost"]
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        _claim(q, token="t2")                            # the ghost first: refused
    assert _state(r, q) == before
    r.delete(q.qkeys.failed)
    assert replies.claim(_claim(q, token="t3")).missing == ("ghost",)


def test_the_claimed_record_is_the_record_redis_holds(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    first = replies.claim(_claim(q, token="t1"))
    assert first.jobs[0].data == r.hgetall(q.qkeys.job("a"))
    assert first.jobs[0].data["attempts"] == "1"
    assert replies.requeue(q.scripts.requeue(keys=[q.qkeys.base], args=[
        "a", "return", "t1", 60])).outcome == "requeued"
    r.hset(q.qkeys.job("a"), mapping={"worker": "old", "attempts": "3"})
    again = replies.claim(_claim(q, token="t2", count=2))
    assert again.jobs[0].data == r.hgetall(q.qkeys.job("a"))
    assert again.jobs[0].data["attempts"] == "4" and again.jobs[0].data["worker"] == "w1"
    assert again.jobs[0].data["token"] == "t2:1"


@pytest.mark.parametrize("capped", [False, True])
def test_a_lease_deadline_is_the_next_whole_second_after_now_plus_the_lease(queue, r, capped):
    """claim.lua (both of its paths) and touch_many.lua score `started` by now + lease
    rounded up to a whole second, so Redis keeps the scores of a small ZSET as integers
    (docs/design.md): never sooner than the lease, less than a second later."""
    q = queue("lean")
    _enqueue(q, "a")
    if capped:      # a queue with a setting takes the claim's other path
        r.set(q.qkeys.base + "max_active", "10")
    before = float(replies.claim(_claim(q, token="t1")).now)
    score = r.zscore(q.qkeys.started, "a")
    assert score == int(score) and before + 30 <= score < before + 31
    r.zadd(q.qkeys.started, {"a": 1.5})
    t0 = r.time()
    assert q.scripts.touch_many(keys=[q.qkeys.base], args=[45, "a", "t1"]) == [1]
    score = r.zscore(q.qkeys.started, "a")
    assert score == int(score) and t0[0] + t0[1] / 1e6 + 45 <= score < t0[0] + 47


@pytest.mark.parametrize("where", ["started", "failed"])
def test_a_popped_job_is_put_back_at_its_place_when_the_claim_is_refused(queue, r, where):
    q = queue("lean")
    _enqueue(q, "a")
    _enqueue(q, "b")
    if where == "failed":
        r.zadd(q.qkeys.pending, {"ghost": 1})           # first, without a record
    r.set(q.qkeys.registry(where), "not a zset")
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        _claim(q)
    assert _state(r, q) == before                       # same members, same scores
    r.delete(q.qkeys.registry(where))
    got = replies.claim(_claim(q, count=3))
    assert [c.job_id for c in got.jobs] == ["a", "b"]
    assert got.missing == (("ghost",) if where == "failed" else ())


@pytest.mark.parametrize("scheduled", [False, True], ids=["alone", "beside-scheduled-jobs"])
def test_a_queue_with_settings_reads_each_of_them(queue, r, scheduled):
    # the one EXISTS also covers `scheduled`: settings beside scheduled jobs are still read
    q = queue("lean")
    _enqueue(q, "a")
    if scheduled:
        _enqueue(q, "later", mode="in", when=600)
    r.set(q.qkeys.base + "paused", "1")
    assert replies.claim(_claim(q)).kind == "paused"
    r.delete(q.qkeys.base + "paused")
    r.set(q.qkeys.base + "max_active", "0")
    assert replies.claim(_claim(q)).kind == "capped"
    r.delete(q.qkeys.base + "max_active")
    assert replies.claim(_claim(q)).jobs[0].job_id == "a"


def test_an_outcome_meeting_a_started_set_of_the_wrong_type_undoes_its_registry_write(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    assert replies.claim(_claim(q)).kind == "job"
    r.delete(q.qkeys.started)
    r.set(q.qkeys.started, "not a zset")
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.scripts.finish(keys=[q.qkeys.base], args=["a", "tok", "finished", 500, 60, 0, 0])
    assert _state(r, q) == before and not r.exists(q.qkeys.registry("finished"))


def test_a_due_scheduled_job_is_promoted_and_the_next_time_answered(queue, r):
    q = queue("lean")
    _enqueue(q, "due", mode="in", when=600)
    _enqueue(q, "later", mode="in", when=900)
    assert replies.claim(_claim(q)).kind == "empty"      # nothing due yet
    later = r.zscore(q.qkeys.scheduled, "later")
    r.zadd(q.qkeys.scheduled, {"due": 1.0})              # its time has come
    got = replies.claim(_claim(q))
    assert got.jobs[0].job_id == "due" and r.hget(q.qkeys.job("due"), "status") == "started"
    empty = replies.claim(_claim(q, token="t2"))
    assert empty.kind == "empty" and empty.next_due == later
    assert r.zrange(q.qkeys.scheduled, 0, -1) == ["later"]


def test_a_queue_without_scheduled_jobs_answers_empty_without_a_next_time(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    assert replies.claim(_claim(q)).jobs[0].job_id == "a"
    empty = replies.claim(_claim(q, token="t2"))
    assert empty.kind == "empty" and empty.next_due is None and empty.now
    assert not r.exists(q.qkeys.scheduled)


def test_a_scheduled_key_of_the_wrong_type_refuses_the_claim_with_nothing_written(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    r.set(q.qkeys.scheduled, "not a zset")
    before = _state(r, q)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        _claim(q)
    assert _state(r, q) == before


def _finish(q, job_id, token="tok", outcome="finished"):
    return replies.finish(q.scripts.finish(keys=[q.qkeys.base], args=[
        job_id, token, outcome, 500, 60, 5, 0, "", "result", "1"]))


def _subscribed(r, channel):
    """A pub/sub connection whose subscription to ``channel`` Redis confirmed."""
    pubsub = r.pubsub()
    pubsub.subscribe(channel)
    wait_for(lambda: (m := pubsub.get_message(timeout=0.1)) and m["type"] == "subscribe")
    return pubsub


def _messages_until_probe(r, pubsub, channel):
    """Every message on ``channel`` before a probe published now (a PUBLISH inside a
    script is sent before the script answers: the probe comes after any of them)."""
    r.publish(channel, "probe")
    got = []
    while True:
        msg = wait_for(lambda: pubsub.get_message(timeout=0.1))
        if msg["type"] == "message":
            if msg["data"] == "probe":
                return got
            got.append(msg["data"])


def test_an_outcome_is_published_only_to_a_job_a_waiter_marked(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    _enqueue(q, "b")
    ch_a, ch_b = q.qkeys.done("a"), q.qkeys.done("b")
    pubsub = _subscribed(r, ch_a)
    assert replies.claim(_claim(q, token="ta")).jobs[0].job_id == "a"
    assert _finish(q, "a", token="ta").outcome == "finished"
    assert _messages_until_probe(r, pubsub, ch_a) == []     # nobody marked a: not published
    pubsub.close()

    pubsub = _subscribed(r, ch_b)
    read = replies.waiting(q.scripts.waiting(keys=[q.qkeys.base], args=["b"]))
    assert read.marked and read.data["status"] == "queued"
    assert r.hget(q.qkeys.job("b"), "waited") == "1"
    assert replies.claim(_claim(q, token="tb")).jobs[0].job_id == "b"
    assert _finish(q, "b", token="tb", outcome="retry").outcome == "retry"
    assert _messages_until_probe(r, pubsub, ch_b) == ["retry"]   # the mark outlives a retry
    r.zadd(q.qkeys.scheduled, {"b": 1.0})
    assert replies.claim(_claim(q, token="tb2")).jobs[0].job_id == "b"
    assert _finish(q, "b", token="tb2").outcome == "finished"
    assert _messages_until_probe(r, pubsub, ch_b) == ["finished"]
    pubsub.close()


def test_a_waiter_marking_after_the_outcome_reads_it(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    job = q.fetch_job("a")
    assert replies.claim(_claim(q)).jobs[0].job_id == "a"
    assert _finish(q, "a").outcome == "finished"          # before the waiter's mark
    read = replies.waiting(q.scripts.waiting(keys=[q.qkeys.base], args=["a"]))
    assert read.marked and read.data["status"] == "finished"
    assert r.hget(q.qkeys.job("a"), "waited") is None      # ended: nothing to mark
    assert job.wait(timeout=5).result == 1                 # no message needed


def test_the_waiting_read_writes_nothing_for_a_missing_or_wrong_typed_record(queue, r):
    q = queue("lean")
    assert replies.waiting(q.scripts.waiting(keys=[q.qkeys.base], args=["ghost"])) == \
        replies.Waiting(marked=False, data={})
    assert not r.exists(q.qkeys.job("ghost"))
    r.set(q.qkeys.job("bad"), "not a hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        q.scripts.waiting(keys=[q.qkeys.base], args=["bad"])
    assert r.get(q.qkeys.job("bad")) == "not a hash"


def test_a_waiter_gets_the_outcome_recorded_while_it_waits(queue, r):
    q = queue("lean")
    _enqueue(q, "a")
    assert replies.claim(_claim(q)).jobs[0].job_id == "a"
    job = q.fetch_job("a")
    got = []
    waiter = threading.Thread(target=lambda: got.append(job.wait(timeout=60)))
    waiter.start()
    wait_for(lambda: r.hget(q.qkeys.job("a"), "waited") == "1")   # subscribed, marked
    assert _finish(q, "a").outcome == "finished"
    waiter.join(60)
    assert [j.status for j in got] == ["finished"] and got[0].result == 1
