"""Bulk enqueue and rate limits (per queue and per group) on a real 3-master Redis
Cluster: queues on every shard."""

from __future__ import annotations

import uuid

import pytest

from fusionworker.core.queue import Queue
from fusionworker.events import make_sink
from fusionworker.worker import Worker
from tests.integration.test_cluster import _spread_queues, cluster_prefix, rc, settings
from tests.redis_servers import redis_cluster

__all__ = ["cluster_prefix", "rc", "redis_cluster", "settings"]  # fixtures used below

pytestmark = pytest.mark.slow  # private Redis servers: a 3-master cluster


def test_enqueue_many_and_rate_limits_on_every_shard(rc, settings, cluster_prefix):
    queues = _spread_queues(rc, cluster_prefix)
    sink = make_sink(settings, rc)
    for name in queues:
        q = Queue(name, rc, settings=settings, events=sink)
        prepared = [q.prepare("tests.jobs:add", i, 1, priority=i % 3,
                              group="g" if i < 2 else None) for i in range(40)]
        prepared.append(q.prepare("tests.jobs:noop", job_id=prepared[5].id))  # a duplicate
        jobs = q.enqueue_many(prepared, chunk_size=16)
        assert len(jobs) == 41 and jobs[-1].deduplicated and jobs[-1].id == jobs[5].id
        assert all(q.fetch_job(j.id) == j for j in jobs[:40])
        assert q.count == 39  # the second job of group g waits on the group's list

        q.set_rate_limit("5/h")
        replies = [q.scripts.claim(keys=[q.qkeys.base],
                                   args=["w", uuid.uuid4().hex, 60, settings.failed_ttl])[0]
                   for _ in range(6)]
        assert replies == ["job"] * 5 + ["limited"]
        assert q.stats()["rate_limit"]["limit"] == 5
        q.set_rate_limit(None)
        w = Worker(name, rc, settings=settings, burst=True, defaults=False, middleware=[])
        assert w.work() == 0
        assert q.count == 0

        # a per-group limit: the second job of a full group is set aside (scheduled)
        q.set_rate_limit("1/h", per_group=True)
        first, second = (q.enqueue("tests.jobs:noop", group="h") for _ in range(2))
        claim = [q.qkeys.base], ["w", uuid.uuid4().hex, 60, settings.failed_ttl]
        assert q.scripts.claim(keys=claim[0], args=claim[1])[3] == first.id
        q.delete(first.id)
        assert q.scripts.claim(keys=claim[0], args=claim[1])[0] == "limited"
        assert q.fetch_job(second.id).status == "scheduled"
        assert q.stats()["group_rate_limit"]["held_jobs"] == 1
        q.set_rate_limit(None, per_group=True)
    sink.close()


def test_dependencies_across_shards(rc, settings, cluster_prefix):
    """A chain over three queues on three masters: each step waits for the previous one,
    every note crosses slots through the finishing queue's outbox."""
    from fusionworker.worker import default_middleware

    names = list(_spread_queues(rc, cluster_prefix))
    fast = settings.replace(reaper_interval=0.1)
    sink = make_sink(fast, rc)
    queues = [Queue(n, rc, settings=fast, events=sink) for n in names]
    first = queues[0].enqueue("tests.jobs:add", 1, 2)
    second = queues[1].enqueue("tests.jobs:noop", depends_on=[first])
    third = queues[2].enqueue("tests.jobs:noop", depends_on=[second, first])
    failing = queues[0].enqueue("tests.jobs:boom")
    canceled = queues[2].enqueue("tests.jobs:noop", depends_on=[failing])
    assert second.status == third.status == canceled.status == "deferred"
    for q in reversed(queues * 3):  # the last queue first: one step of the chain a round
        w = Worker(q.name, rc, settings=fast, burst=True, middleware=default_middleware(fast))
        assert w.work() == 0
    assert [q.fetch_job(j.id).status for q, j in
            zip(queues, (first, second, third))] == ["finished"] * 3
    assert queues[2].fetch_job(canceled.id).status == "canceled"
    sink.close()
