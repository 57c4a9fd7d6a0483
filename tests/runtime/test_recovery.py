"""After an outage the worker goes on as soon as Redis answers again, whatever its
backoff had grown to: a PING every 0.25 s (runtime/errors.py, ``wait_reachable``)
cuts the wait short."""

from __future__ import annotations

import pytest

from tests.tcp_proxy import TcpProxy
from tests.waiting import wait_for

#: A limit for a broken run, not a measurement: the worker healed here has just
#: announced an 8 s wait before its next write, so a worker that waits it out starts
#: the next job 8 s after the link is back; one that probes starts it within a few
#: tenths of a second.
BROKEN = 4.0


@pytest.mark.slow
def test_the_first_job_after_a_partition_starts_soon_after_redis_answers_again(
        processes, queue, r, redis_url):
    proxy = TcpProxy(("127.0.0.1", int(redis_url.split(":")[2].split("/")[0])))
    try:
        q = queue()
        first = q.enqueue("tests.jobs:sleep", 0.5)
        proc = processes.worker("-q", "default", env={"REDIS_URL": proxy.url,
                                                       "FUSIONWORKER_LEASE": "60"})
        wait_for(lambda: q.fetch_job(first.id).status == "started")
        proxy.cut()           # the job ends in the partition: its outcome waits for Redis
        second = q.enqueue("tests.jobs:add", 1, 2)     # straight to Redis, not via the link
        # the outcome's retries back off 0.5, 1, 2, 4 s: heal when the next wait is 8 s
        wait_for(lambda: "retrying in 8.0 s" in processes.output(proc), timeout=60)
        sec, usec = r.time()
        proxy.heal()
        healed = sec + usec / 1e6
        wait_for(lambda: q.fetch_job(second.id).status == "finished")
        assert q.fetch_job(first.id).status == "finished"   # recorded before the claim
        started = q.fetch_job(second.id).started_at          # the claim's server time
        assert started is not None and started - healed < BROKEN, started - healed
        assert proc.poll() is None
    finally:
        proxy.cut()


@pytest.mark.slow
def test_a_worker_waiting_for_redis_registers_soon_after_it_answers(settings, processes):
    """A worker started before Redis answers backs its registration off (0.5, 1, 2, 4,
    8 s...); a PING every 0.25 s cuts the wait short once a server answers."""
    import time

    import redis

    from tests.redis_servers import free_port, start_single

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    processes.settings = settings.replace(redis_url=url)
    proc = processes.worker("-q", "default", "--name", "late")
    wait_for(lambda: "trying again in 8.0 s" in processes.output(proc), timeout=60)
    port, stop = start_single(port=port)
    try:
        up = time.time()                   # the server answers (start_single pinged it)
        client = redis.Redis.from_url(url, decode_responses=True)
        key = f"{settings.prefix}:worker:late"
        birth = float(wait_for(lambda: client.hget(key, "birth")))
        assert birth - up < BROKEN, birth - up
        assert proc.poll() is None
    finally:
        stop()


@pytest.mark.slow
def test_a_worker_whose_redis_restarted_empty_registers_again(settings, processes):
    """Redis restarted without its data (no persistence; a failover to an empty
    replica): the worker goes on, says when Redis answers again, and writes its
    registration again, so ``health`` and the listings see it (they saw a worker with
    no name, no queues and no pid, serving nothing, until it was restarted)."""
    import redis

    from fusionworker.ops.health import check
    from tests.redis_servers import start_single

    port, stop = start_single()
    url = f"redis://127.0.0.1:{port}/0"
    processes.settings = settings.replace(redis_url=url)
    client = redis.Redis.from_url(url, decode_responses=True)
    key = f"{settings.prefix}:worker:survivor"
    try:
        proc = processes.worker("-q", "default", "--name", "survivor")
        wait_for(lambda: client.hget(key, "queues") == "default", timeout=60)
        assert check(client, settings.prefix, ["default"]).ok
        stop()                                       # gone, and back with nothing
        wait_for(lambda: "Redis unreachable" in processes.output(proc), timeout=30)
        port, stop = start_single(port=port)
        wait_for(lambda: "registration was gone from Redis" in processes.output(proc),
                 timeout=30)
        record = wait_for(lambda: client.hgetall(key).get("name") and client.hgetall(key))
        assert (record["name"], record["queues"], record["pid"]) == (
            "survivor", "default", str(proc.pid))
        assert check(client, settings.prefix, ["default"]).ok, check(
            client, settings.prefix, ["default"]).message
        assert "Redis answers again" in processes.output(proc)
        assert proc.poll() is None
    finally:
        stop()


def test_a_job_ended_while_its_worker_was_held_up_records_its_own_duration(processes, queue):
    """The job ends while its worker parent is stopped (as it is while Redis is
    unreachable); the parent reads the report later. The duration recorded is the
    job's, to the end its horse stamped, not to the moment the parent read it (a 20 s
    job was recorded as 33 s after an outage)."""
    import os
    import signal
    import time

    q = queue()
    proc = processes.worker("-q", "default")
    job = q.enqueue("tests.jobs:sleep", 1.0)
    wait_for(lambda: q.fetch_job(job.id).status == "started", timeout=30)
    time.sleep(0.3)                   # its horse's start read: the job runs its second
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    done = wait_for(lambda: q.fetch_job(job.id).status == "finished" and q.fetch_job(job.id),
                    timeout=30)
    assert 0.95 < done.duration < 1.8, done.duration
