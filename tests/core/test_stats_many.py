"""``stats_many`` at many queues: the same figures as reading each queue on its own,
every registry and setting asked about, and only two commands for a queue with nothing
in it (a tenant's idle queue among thousands), one for the chart of a queue idle
for the hour. Real Redis; the command counts on a
private server (``INFO commandstats`` sees nobody else's commands)."""

from __future__ import annotations

from typing import Any

import redis

from fusionworker.core import admin
from fusionworker.core.config import Settings, load_settings
from fusionworker.core.job import JobStatus
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.core.queue_read import (
    BANDS,
    WHOLE_PENDING,
    _band_range,
    _group_rate_doc,
    _rate_doc,
    awaiting_compute,
    kept_since,
    stats_many,
)
from tests.redis_servers import redis_single  # noqa: F401 - fixture


def one_by_one(r: redis.Redis, settings: Settings, name: str) -> dict[str, Any]:
    """The stats of one queue read the plain way, a command per figure (what
    ``stats_many`` answered before it skipped anything): the reference."""
    k = Keys(settings.prefix).queue(name)
    now = float(r.time()[0]) + r.time()[1] / 1e6
    bands, heads = {}, []
    for band, low, high in BANDS:
        bands[band] = r.zcount(k.pending, *_band_range(low, high))
        heads += r.zrangebyscore(k.pending, *_band_range(low, high), start=0, num=1)
    stamps = [r.hget(k.job(i), "enqueued_at") for i in heads + r.zrange(k.pending, -1, -1)]
    found = [float(s) for s in stamps if s]
    cap = r.get(k.max_active)
    doc = {
        "queue": name, "pending": r.zcard(k.pending), "bands": bands,
        "started": r.zcard(k.started), "scheduled": r.zcard(k.scheduled),
        "failed": r.zcount(k.failed, kept_since(settings, JobStatus.FAILED), "+inf"),
        "finished": r.zcount(k.finished, kept_since(settings, JobStatus.FINISHED), "+inf"),
        "paused": bool(r.exists(k.paused)), "max_active": int(cap) if cap else None,
        "busy_groups": r.hlen(k.groups),
        "oldest_age": max(0.0, now - min(found)) if found else None,
        "rate_limit": _rate_doc(r.hgetall(k.rate)),
        "group_rate_limit": _group_rate_doc(r.hgetall(k.group_rate),
                                            r.hgetall(k.group_rate_held)),
        "deferred": r.zcard(k.deferred), "open_batches": r.zcard(k.batches),
        "held": r.zcard(k.held), "due": r.zcount(k.scheduled, "-inf", now),
    }
    doc["awaiting_compute"] = awaiting_compute(doc, [])
    return doc


def mixed_queues(r: redis.Redis, settings: Settings, burst: Any) -> list[str]:
    """A queue of each kind ``info`` meets (their names say which)."""
    def q(name: str) -> Queue:
        return Queue(name, r, settings=settings)

    r.sadd(Keys(settings.prefix).queues, "empty")
    q("paused-empty").pause()
    r.sadd(Keys(settings.prefix).queues, "paused-empty")
    for n, priority in enumerate((20, 0, -5, 0)):
        q("bands").enqueue("tests.jobs:add", n, 1, priority=priority)
    for n in range(WHOLE_PENDING + 7):   # longer than the whole read: counts and heads
        q("long").enqueue("tests.jobs:add", n, 1, priority=(10, 0, -3)[n % 3])
    q("scheduled").enqueue_in(3600, "tests.jobs:add", 1, 1)
    past = q("scheduled").enqueue_in(3600, "tests.jobs:add", 2, 1)
    r.zadd(q("scheduled").qkeys.scheduled, {past.id: 1.0})   # due: its time has come
    q("failed").enqueue("tests.jobs:boom")
    q("failed").enqueue("tests.jobs:add", 1, 2)
    burst("failed")
    held = q("held").enqueue("tests.jobs:add", 1, 1)
    q("held").enqueue("tests.jobs:add", 2, 1)
    q("held").hold(held.id)
    q("rated").set_rate_limit("10/s")
    q("rated").enqueue("tests.jobs:add", 1, 1)
    q("rated-idle").set_rate_limit("5/m")
    r.sadd(Keys(settings.prefix).queues, "rated-idle")
    q("grouped").set_rate_limit("2/s", per_group=True)
    q("grouped").set_rate_limit("1/s", group="vip")
    q("grouped").enqueue("tests.jobs:add", 1, 1, group="vip")
    q("grouped").enqueue("tests.jobs:add", 2, 1, group="vip")
    # a group with a job running, as the claim script marks it (group -> job id)
    r.hset(q("grouped").qkeys.groups, "vip", "running-job")
    q("capped").set_max_active(2)
    head = q("deferred").enqueue("tests.jobs:add", 1, 1)
    q("deferred").enqueue("tests.jobs:add", 2, 1, depends_on=head)
    return ["empty", "paused-empty", "bands", "long", "scheduled", "failed", "held", "rated",
            "rated-idle", "grouped", "capped", "deferred"]


