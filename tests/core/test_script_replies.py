"""Every script's reply, as the real script answers on the real Redis, parsed by
``fusionworker.core.scripts.replies`` (the one place replies are read by position)."""

from __future__ import annotations

import redis

from fusionworker.core.job import JobStatus
from fusionworker.core.scripts import NAMES, Scripts, replies
from fusionworker.events import read_events


def test_every_script_has_its_parser():
    # and Scripts.touch (touch_many.lua for one job): one form of each script
    assert set(replies.PARSERS) == set(NAMES) | {"touch"}
    assert "touch" not in NAMES


def _claim(q, count=None):
    args = ["w1", "tok", 30, 60] + ([count] if count is not None else [])
    return replies.claim(q.scripts.claim(keys=[q.qkeys.base], args=args))


def test_enqueue_and_claim_single_and_count_forms(queue, r):
    q = queue()
    assert _claim(q).kind == "empty" and _claim(q).next_due is None
    a = q.enqueue("tests.jobs:noop", job_id="a", priority=5)
    dup = replies.enqueue(q.scripts.enqueue(
        keys=[q.qkeys.base, q.keys.queues], args=["a", 0, "now", 0, "", 30, "", "", "func", "x"]))
    assert dup == replies.Enqueued("duplicate", "a", JobStatus.QUEUED) and dup.duplicate
    q.enqueue("tests.jobs:noop", job_id="b")
    q.enqueue("tests.jobs:noop", job_id="c")
    single = _claim(q)
    assert single.kind == "job" and single.now and single.missing == ()
    [claimed] = single.jobs
    assert claimed.job_id == a.id and claimed.data["status"] == "started"
    r.zadd(q.qkeys.pending, {"ghost": 10 * 2**42})    # an entry without a record
    many = _claim(q, count=5)
    assert many.kind == "job"
    assert [c.job_id for c in many.jobs] == ["b", "c"]
    assert all(c.data["func"] == "tests.jobs:noop" for c in many.jobs)
    assert many.missing == ("ghost",)
    q.enqueue_in(60, "tests.jobs:noop", job_id="later")
    empty = _claim(q)
    assert empty.kind == "empty" and empty.next_due is not None and empty.next_due > many.now
    q.pause()
    assert _claim(q) == replies.Claim("paused")


def test_a_claim_says_which_jobs_processing_event_it_could_not_write(queue, r):
    # a job's history key of another type: the claim takes it and names why its event
    # was not written whole (single and count forms): the event log counts it dropped
    q = queue()
    for jid in ("a", "b", "c"):
        q.enqueue("tests.jobs:noop", job_id=jid)
    r.set(q.qkeys.job_events("a"), "not a list")
    r.set(q.qkeys.job_events("c"), "not a list")
    stream = f"{q.settings.prefix}:events"

    def claim(token, count=None):
        args = ["w1", token, 30, 60, "" if count is None else count, 100, "host", q.name]
        return replies.claim(q.scripts.claim(keys=[q.qkeys.base, stream], args=args))

    [one] = claim("t1").jobs
    assert one.job_id == "a" and one.event_lost is not None and "WRONGTYPE" in one.event_lost
    two = claim("t2", count=5).jobs
    assert [(c.job_id, c.event_lost is None) for c in two] == [("b", True), ("c", False)]
    # b's history has its queued and processing events; a's and c's keys are untouched
    assert r.llen(q.qkeys.job_events("b")) == 2
    assert r.get(q.qkeys.job_events("a")) == r.get(q.qkeys.job_events("c")) == "not a list"
    processing = [e["job_id"] for _, e in read_events(r, q.settings.prefix)
                  if e["event"] == "processing"]
    assert sorted(processing) == ["a", "b", "c"]    # the stream took each (XADD first)


def test_enqueue_many_reply(queue):
    q = queue()
    q.enqueue("tests.jobs:noop", job_id="x")
    raw = q.scripts.enqueue_many(keys=[q.qkeys.base], args=[30, "[" + ",".join(
        p.payload for p in (q.prepare("tests.jobs:noop", job_id="x"),
                            q.prepare("tests.jobs:noop", job_id="y"),
                            q.prepare_call("tests.jobs:noop", job_id="z", _when=("in", 60))))
        + "]"])
    got = replies.enqueue_many(raw)
    assert [(j.placement, j.job_id, j.status) for j in got.jobs] == [
        ("duplicate", "x", JobStatus.QUEUED), ("queued", "y", JobStatus.QUEUED),
        ("scheduled", "z", JobStatus.SCHEDULED)]
    assert got.jobs[0].seq == 0 and got.jobs[1].seq > 0
    assert got.jobs[2].scheduled_for == got.now + 60 and got.jobs[1].scheduled_for is None


