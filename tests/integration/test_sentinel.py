"""Redis Sentinel: a worker process follows a forced failover and every job finishes.

Real servers on loopback ports (``tests/redis_servers.py``): one master, one
replica and one sentinel (quorum 1). The worker only knows the sentinel:
``REDIS_URL=redis+sentinel://127.0.0.1:<sentinel>/<master>/0``.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest
import redis

from fusionworker.core.config import Settings, load_settings
from fusionworker.core.connection import connect, refresh_master
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from tests.redis_servers import HOST, SentinelServers, redis_sentinel
from tests.waiting import wait_for

__all__ = ["redis_sentinel"]  # fixture used below

pytestmark = pytest.mark.slow  # private Redis servers: a sentinel set-up per test

#: Seconds the job running across the failover takes.
LONG_JOB = 10.0


@pytest.fixture
def settings(redis_sentinel: SentinelServers) -> Settings:
    """Overrides conftest's ``settings``: workers started by ``processes`` use the sentinel."""
    return load_settings(environ={}, redis_url=f"{redis_sentinel.url}/0",
                         prefix=f"s{uuid.uuid4().hex[:10]}", poll_interval=0.2,
                         heartbeat_interval=0.5, max_retries=0, kill_grace=2.0,
                         allowed_modules=("tests",))


@pytest.fixture
def client(settings: Settings) -> Iterator[redis.Redis]:
    """A producer that, like the worker, finds the master through the sentinel."""
    conn = connect(settings.redis_url, socket_timeout=2)
    yield conn
    conn.close()


def _on(port: int) -> redis.Redis:
    return redis.Redis(HOST, port, decode_responses=True, socket_timeout=2)


def test_worker_follows_a_forced_failover(processes, settings, client, redis_sentinel):
    q = Queue("default", client, settings=settings, events=False)
    keys = Keys(settings.prefix)
    proc = processes.worker("--customq", "default")
    name = wait_for(lambda: client.smembers(keys.workers), timeout=15).pop()

    # One job runs across the failover: claimed on the old master, finished on the new one.
    # It is long enough to end after the worker noticed the failover (FollowSentinelMaster
    # asks the sentinel every 5 s). Until then the old master is still up and writable (a
    # manual failover; Sentinel demotes it some seconds later): an outcome written there
    # would be lost, and the job re-run by the reaper (at-least-once), not lost.
    long_job = q.enqueue("tests.jobs:sleep", LONG_JOB)
    wait_for(lambda: q.fetch_job(long_job.id).status == "started", timeout=10)
    # The rest wait in the paused queue, so they are still pending when the master changes.
    q.pause()
    before = [q.enqueue("tests.jobs:add", i, 1) for i in range(20)]
    # Replication is asynchronous: a write the master acknowledged but had not sent to the
    # replica yet is lost when the replica is promoted. WAIT until the replica has every
    # write so far (the enqueues and the long job's claim), so this test is about the
    # worker finding the new master, not about Redis losing writes in a failover.
    with _on(redis_sentinel.master_port) as master:
        assert master.execute_command("WAIT", 1, 1000) == 1
    old_port = redis_sentinel.master_port
    new_port = redis_sentinel.failover()
    assert new_port != old_port

    # A producer's pooled connections, too, stay on the old master until asked to move
    # (the worker does this from its FollowSentinelMaster middleware).
    assert refresh_master(client) is True
    q.unpause()  # through the sentinel client: lands on the new master
    after = [q.enqueue("tests.jobs:add", i, 2) for i in range(20, 40)]
    with _on(new_port) as new:
        assert new.zcard(q.qkeys.pending) + new.zcard(q.qkeys.started) >= 40

    def all_done() -> bool:
        return all(q.fetch_job(j.id).status == "finished" for j in (long_job, *before, *after))

    try:
        wait_for(all_done, timeout=LONG_JOB + 20, interval=0.1)
    except AssertionError:
        states = {j.id: q.fetch_job(j.id).status for j in (long_job, *before, *after)}
        raise AssertionError(f"not finished: {states}\n{processes.output(proc)[-3000:]}") from None
    assert q.fetch_job(long_job.id).result == LONG_JOB
    assert [q.fetch_job(j.id).result for j in before] == [i + 1 for i in range(20)]
    assert [q.fetch_job(j.id).result for j in after] == [i + 2 for i in range(20, 40)]
    assert all(q.fetch_job(j.id).attempts == 1 for j in (long_job, *before, *after))

    with _on(new_port) as new:  # the heartbeat went to the new master too
        wait_for(lambda: new.hget(keys.worker(name), "state") == "idle", timeout=10)
        # the counters go with the heartbeat (runtime/counters.py): within one interval
        wait_for(lambda: new.hget(keys.worker(name), "successful") == "41", timeout=10)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0, processes.output(proc)
    out = processes.output(proc)
    assert "Traceback" not in out, out[-3000:]
    assert f"Redis master moved to {HOST}:{new_port}" in out, out[-3000:]
    with _on(new_port) as new:
        assert not new.exists(keys.worker(name))


def test_a_plain_bytes_sentinel_client_works(settings, redis_sentinel):
    """A Sentinel master_for() client made by the user (bytes replies)."""
    from redis.sentinel import Sentinel

    from fusionworker.core import admin
    from fusionworker.worker import Worker

    plain = Sentinel([(HOST, redis_sentinel.sentinel_port)]).master_for(
        redis_sentinel.master_name, socket_timeout=2)
    q = Queue("sms", plain, settings=settings, events=False)
    job = q.enqueue("tests.jobs:add", 40, 2)
    assert q.fetch_job(job.id).status == "queued" and q.count == 1
    Worker("sms", plain, settings=settings, burst=True, defaults=False, middleware=[]).work()
    assert job.wait(10).result == 42
    assert admin.stuck_jobs(plain, "sms", settings.prefix) == []