def test_stats_many_equal_each_queue_read_on_its_own(r, settings, burst):
    names = mixed_queues(r, settings, burst)
    docs = stats_many(r, settings, names, heartbeats=[])
    assert [d["queue"] for d in docs] == names
    for doc in docs:
        ref = one_by_one(r, settings, doc["queue"])
        assert (doc["oldest_age"] is None) == (ref["oldest_age"] is None), doc["queue"]
        assert {**doc, "oldest_age": 0} == {**ref, "oldest_age": 0}, doc["queue"]
        single = Queue(doc["queue"], r, settings=settings).stats(heartbeats=[])
        assert {**single, "oldest_age": 0} == {**doc, "oldest_age": 0}
    by = {d["queue"]: d for d in docs}   # the mix is what its names say
    assert by["paused-empty"]["paused"] and by["bands"]["bands"] == {"high": 1, "normal": 2,
                                                                     "low": 1}
    assert by["long"]["pending"] == WHOLE_PENDING + 7 and by["long"]["oldest_age"] is not None
    assert by["scheduled"]["due"] == 1 and by["failed"]["failed"] == 1
    assert by["failed"]["finished"] == 1 and by["held"]["held"] == 1
    assert by["rated-idle"]["rate_limit"]["limit"] == 5 and by["grouped"]["busy_groups"] == 1
    assert by["grouped"]["group_rate_limit"]["groups"]["vip"]["limit"] == 1
    assert by["capped"]["max_active"] == 2 and by["deferred"]["deferred"] == 1


def commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def test_an_empty_queue_costs_two_commands(redis_single):  # noqa: F811
    url = f"redis://127.0.0.1:{redis_single}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    settings = load_settings(environ={}, redis_url=url, prefix="fwcount",
                             allowed_modules=("tests",))
    names = [f"tenant{n:04d}" for n in range(300)]
    client.sadd(Keys("fwcount").queues, *names)
    Queue("tenant0007", client, settings=settings, events=False).enqueue("tests.jobs:add", 1, 1)
    before = commands(client)
    docs = stats_many(client, settings, names, heartbeats=[])
    used = commands(client) - before
    assert docs[7]["pending"] == 1 and docs[8]["pending"] == 0
    # two EXISTS an empty queue; the busy one and TIME: a few more
    assert used <= 2 * len(names) + 12, used


def test_the_chart_of_idle_queues_costs_one_command_a_queue(redis_single):  # noqa: F811
    url = f"redis://127.0.0.1:{redis_single}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys("fwchart")
    names = [f"tenant{n:04d}" for n in range(100)]
    now = float(client.time()[0])
    minute = int(now // 60)
    # two outcomes of one queue, as the workers' heartbeats write them (minutes.lua)
    client.hset(keys.queue("tenant0042").minute(minute), mapping={"finished": 3, "failed": 1})
    client.hset(keys.queue("tenant0042").minute(minute - 2), mapping={"finished": 2})
    before = commands(client)
    rows = admin.minute_counts(client, names, "fwchart", minutes=60, now=now)
    used = commands(client) - before
    assert [r["minute"] for r in rows] == list(range(minute - 59, minute + 1))
    assert (rows[-1]["finished"], rows[-1]["failed"], rows[-3]["finished"]) == (3, 1, 2)
    assert sum(r["finished"] + r["failed"] for r in rows) == 6
    # one EXISTS a queue, then the 60 minutes of the one queue that has any
    assert used == len(names) + 60, used