def test_finish_touch_requeue_replies(queue):
    q = queue()
    q.enqueue("tests.jobs:noop", job_id="j")
    q.enqueue("tests.jobs:noop", job_id="k")
    base = [q.qkeys.base]
    _claim(q)
    assert replies.touch(q.scripts.touch(keys=base, args=["j", "tok", 30])) is True
    assert replies.touch(q.scripts.touch(keys=base, args=["j", "other", 30])) is False
    assert replies.progress(q.scripts.progress(
        keys=base, args=["j", "tok", "", "progress", "0.5"])) == (True, None)
    assert replies.progress(q.scripts.progress(
        keys=base, args=["j", "old", "", "meta", "{}"])) == (False, None)
    # an event block whose history key holds another type: written, the event lost (why)
    q.connection.set(q.qkeys.job_events("j"), "not a list")
    written, why = replies.progress(q.scripts.progress(
        keys=[*base, f"{q.settings.prefix}:events"],
        args=["j", "tok", 100, "keep", 2, "event", "progress", "progress", "0.75"]))
    assert written and why is not None and "WRONGTYPE" in why
    assert q.connection.hget(q.qkeys.job("j"), "progress") == "0.75"
    q.connection.delete(q.qkeys.job_events("j"))
    assert replies.touch_many(q.scripts.touch_many(
        keys=base, args=[30, "j", "tok", "j", "nope"])) == [True, False]
    finish_args = [500, 60, 0, 30, "", "failure_reason", "exception"]
    assert replies.finish(q.scripts.finish(keys=base, args=["j", "old", "failed", *finish_args])
                          ) == replies.Finished(stale=True)
    done = replies.finish(q.scripts.finish(keys=base, args=["j", "tok", "failed", *finish_args]))
    assert not done.stale and done.outcome == "failed" and done.at
    assert done.at == float(q.connection.hget(q.qkeys.job("j"), "ended_at"))  # its time
    assert replies.requeue(q.scripts.requeue(keys=base, args=["j", "failed", "", 60])
                           ) == replies.Requeued("requeued")
    skipped = replies.requeue(q.scripts.requeue(keys=base, args=["j", "failed", "", 60]))
    assert skipped.outcome == "skipped" and "not failed" in (skipped.why or "")
    assert not skipped.missing
    assert replies.requeue(q.scripts.requeue(keys=base, args=["nope", "failed", "", 60])).missing


def test_admin_replies(queue):
    q = queue()
    q.enqueue("tests.jobs:noop", job_id="j", priority=3)
    base = [q.qkeys.base]
    assert replies.reprioritize(q.scripts.reprioritize(keys=base, args=["j", 7])
                                ) == replies.Changed("ok", old_priority=3)
    assert replies.cancel(q.scripts.cancel(keys=base, args=["j", 60])
                          ) == replies.Changed("canceled", JobStatus.QUEUED)
    assert replies.cancel(q.scripts.cancel(keys=base, args=["j", 60])
                          ) == replies.Changed("refused", JobStatus.CANCELED)
    assert replies.reprioritize(q.scripts.reprioritize(keys=base, args=["j", 1])
                                ) == replies.Changed("refused", JobStatus.CANCELED)
    assert replies.delete(q.scripts.delete(keys=base, args=["j"])
                          ) == replies.Changed("deleted", JobStatus.CANCELED)
    for name in ("cancel", "delete", "reprioritize"):
        args = ["j", 1] if name != "delete" else ["j"]
        assert replies.PARSERS[name](getattr(q.scripts, name)(keys=base, args=args)
                                     ) == replies.Changed("missing")


def test_dependency_and_batch_replies(queue):
    q = queue()
    q.enqueue("tests.jobs:noop", job_id="dep")
    base = [q.qkeys.base]
    assert replies.dep_register(q.scripts.dep_register(keys=base, args=["dep", "default:d"])
                                ) == replies.DepRegistered(True, JobStatus.QUEUED)
    assert replies.dep_register(q.scripts.dep_register(keys=base, args=["nope", "default:d"])
                                ) == replies.DepRegistered(False, None)
    q.cancel("dep")
    assert replies.dep_register(q.scripts.dep_register(keys=base, args=["dep", "default:d"])
                                ) == replies.DepRegistered(False, JobStatus.CANCELED)
    assert replies.dep_done(q.scripts.dep_done(keys=base, args=["dep", "default:x", "finished",
                                                                 60])
                            ) == replies.DepDone("ignored", JobStatus.CANCELED)
    assert replies.dep_done(q.scripts.dep_done(keys=base, args=["none", "default:x", "finished",
                                                                 60])
                            ) == replies.DepDone("ignored", None)
    assert replies.batch_done(q.scripts.batch_done(keys=base, args=["nob", "", "", ""])
                              ) == replies.BatchDone("missing")


def test_cron_tick_reply(queue):
    q = queue()
    reply = q.scripts.cron_tick(keys=[q.qkeys.base],
                                args=["gone", "100", "160", "skip", "jid", "missed"])
    assert replies.cron_tick(reply) == replies.CronTick("moved")


def test_replies_of_a_client_without_decoded_responses(queue, redis_url):
    q = queue()
    q.enqueue("tests.jobs:noop", job_id="j")
    raw_client = redis.Redis.from_url(redis_url)             # bytes everywhere
    scripts = Scripts(raw_client)
    got = replies.claim(scripts.claim(keys=[q.qkeys.base], args=["w", "t", 30, 60]))
    assert got.jobs[0].job_id == "j" and got.jobs[0].data["id"] == "j"
    assert replies.cancel(scripts.cancel(keys=[q.qkeys.base], args=["j", 60])
                          ) == replies.Changed("refused", JobStatus.STARTED)
    raw_client.close()
