"""What the scripts every job runs cost: the commands each sends, counted by a private
redis-server's ``INFO commandstats`` (so nothing of another test is counted); and a
waiter whose mark the server refuses (an ACL user of its own there)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis

from fusionworker.core.config import load_settings
from fusionworker.core.queue import Queue
from fusionworker.core.scripts import replies
from fusionworker.runtime.minutes import MinuteCounts
from tests.redis_servers import redis_single  # noqa: F401 - fixture
from tests.waiting import wait_for


def _calls(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): stats["calls"]
            for name, stats in client.info("commandstats").items()}


def _sent(client: redis.Redis, fn: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """``fn()``'s answer and the commands it made the server run (INFO not counted)."""
    before = _calls(client)
    out = fn()
    after = _calls(client)
    sent = {name: n - before.get(name, 0) for name, n in after.items()
            if n > before.get(name, 0) and name != "info"}
    return out, sent


def _queue(port: int) -> tuple[redis.Redis, Queue]:
    url = f"redis://127.0.0.1:{port}/0"
    r = redis.Redis.from_url(url, decode_responses=True)
    s = load_settings(environ={}, redis_url=url, prefix="cost", allowed_modules=("tests",))
    return r, Queue("lean", r, settings=s, events=False)


def _claim(q: Queue, token: str = "tok") -> Any:
    return replies.claim(q.scripts.claim(keys=[q.qkeys.base], args=["w1", token, 30, 60]))


def test_a_claim_reads_scheduled_only_when_the_queue_has_it(redis_single):  # noqa: F811
    r, q = _queue(redis_single)
    _claim(q)                                    # the script is loaded
    q.enqueue("tests.jobs:noop", job_id="a")
    got, sent = _sent(r, lambda: _claim(q))
    assert got.jobs[0].job_id == "a"
    assert sent == {"evalsha": 1, "time": 1, "exists": 1, "zpopmax": 1, "hgetall": 1,
                    "zadd": 1, "hset": 1}
    empty, sent = _sent(r, lambda: _claim(q, "t2"))
    assert empty.kind == "empty" and empty.next_due is None
    assert sent == {"evalsha": 1, "time": 1, "exists": 1, "zpopmax": 1}

    q.enqueue_in(600, "tests.jobs:noop", job_id="later")
    q.enqueue("tests.jobs:noop", job_id="b")
    got, sent = _sent(r, lambda: _claim(q, "t3"))
    assert got.jobs[0].job_id == "b"             # one look at the first scheduled job
    assert sent == {"evalsha": 1, "time": 1, "exists": 1, "zrange": 1, "zpopmax": 1,
                    "hgetall": 1, "zadd": 1, "hset": 1}
    empty, sent = _sent(r, lambda: _claim(q, "t4"))
    assert empty.kind == "empty" and empty.next_due == r.zscore(q.qkeys.scheduled, "later")
    assert sent == {"evalsha": 1, "time": 1, "exists": 1, "zrange": 1, "zpopmax": 1}


def _finish(q: Queue, job_id: str, token: str) -> Any:
    return replies.finish(q.scripts.finish(keys=[q.qkeys.base], args=[
        job_id, token, "finished", 500, 60, 0, 0, "", "result", "1"]))


def test_a_finish_reads_waiting_jobs_and_publishes_only_when_the_record_says_so(
        redis_single):  # noqa: F811
    r, q = _queue(redis_single)
    for name in ("a", "b", "c"):
        q.enqueue("tests.jobs:noop", job_id=name)
    q.enqueue("tests.jobs:noop", job_id="after_c", depends_on="c")
    for token in ("ta", "tb", "tc"):
        _claim(q, token)
    assert _finish(q, "nobody", "x").stale                      # the script is loaded
    done, sent = _sent(r, lambda: _finish(q, "a", "ta"))
    assert done.outcome == "finished"
    # no HDEL (the token blanked by the HSET), no minute counter (the worker's heartbeat);
    # the EXPIRE is the record's (result_ttl); the EXISTS asks whether the queue has a
    # concurrency cap (its end then wakes a worker that found the cap full)
    assert sent == {"evalsha": 1, "hmget": 1, "time": 1, "zadd": 1, "zrem": 1, "hset": 1,
                    "expire": 1, "exists": 1}

    q.scripts.waiting(keys=[q.qkeys.base], args=["b"])         # a waiter marked b
    done, sent = _sent(r, lambda: _finish(q, "b", "tb"))
    assert done.outcome == "finished" and sent["publish"] == 1 and "smembers" not in sent

    done, sent = _sent(r, lambda: _finish(q, "c", "tc"))      # c has a dependent
    assert done.outcome == "finished" and sent["smembers"] >= 1 and "publish" not in sent
    assert r.llen(q.qkeys.outbox) == 1                         # its note for after_c


