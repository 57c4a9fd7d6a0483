"""Real worker processes: states, heartbeat, shutdowns, exactly-once under 4 workers."""

from __future__ import annotations

import collections
import os
import signal

import psutil
import pytest

from fusionworker.core.config import Settings
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.ops.embedded import RedisUnavailable, connect_or_embed
from tests.waiting import gone, processes_of, wait_for


def _worker_key(r, prefix):
    names = wait_for(lambda: r.smembers(Keys(prefix).workers))
    return Keys(prefix).worker(next(iter(names)))


@pytest.mark.slow
def test_states_heartbeat_ttl_and_pickup_by_wake_up(processes, queue, r, prefix, redis_url):
    q = queue()
    # the fallback poll is an hour away: every job below is picked up by its wake-up message
    proc = processes.worker("--customq", "default", "--worker-ttl", "60",
                            env={"FUSIONWORKER_POLL_INTERVAL": "3600"})
    key = _worker_key(r, prefix)
    wait_for(lambda: r.hget(key, "state") == "idle")
    ttl = r.ttl(key)
    assert 0 < ttl <= 60
    info = r.hgetall(key)
    assert info["queues"] == "default" and int(info["pid"]) == proc.pid
    # the idle worker listens on the queue's wake-up channel (a message sent before it
    # subscribed would only be seen at the next poll)
    wait_for(lambda: dict(r.pubsub_numsub(q.qkeys.wake)).get(q.qkeys.wake) == 1)
    job = q.enqueue("tests.jobs:sleep", 1.0)
    wait_for(lambda: r.hget(key, "state") == "busy", timeout=15)
    assert r.hget(key, "current_job") == job.id
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=15)
    wait_for(lambda: r.hget(key, "state") == "idle")
    for n in range(5):
        j = q.enqueue("tests.jobs:noop")
        done = wait_for(lambda j=j: (f := q.fetch_job(j.id)).status == "finished" and f,
                        timeout=15)
        assert done.started_at >= done.enqueued_at
        wait_for(lambda n=n: r.hget(key, "successful") == str(n + 2)
                 and r.hget(key, "state") == "idle")
    assert int(r.hget(key, "successful")) == 6


@pytest.mark.slow
def test_warm_shutdown_finishes_the_job(processes, queue, r, prefix):
    q = queue()
    proc = processes.worker("--customq", "default")
    key = _worker_key(r, prefix)
    job = q.enqueue("tests.jobs:sleep", 1.5)
    wait_for(lambda: r.hget(key, "state") == "busy")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert q.fetch_job(job.id).status == "finished"
    assert not r.exists(key) and not r.smembers(Keys(prefix).workers)
    assert "warm shutdown" in processes.output(proc)


def test_cold_shutdown_puts_the_job_back_at_its_place(processes, queue, r, prefix, redis_url):
    q = queue()
    proc = processes.worker("--customq", "default")
    key = _worker_key(r, prefix)
    job = q.enqueue("tests.jobs:pid_then_sleep", redis_url, f"{prefix}:pid", 30, priority=3)
    horse = processes_of([wait_for(lambda: r.lindex(f"{prefix}:pid", 0))])
    later = q.enqueue("tests.jobs:noop", priority=3)
    q.pause()  # so the re-queued job is not taken again at once
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "warm shutdown" in processes.output(proc))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    back = q.fetch_job(job.id)
    assert back.status == "queued" and back.attempts == 0
    assert r.zrevrange(q.qkeys.pending, 0, -1) == [job.id, later.id]
    assert not r.exists(key)
    wait_for(lambda: gone(horse), timeout=5, what="the horse gone")


