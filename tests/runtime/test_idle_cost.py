"""What an idle worker costs Redis does not grow with the queues it serves: it trusts
its wake-ups (claim.py, "quiet queues"), the cron tick reads only queues that have
entries. Counted by a private redis-server's ``INFO commandstats``, so nothing of
another test is counted."""

from __future__ import annotations

import os
import signal
from typing import Any

import redis

from fusionworker.core.queue import Queue
from tests.redis_servers import redis_single
from tests.waiting import wait_for

__all__ = ["redis_single"]  # fixture used below

#: The bound of issue #31 for an idle worker on 1,000 queues (today's main: ~3,800/s).
MAX_IDLE_COMMANDS_PER_S = 50
QUEUES = 1000


def _calls(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): stats["calls"]
            for name, stats in client.info("commandstats").items()}


def _worker_commands(before: dict[str, int], after: dict[str, int]) -> int:
    """Commands the server ran between two counts, less this test's own (INFO, the HGET
    of the heartbeat it polls: an idle worker sends neither)."""
    return sum(n - before.get(name, 0) for name, n in after.items()
               if name not in ("info", "hget"))


def _heartbeat(client: redis.Redis, key: str, last: Any) -> float:
    """The worker's next heartbeat stamp after ``last`` (its own clock)."""
    return float(wait_for(lambda: (v := client.hget(key, "last_heartbeat")) not in (None, last)
                          and v, interval=0.25, what="a heartbeat"))


def test_an_idle_worker_on_1000_queues_stays_under_the_bound_and_wakes_for_the_last(
        redis_single, settings, processes):
    url = f"redis://127.0.0.1:{redis_single}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    s = settings.replace(redis_url=url)
    processes.settings = s
    names = [f"q{i}" for i in range(QUEUES)]
    proc = processes.worker("-q", ",".join(names), "--name", "idle", env={
        "FUSIONWORKER_POLL_INTERVAL": "1.0", "FUSIONWORKER_HEARTBEAT_INTERVAL": "1.0",
        "FUSIONWORKER_REAPER_INTERVAL": "5"})
    key = f"{s.prefix}:worker:idle"
    # the first claim asks every queue once (nothing known yet): wait until it did
    wait_for(lambda: _calls(client).get("evalsha", 0) >= QUEUES, interval=0.25,
             what="the first claim over every queue")
    stamp = _heartbeat(client, key, None)
    stamp = _heartbeat(client, key, str(stamp))
    before, start = _calls(client), stamp
    for _ in range(4):
        stamp = _heartbeat(client, key, client.hget(key, "last_heartbeat"))
    after = _calls(client)
    rate = _worker_commands(before, after) / (stamp - start)
    assert rate <= MAX_IDLE_COMMANDS_PER_S, (rate, {
        k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)})

    # the 1,000th queue: a sweep of quiet queues would reach it after minutes; its
    # wake-up makes the worker claim it with a handful of claims
    claims = _calls(client)["evalsha"]
    last = Queue(names[-1], client, settings=s)
    job = last.enqueue("tests.jobs:add", 2, 3)
    wait_for(lambda: last.fetch_job(job.id).status == "finished")
    assert _calls(client)["evalsha"] - claims < QUEUES // 2
    # a scheduled job on a quiet queue: its enqueue wakes the worker, whose claim learns
    # when it is due, and claims it then
    claims = _calls(client)["evalsha"]
    middle = Queue(names[QUEUES // 2], client, settings=s)
    later = middle.enqueue_in(1.0, "tests.jobs:add", 1, 1)
    wait_for(lambda: middle.fetch_job(later.id).status == "finished")
    assert _calls(client)["evalsha"] - claims < QUEUES // 2
    assert proc.poll() is None and "Traceback" not in processes.output(proc)


def test_a_wake_up_lost_with_the_subscription_does_not_leave_a_job_waiting(
        redis_single, settings, processes):
    """Crash point: the pub/sub connection dies while the worker is frozen and a job is
    enqueued meanwhile (its wake-up reaches nobody). Back, the worker sees the dead
    connection, trusts no quiet queue and asks every queue again: the job on the
    1,000th queue runs at once, not when the sweep (4 queues a poll) reaches it."""
    url = f"redis://127.0.0.1:{redis_single}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    s = settings.replace(redis_url=url)
    processes.settings = s
    names = [f"q{i}" for i in range(QUEUES)]
    proc = processes.worker("-q", ",".join(names), "--name", "idle", env={
        "FUSIONWORKER_POLL_INTERVAL": "1.0", "FUSIONWORKER_HEARTBEAT_INTERVAL": "1.0"})
    key = f"{s.prefix}:worker:idle"
    wait_for(lambda: _calls(client).get("evalsha", 0) >= QUEUES, interval=0.25,
             what="the first claim over every queue")
    _heartbeat(client, key, client.hget(key, "last_heartbeat"))   # quiet from here on
    last = Queue(names[-1], client, settings=s)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        assert client.client_kill_filter(_type="pubsub") >= 1     # the worker's among them
        job = last.enqueue("tests.jobs:add", 2, 3)         # its wake-up is lost
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: last.fetch_job(job.id).status == "finished")
    assert proc.poll() is None and "Traceback" not in processes.output(proc)
