"""health.check: Redis, live workers per queue, jobs stuck past their lease."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any

import psutil
import pytest
import redis

from fusionworker.core import admin
from fusionworker.core.connection import connect
from fusionworker.core.keys import Keys
from fusionworker.ops import health
from fusionworker.worker import Worker
from tests.redis_servers import redis_single

__all__ = ["redis_single"]  # fixture used below


@pytest.fixture
def worker(r: Any, settings: Any) -> Any:
    w = Worker("sms,email", r, settings=settings, name="hw", defaults=False, middleware=[])
    w.register()
    yield w
    w.deregister()


def test_redis_only(r: Any, prefix: str) -> None:
    result = health.check(r, prefix)
    assert result.ok and result.message == "ok: Redis answers"


def test_queue_needs_a_live_worker(r: Any, prefix: str, worker: Worker) -> None:
    assert health.check(r, prefix, ["sms"]).ok
    assert health.check(r, prefix, ["sms"]).workers == {"sms": ["hw"]}
    result = health.check(r, prefix, ["other"])
    assert not result.ok and result.message == "unhealthy: no live worker serves queue other"


def silent_for(r: Any, worker: Worker, seconds: float) -> None:
    """As if the last heartbeat was ``seconds`` ago on the Redis server's clock: each
    heartbeat sets the key's TTL to worker_ttl, which has run down since."""
    r.pexpire(worker.key, int((worker.settings.worker_ttl - seconds) * 1000))


def test_a_worker_silent_for_its_lease_is_not_live(r: Any, prefix: str, worker: Worker) -> None:
    silent_for(r, worker, worker.lease + 5)
    assert not health.check(r, prefix, ["sms"]).ok
    assert health.live_workers(r, prefix, admin.server_time(r)) == []


def test_a_workers_age_is_read_on_the_redis_servers_clock(r: Any, prefix: str,
                                                          worker: Worker) -> None:
    """The worker writes last_heartbeat from its host's clock: a host 60 s behind read
    as silent (health failed a healthy fleet), one ahead as live minutes after its
    death. Readers age a heartbeat by its key's TTL, as the reaper does (found by a
    trial, with faketime)."""
    r.hset(worker.key, "last_heartbeat", time.time() - 60)     # a host 60 s behind
    assert health.check(r, prefix, ["sms"]).ok
    [doc] = [admin.describe_worker(w, admin.server_time(r)) for w in admin.workers(r, prefix)]
    assert doc["state"] != "silent" and doc["heartbeat_age"] < 5
    r.hset(worker.key, "last_heartbeat", time.time() + 300)    # a host 5 minutes ahead...
    silent_for(r, worker, worker.lease + 5)                    # ...whose worker died
    assert not health.check(r, prefix, ["sms"]).ok
    [doc] = [admin.describe_worker(w, admin.server_time(r)) for w in admin.workers(r, prefix)]
    assert doc["state"] == "silent" and doc["heartbeat_age"] > worker.lease


def test_stuck_job(r: Any, prefix: str, worker: Worker) -> None:
    started = Keys(prefix).queue("sms").started
    r.zadd(started, {"fresh": time.time() + 60})
    assert health.check(r, prefix, ["sms"]).ok
    r.zadd(started, {"a": time.time() - 5, "b": time.time() - 1})
    result = health.check(r, prefix, ["sms"])
    assert not result.ok
    assert result.message == ("unhealthy: job a (and 1 more) of queue sms is stuck past its "
                              "lease deadline")
    assert admin.stuck_jobs(r, "sms", prefix) == ["a", "b"]


def test_unreachable_redis_raises() -> None:
    with pytest.raises(redis.ConnectionError):
        health.check(connect("redis://127.0.0.1:1/0"), "fw")


def test_forget_worker_only_when_the_pid_matches(r: Any, prefix: str, worker: Worker) -> None:
    assert not admin.forget_worker(r, "hw", worker.pid + 1, prefix)
    assert r.exists(worker.key)
    assert admin.forget_worker(r, "hw", worker.pid, prefix)
    assert not r.exists(worker.key) and "hw" not in r.smembers(Keys(prefix).workers)


def test_local_asks_about_this_hosts_own_workers(r: Any, prefix: str, worker: Worker) -> None:
    """``health --local``: a liveness probe of a pod. ``-q`` asks about the fleet (a
    frozen worker passed while another host served its queue); this asks whether this
    host's workers live: one at least, none silent (found by a trial)."""
    here = socket.gethostname()
    result = health.check(r, prefix, host=here)
    assert result.ok and "this host: 1 live worker(s)" in result.message
    assert not health.check(r, prefix, host="elsewhere").ok
    assert "no live worker on this host (elsewhere)" in health.check(
        r, prefix, host="elsewhere").message
    other = Worker("sms", r, settings=worker.settings, name="hw2", defaults=False, middleware=[])
    other.register()
    try:
        silent_for(r, worker, worker.lease + 5)        # one of its two is frozen
        assert health.check(r, prefix, ["sms"]).ok      # the fleet still serves sms...
        result = health.check(r, prefix, ["sms"], host=here)
        assert not result.ok and "worker hw of this host is silent" in result.message
    finally:
        other.deregister()


def test_local_passes_over_a_dead_workers_lingering_key(r: Any, prefix: str,
                                                         worker: Worker) -> None:
    """A worker SIGKILLed and restarted under another name (systemd, Docker, k8s give it
    a new pid) leaves its key, silent, until worker_ttl: its process is gone, so it is
    no frozen worker, and --local stays healthy on the live one (it failed for about
    6.5 minutes: found by an attack)."""
    dead = subprocess.Popen(["true"])
    dead.wait()                                    # a pid that no process has now
    r.hset(worker.key, "pid", dead.pid)
    silent_for(r, worker, worker.lease + 5)
    here = socket.gethostname()
    result = health.check(r, prefix, host=here)
    assert not result.ok and "no live worker on this host" in result.message
    other = Worker("sms", r, settings=worker.settings, name="hw2", defaults=False, middleware=[])
    other.register()
    try:
        assert health.check(r, prefix, host=here).ok
        r.hset(worker.key, "pid", os.getpid())     # a process that runs...
        started = psutil.Process().create_time()
        r.hset(worker.key, "birth", started - 3600)    # ...started after the worker was
        assert health.check(r, prefix, host=here).ok   # born: its pid given again
        r.hset(worker.key, "birth", time.time())       # its own: frozen, not dead
        assert not health.check(r, prefix, host=here).ok
    finally:
        other.deregister()


def test_local_with_queues_reads_the_workers_once(redis_single: int, settings: Any) -> None:
    """``health -q sms --local`` (a probe, every few seconds): the queue part and the
    host part read the same heartbeat hashes, once (a private server counts them)."""
    conn = redis.Redis(port=redis_single, decode_responses=True)
    w = Worker("sms", conn, settings=settings.replace(redis_url=f"redis://127.0.0.1:{redis_single}/0"),
               name="once", defaults=False, middleware=[])
    w.register()
    try:
        conn.config_resetstat()
        result = health.check(conn, settings.prefix, ["sms"], host=socket.gethostname())
        assert result.ok, result.message
        assert "this host: 1 live worker(s)" in result.message
        calls = {k.removeprefix("cmdstat_"): v["calls"]
                 for k, v in conn.info("commandstats").items()}
        assert calls.get("smembers") == 1 and calls.get("hgetall") == 1, calls
    finally:
        w.deregister()