@pytest.mark.slow
def test_sigkilled_parent_takes_its_horse_with_it(processes, queue, r, prefix, redis_url):
    q = queue()
    proc = processes.worker("--customq", "default")
    key = _worker_key(r, prefix)
    job = q.enqueue("tests.jobs:pid_then_sleep", redis_url, f"{prefix}:pid", 30)
    horse = int(wait_for(lambda: r.lindex(f"{prefix}:pid", 0)))
    # every process of the worker: the fork server and the horse (the job's writer)
    family = psutil.Process(proc.pid).children(recursive=True)
    assert horse in {p.pid for p in family}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(5)
    for child in family:
        wait_for(lambda c=child: not c.is_running() or c.status() == psutil.STATUS_ZOMBIE,
                 timeout=5, ignore=(psutil.NoSuchProcess,))
    # nobody is left who could finish the job: it stays started for the reaper
    assert q.fetch_job(job.id).status == "started" and q.job_ids("started") == [job.id]
    # the fork server may see the socket reset before its PDEATHSIG: an EOF, no traceback
    assert "Traceback" not in processes.output(proc)
    assert r.hget(key, "current_job") == job.id


@pytest.mark.slow
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_exactly_once_with_four_workers(processes, settings, r, prefix, redis_url):
    q = Queue("many", r, settings=settings)
    ids = [q.enqueue("tests.jobs:record", redis_url, f"{prefix}:done", str(i)).id
           for i in range(1000)]
    procs = [processes.worker("--customq", "many", "--burst") for _ in range(4)]
    for p in procs:
        assert p.wait(120) == 0, processes.output(p)
    done = r.lrange(f"{prefix}:done", 0, -1)
    counts = collections.Counter(done)
    assert len(done) == 1000 and set(counts.values()) == {1}
    statuses = collections.Counter(q.fetch_job(i).status for i in ids)
    assert statuses == {"finished": 1000}
    # the work was shared
    outputs = [processes.output(p).count("finished job") for p in procs]
    assert sum(outputs) == 1000 and sum(1 for n in outputs if n > 0) >= 2, outputs


def test_embedded_redis_when_none_answers(tmp_path):
    dead = "redis://127.0.0.1:1/0"
    implicit = Settings(values={"redis_url": dead, "embedded_dir": str(tmp_path)})
    client, url = connect_or_embed(implicit)
    assert url.startswith("unix://") and client.ping()
    q = Queue("emb", client, settings=implicit.replace(allowed_modules=("tests",)))
    job = q.enqueue("tests.jobs:add", 20, 22)
    from fusionworker.worker import Worker
    Worker("emb", client, settings=implicit.replace(allowed_modules=("tests",)), burst=True,
           defaults=False, middleware=[]).work()
    assert q.fetch_job(job.id).result == 42
    explicit = implicit.replace(redis_url=dead)
    try:
        connect_or_embed(explicit)
    except RedisUnavailable as exc:
        assert "127.0.0.1:1" in str(exc)
    else:
        raise AssertionError("an explicit URL must never be replaced by the embedded Redis")


_EMBED = """
import sys
from fusionworker.core.config import Settings
from fusionworker.ops.embedded import connect_or_embed
client, url = connect_or_embed(Settings(values={"redis_url": "redis://127.0.0.1:1/0",
                                                "embedded_dir": sys.argv[1]}))
if sys.argv[2] == "write":
    client.set("kept", "yes")
print(url, client.get("kept"))
"""


@pytest.mark.slow
def test_embedded_redis_stops_with_its_process_and_keeps_its_data(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    def run(mode):
        out = subprocess.run([sys.executable, "-c", _EMBED, str(tmp_path), mode], cwd=str(ROOT),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    url, value = run("write")
    assert value == "yes"
    socket_path = url[len("unix://"):]
    import redis as redis_module
    try:
        redis_module.Redis(unix_socket_path=socket_path).ping()
    except (redis_module.ConnectionError, FileNotFoundError):
        pass
    else:
        raise AssertionError("the embedded Redis outlived the process that started it")
    import os
    assert not os.path.exists(os.path.dirname(socket_path))  # its temporary folder went too
    assert run("read")[1] == "yes"   # saved in the data folder, loaded by the next start
