"""A real 3-master Redis Cluster: queues on different shards, 2 worker processes, 1,000 jobs.

The cluster (``tests/redis_servers.py``) runs on loopback ports for the test
session. Every queue's keys share its hash tag ``<prefix>:{<queue>}:…``; the
queues used here are picked so that their tags land on three different
masters, checked with ``CLUSTER KEYSLOT`` against ``CLUSTER SLOTS``.
"""

from __future__ import annotations

import collections
import signal
import uuid
from collections.abc import Iterator

import pytest
import redis

from fusionworker.core import admin
from fusionworker.core.config import Settings, load_settings
from fusionworker.core.connection import connect, is_cluster
from fusionworker.core.queue import Queue
from fusionworker.events import make_sink, read_events
from fusionworker.exceptions import InvalidOperation
from fusionworker.middleware import reaper
from fusionworker.worker import Worker, default_middleware
from tests.redis_servers import HOST, ClusterServers, redis_cluster
from tests.waiting import wait_for

__all__ = ["redis_cluster"]  # fixture used below

pytestmark = pytest.mark.slow  # private Redis servers: a 3-master cluster

#: Queue names tried in order; the first one per master is used.
CANDIDATES = ("sms", "email", "reports", "push", "webhook", "billing", "audit", "images")


@pytest.fixture
def cluster_prefix(redis_cluster: ClusterServers) -> Iterator[str]:
    """A fresh key prefix on the cluster; its keys are deleted from every master after."""
    value = f"c{uuid.uuid4().hex[:10]}"
    yield value
    for port in redis_cluster.ports:
        with redis.Redis(HOST, port, decode_responses=True) as node:
            for key in node.scan_iter(match=f"{value}:*", count=1000):
                node.unlink(key)  # one key per command: every key is local to this node


@pytest.fixture
def settings(redis_cluster: ClusterServers, cluster_prefix: str) -> Settings:
    """Overrides conftest's ``settings``: workers started by ``processes`` use the cluster."""
    return load_settings(environ={}, redis_url=f"redis+cluster://{HOST}:{redis_cluster.ports[0]}",
                         prefix=cluster_prefix, poll_interval=0.2, heartbeat_interval=0.5,
                         max_retries=0, kill_grace=2.0, allowed_modules=("tests",))


@pytest.fixture
def rc(settings: Settings) -> Iterator[redis.RedisCluster]:
    client = connect(settings.redis_url)
    assert is_cluster(client)
    yield client
    client.close()


def _master_of_slot(rc: redis.RedisCluster) -> collections.abc.Callable[[int], int]:
    """slot -> port of the master serving it, from the server's ``CLUSTER SLOTS``."""
    ranges = [(int(r[0]), int(r[1]), int(r[2][1]))
              for r in rc.get_default_node().redis_connection.execute_command("CLUSTER SLOTS")]

    def port(slot: int) -> int:
        return next(p for lo, hi, p in ranges if lo <= slot <= hi)
    return port


def _spread_queues(rc: redis.RedisCluster, prefix: str) -> dict[str, int]:
    """Three queue names whose hash tags live on three different masters -> master port."""
    master = _master_of_slot(rc)
    chosen: dict[str, int] = {}
    for name in CANDIDATES:
        port = master(rc.cluster_keyslot(f"{prefix}:{{{name}}}:pending"))
        if port not in chosen.values():
            chosen[name] = port
        if len(chosen) == 3:
            break
    assert len(chosen) == 3, f"queues did not spread over 3 masters: {chosen}"
    for name in chosen:  # every key of a queue is in one slot (what the Lua scripts rely on)
        slots = {rc.cluster_keyslot(f"{prefix}:{{{name}}}:{suffix}")
                 for suffix in ("", "pending", "started", "job:x", "wake", "unique:k")}
        assert len(slots) == 1, (name, slots)
    return chosen