def test_a_waiter_whose_mark_is_refused_reads_on_a_timer(redis_single):  # noqa: F811
    r, q = _queue(redis_single)
    q.enqueue("tests.jobs:noop", job_id="a")
    _claim(q, "ta")
    # a waiter whose user may not write a hash: its mark is refused (NOPERM) every time
    r.acl_setuser("reader", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                  commands=["+@all", "-hset"])
    reader = redis.Redis(port=redis_single, username="reader", password="pw",
                         decode_responses=True)
    rq = Queue("lean", reader, settings=q.settings, events=False)
    read = replies.waiting(rq.scripts.waiting(keys=[rq.qkeys.base], args=["a"]))
    assert not read.marked and read.data["status"] == "started" and r.hget(q.qkeys.job("a"), "waited") is None
    job = rq.fetch_job("a")
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(job.wait(timeout=60)))
    calls = _calls(r).get("evalsha", 0)
    waiter.start()
    wait_for(lambda: _calls(r).get("evalsha", 0) > calls)   # its first read: unmarked
    done, sent = _sent(r, lambda: _finish(q, "a", "ta"))
    assert done.outcome == "finished" and "publish" not in sent
    waiter.join(60)
    assert [j.status for j in got] == ["finished"]         # read again on its timer
    reader.close()


def test_a_finish_deletes_fields_only_when_the_record_has_error_fields(redis_single):  # noqa: F811
    r, q = _queue(redis_single)
    q.enqueue("tests.jobs:noop", job_id="a")
    _claim(q, "t1")
    done, sent = _sent(r, lambda: replies.finish(q.scripts.finish(keys=[q.qkeys.base], args=[
        "a", "t1", "retry", 500, 60, 0, 0, "", "error_type", "ValueError"])))
    assert done.outcome == "retry" and "hdel" not in sent      # the token blanked by HSET
    r.zadd(q.qkeys.scheduled, {"a": 1.0})
    _claim(q, "t2")
    done, sent = _sent(r, lambda: _finish(q, "a", "t2"))
    assert done.outcome == "finished" and sent["hdel"] == 1    # the retry's error goes
    q.enqueue("tests.jobs:noop", job_id="b")
    _claim(q, "t3")
    done, sent = _sent(r, lambda: _finish(q, "b", "t3"))
    assert done.outcome == "finished" and "hdel" not in sent
    assert r.hget(q.qkeys.job("b"), "token") == "" and r.hget(q.qkeys.job("a"), "error_type") is None


def test_the_minute_counts_cost_one_call_per_queue_and_heartbeat(redis_single):  # noqa: F811
    r, q = _queue(redis_single)
    minutes = MinuteCounts(q.scripts, q.keys, 500)
    q.scripts.minutes(keys=[q.qkeys.base], args=[500])       # the script is loaded
    minute = int(float(r.time()[0]) // 60)
    for _ in range(40):
        minutes.count("lean", minute * 60.0 + 1, "finished")
    minutes.count("lean", minute * 60.0 + 2, "failed")
    _, sent = _sent(r, lambda: minutes.flush(r))          # the first of the minute
    assert sent == {"evalsha": 1, "hincrby": 2, "expire": 2, "time": 1, "zremrangebyscore": 1}
    minutes.count("lean", minute * 60.0 + 3, "finished")
    _, sent = _sent(r, lambda: minutes.flush(r))          # the fields were there
    assert sent == {"evalsha": 1, "hincrby": 1}
    _, sent = _sent(r, lambda: minutes.flush(r))          # nothing counted: nothing sent
    assert sent == {}
    assert r.hgetall(q.qkeys.minute(minute)) == {"finished": "41", "failed": "1"}
