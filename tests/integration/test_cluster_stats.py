"""The stats of many queues and their chart on a Redis Cluster: the multi-key
``EXISTS`` of ``stats_many`` and ``minute_counts`` name keys of one queue only (its hash
tag: one slot), so queues spread over every master read without CROSSSLOT, with the
figures of a plain per-queue read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from fusionworker.core import admin
from fusionworker.core.config import Settings, load_settings
from fusionworker.core.connection import connect, is_cluster
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.core.queue_read import WHOLE_PENDING, stats_many
from tests.core.test_stats_many import one_by_one
from tests.redis_servers import HOST, ClusterServers, redis_cluster

__all__ = ["redis_cluster"]  # fixture used below

pytestmark = pytest.mark.slow  # private Redis servers: a 3-master cluster


@pytest.fixture
def settings(redis_cluster: ClusterServers) -> Iterator[Settings]:
    prefix = f"c{uuid.uuid4().hex[:10]}"
    yield load_settings(environ={}, redis_url=f"redis+cluster://{HOST}:{redis_cluster.ports[0]}",
                        prefix=prefix, allowed_modules=("tests",))
    for port in redis_cluster.ports:
        with redis.Redis(HOST, port, decode_responses=True) as node:
            for key in node.scan_iter(match=f"{prefix}:*", count=1000):
                node.unlink(key)


def test_stats_and_chart_of_queues_on_every_master(settings):
    rc = connect(settings.redis_url)
    assert is_cluster(rc)
    names = [f"tenant{n:02d}" for n in range(24)]   # 24 hash tags: every master has some
    rc.sadd(Keys(settings.prefix).queues, *names)
    for n, name in enumerate(names[:12]):
        q = Queue(name, rc, settings=settings, events=False)
        for j in range(WHOLE_PENDING + 3 if n == 0 else n % 4 + 1):
            q.enqueue("tests.jobs:add", j, 1, priority=(10, 0, -4)[j % 3])
        if n % 3 == 0:
            q.enqueue_in(600, "tests.jobs:add", 1, 1)
    Queue(names[12], rc, settings=settings, events=False).pause()
    Queue(names[13], rc, settings=settings, events=False).set_rate_limit("3/s")
    docs = stats_many(rc, settings, names, heartbeats=[])
    for doc in docs:
        assert {**doc, "oldest_age": 0} == {**one_by_one(rc, settings, doc["queue"]),
                                            "oldest_age": 0}, doc["queue"]
    assert docs[0]["pending"] == WHOLE_PENDING + 3 and docs[12]["paused"]
    assert docs[13]["rate_limit"]["limit"] == 3 and docs[20]["pending"] == 0
    minute = int(admin.server_time(rc) // 60)
    rc.hset(Keys(settings.prefix).queue(names[5]).minute(minute), "finished", 4)
    rows = admin.minute_counts(rc, names, settings.prefix, minutes=10)
    assert sum(row["finished"] for row in rows) == 4
    rc.close()