@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_two_workers_drain_1000_jobs_over_three_shards(processes, settings, rc, cluster_prefix):
    queues = _spread_queues(rc, cluster_prefix)
    # proof of execution: a list with its own hash tag; the job writes it through a plain
    # connection to the master that owns that slot (tests.jobs.record uses redis://).
    done_key = f"{cluster_prefix}:{{done}}:list"
    done_port = _master_of_slot(rc)(rc.cluster_keyslot(done_key))
    done_url = f"redis://{HOST}:{done_port}/0"

    producers = {name: Queue(name, rc, settings=settings, events=False) for name in queues}
    expected: dict[str, str] = {}  # value -> queue
    names = list(queues)
    for i in range(1000):
        name = names[i % 3]
        value = f"{name}-{i}"
        job = producers[name].enqueue("tests.jobs:record", done_url, done_key, value)
        expected[job.id] = name
    assert sum(q.count for q in producers.values()) == 1000

    workers = [processes.worker("--customq", ",".join(names)) for _ in range(2)]
    try:
        wait_for(lambda: rc.llen(done_key) >= 1000, timeout=60, interval=0.1)
    except AssertionError:
        tails = "\n---\n".join(processes.output(p)[-2000:] for p in workers)
        raise AssertionError(f"{rc.llen(done_key)}/1000 jobs ran; worker logs:\n{tails}") from None
    wait_for(lambda: all(q.count == 0 and not q.job_ids("started") for q in producers.values()),
             timeout=10)

    recorded = rc.lrange(done_key, 0, -1)
    assert len(recorded) == 1000
    assert collections.Counter(recorded).most_common(1)[0][1] == 1  # each job ran once
    assert set(recorded) == {f"{names[i % 3]}-{i}" for i in range(1000)}

    ran_by: collections.Counter[str] = collections.Counter()
    for job_id, name in expected.items():
        job = producers[name].fetch_job(job_id)
        assert (job.status, job.attempts) == ("finished", 1), (job_id, job.status, job.attempts)
        ran_by[job.worker_name] += 1
    assert len(ran_by) == 2, f"both workers should have taken jobs: {ran_by}"
    for name, q in producers.items():
        stats = q.stats()
        assert (stats["pending"], stats["started"], stats["failed"]) == (0, 0, 0), name
        assert stats["finished"] == sum(1 for n in expected.values() if n == name)

    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        assert proc.wait(15) == 0, processes.output(proc)
        out = processes.output(proc)
        assert "CROSSSLOT" not in out and "Traceback" not in out, out[-3000:]
    assert admin.workers(rc, cluster_prefix) == []


def test_every_queue_operation_works_on_every_shard(rc, settings, cluster_prefix):
    """enqueue / claim / finish / retry / fail / cancel / requeue / delete / pause / cap / stats,
    the reaper and suspend/resume: no CROSSSLOT (or any other error) on any shard."""
    queues = _spread_queues(rc, cluster_prefix)
    fast = settings.replace(retry_delay=0.05, retry_max_delay=0.05)
    # the event stream under the prefix; not the process-wide default sink, which would
    # outlive this test (and this cluster) and keep retrying in later tests
    sink = make_sink(fast, rc)
    for name in queues:
        q = Queue(name, rc, settings=fast, events=sink)
        ok = q.enqueue("tests.jobs:add", 1, 2, priority=5)
        bad = q.enqueue("tests.jobs:boom")
        retried = q.enqueue("tests.jobs:retry_me", 0.01, max_retries=1)
        dup = q.enqueue("tests.jobs:add", 1, 2, unique_key="once")
        assert q.enqueue("tests.jobs:add", 1, 2, unique_key="once").deduplicated
        later = q.enqueue_in(3600, "tests.jobs:noop")
        assert q.fetch_job(later.id).status == "scheduled"
        gone = q.enqueue("tests.jobs:noop")
        grouped = [q.enqueue("tests.jobs:noop", group="g") for _ in range(2)]  # 2nd waits
        q.reprioritize(gone.id, 7)
        assert q.cancel(gone.id).status == "canceled"
        with pytest.raises(InvalidOperation):
            q.cancel(gone.id)
        q.set_max_active(1)
        q.pause()
        assert q.is_paused and q.stats()["paused"]
        q.unpause()
        q.set_max_active(None)
        stats = q.stats()
        assert stats["pending"] == 5 and stats["scheduled"] == 1 and stats["oldest_age"] >= 0

        w = Worker(name, rc, settings=fast, burst=True, middleware=default_middleware(fast))
        assert w.work() == 0

        def retried_and_failed(name=name, q=q, job_id=retried.id) -> bool:
            # burst again once the retry's backoff is over
            assert Worker(name, rc, settings=fast, burst=True, defaults=False,
                          middleware=[]).work() == 0
            return q.fetch_job(job_id).status == "failed"
        wait_for(retried_and_failed, timeout=10, interval=0.05)

        status = {j.id: q.fetch_job(j.id).status for j in (ok, bad, retried, dup, *grouped)}
        assert status == {ok.id: "finished", bad.id: "failed", retried.id: "failed",
                          dup.id: "finished", grouped[0].id: "finished",
                          grouped[1].id: "finished"}, name
        assert q.fetch_job(ok.id).result == 3
        assert q.fetch_job(retried.id).attempts == 2
        assert q.requeue(bad.id).status == "queued"
        assert q.requeue_all_failed() == 1
        assert q.count == 2
        assert q.empty() == 3  # two requeued + the delayed one
        assert q.fetch_job(later.id) is None
        q.delete(ok.id)
        assert q.fetch_job(ok.id) is None

    admin.suspend(rc, cluster_prefix, duration=5)
    assert admin.is_suspended(rc, cluster_prefix)
    admin.resume(rc, cluster_prefix)
    assert not admin.is_suspended(rc, cluster_prefix)
    counts = reaper.reap_once(rc, settings, lock_owner="test")
    assert counts["locked"] and counts["checked"] == 0
    assert sink.flush(5.0)
    sink.close()
    events = [e["event"] for _, e in read_events(rc, cluster_prefix, count=1000)]
    assert events.count("queued") >= 3 * 7 and events.count("canceled") == 3
    assert events.count("completed") >= 3 * 4  # from the workers' own sinks


