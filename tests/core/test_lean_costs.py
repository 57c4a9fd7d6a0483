"""What the scripts every job runs cost: the commands each sends, counted by a private
redis-server's ``INFO commandstats`` (so nothing of another test is counted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from fusionworker.core.config import load_settings
from fusionworker.core.queue import Queue
from fusionworker.core.scripts import replies
from tests.redis_servers import redis_single  # noqa: F401 - fixture


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