def test_a_plain_bytes_cluster_client_works(redis_cluster, settings):
    """A RedisCluster made by the user (bytes replies): enqueue, worker, wait, admin."""
    plain = redis.RedisCluster(host=HOST, port=redis_cluster.ports[0])
    q = Queue("sms", plain, settings=settings, events=False)
    job = q.enqueue("tests.jobs:add", 40, 2)
    assert q.fetch_job(job.id).status == "queued" and q.count == 1
    Worker("sms", plain, settings=settings, burst=True, defaults=False, middleware=[]).work()
    assert job.wait(10).result == 42
    assert admin.stuck_jobs(plain, "sms", settings.prefix) == []
    assert admin.workers(plain, settings.prefix) == []
    plain.close()


def test_wait_blocks_until_a_worker_process_finishes_the_job(processes, settings, rc):
    """Job.wait on a cluster: the finish script's PUBLISH reaches the waiter's node."""
    from fusionworker import JobFailed

    q = Queue("sms", rc, settings=settings, events=False)
    processes.worker("--customq", "sms")
    job = q.enqueue("tests.jobs:sleep", 0.5)
    assert job.wait(30).result == 0.5
    bad = q.enqueue("tests.jobs:boom", "cluster")
    with pytest.raises(JobFailed, match="cluster"):
        bad.wait(30)


def test_a_worker_on_the_cluster_is_shut_down_by_name(processes, settings, rc):
    """``send_shutdown_command`` on a Cluster client: the request's one-key script, the
    control channel and the heartbeat's read, on a real worker of the cluster."""
    from fusionworker.core.command import send_shutdown_command
    from fusionworker.core.keys import Keys
    from fusionworker.exceptions import InvalidOperation
    from tests.waiting import wait_for

    proc = processes.worker("-q", "sms", "--name", "c-down")
    key = Keys(settings.prefix).worker("c-down")
    wait_for(lambda: rc.exists(key) or proc.poll() is not None, timeout=60,
             what="the worker registered")
    with pytest.raises(InvalidOperation):
        send_shutdown_command(rc, "c-nobody", settings=settings)
    send_shutdown_command(rc, "c-down", settings=settings)
    assert proc.wait(30) == 0 and not rc.exists(key)


def test_the_event_sink_keeps_every_jobs_history_on_every_shard(rc, settings, cluster_prefix):
    """On a Cluster a job event is one ``history.lua`` call on its job's slot (no run of
    events across slots) and its ``XADD`` apart: every job's history holds its events."""
    from fusionworker.events import job_history
    from fusionworker.events.sinks import RedisStreamSink

    queues = list(_spread_queues(rc, cluster_prefix))
    sink = RedisStreamSink(rc, cluster_prefix)
    try:
        sink._deliver([(str(i), {"event": "started" if i % 2 == 0 else "completed", "n": i,
                                 "job_id": f"j{i // 2}", "queue": queues[(i // 2) % len(queues)]})
                       for i in range(12)])
    finally:
        sink.close()
    assert [int(doc["n"]) for _, doc in read_events(rc, cluster_prefix, count=100)] \
        == list(range(12))
    for job in range(6):
        kept = job_history(rc, cluster_prefix, queues[job % len(queues)], f"j{job}")
        assert [int(doc["n"]) for _, doc in kept] == [2 * job, 2 * job + 1]
