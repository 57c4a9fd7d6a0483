"""Issue 18: faults and bad data never kill a worker, never run a job twice at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

from fusionworker.core.keys import Keys
from tests.redis_servers import redis_single
from tests.waiting import heartbeats, wait_for

__all__ = ["redis_single"]  # fixture used below


def test_lone_surrogates_in_errors_and_results_are_recorded_not_fatal(queue, burst, r):
    q = queue()
    bad = q.enqueue("tests.jobs:surrogate_error")
    weird = q.enqueue("tests.jobs:surrogate_result")
    broken = q.enqueue("tests.jobs:bad_str_error")
    after = q.enqueue("tests.jobs:add", 1, 2)
    w = burst()
    assert w.failed == 2 and w.successful == 2
    job = q.fetch_job(bad.id)
    assert job.status == "failed" and job.failure_reason == "exception"
    assert job.error_type == "ValueError"
    assert job.error_message == "cannot parse caf\\udce9.csv"
    assert "caf\\udce9" in job.traceback
    assert q.fetch_job(weird.id).result == "caf\udce9"
    job = q.fetch_job(broken.id)
    assert job.status == "failed" and job.error_type == "_BadStr"
    assert "str() failed" in job.error_message
    assert q.fetch_job(after.id).result == 3


@pytest.mark.parametrize("field", ["id", "queue"])
def test_a_record_disagreeing_with_its_key_fails_as_malformed_and_never_runs(
        field, queue, burst, r, prefix, redis_url):
    q = queue()
    job = q.enqueue("tests.jobs:record", redis_url, f"{prefix}:ran", "x")
    jkey = f"{prefix}:{{default}}:job:{job.id}"
    assert r.exists(jkey)
    r.hset(jkey, field, "someone-else")
    w = burst()
    assert w.failed == 1
    assert r.lrange(f"{prefix}:ran", 0, -1) == []          # it never ran
    data = r.hgetall(jkey)
    assert data["status"] == "failed" and data["failure_reason"] == "malformed"
    assert f"field '{field}'" in data["error_message"]
    assert r.zscore(f"{prefix}:{{default}}:failed", job.id) is not None
    assert r.zcard(f"{prefix}:{{default}}:started") == 0
    assert not r.exists(f"{prefix}:{{default}}:job:someone-else")


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("kill_children", [True, False])
def test_a_jobs_child_processes_die_with_its_horse_unless_disabled(
        kill_children, queue, burst, r, prefix, redis_url, settings):
    q = queue()
    job = q.enqueue("tests.jobs:spawn_sleeper", redis_url, f"{prefix}:child")
    w = burst(settings=settings.replace(kill_job_children=kill_children))
    assert w.successful == 1
    child = int(r.lrange(f"{prefix}:child", 0, -1)[0])
    assert q.fetch_job(job.id).result == child
    try:
        if kill_children:
            wait_for(lambda: not _alive(child), timeout=5)
        else:
            # the worker's last act before burst() returned was to kill what finished
            # jobs left behind (waiting for them): nothing is left to kill it later
            assert _alive(child)
    finally:
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass


def test_a_wrongtype_queue_key_is_refused_before_any_write_and_other_queues_go_on(
        queue, burst, r, prefix):
    bad, good = queue("bad"), queue("good")
    stuck = bad.enqueue("tests.jobs:add", 1, 1)
    jobs = [good.enqueue("tests.jobs:add", i, 1) for i in range(3)]
    r.set(bad.qkeys.started, "not a zset")            # somebody overwrote it by hand
    w = burst("bad,good")                              # survives, serves the good queue
    assert w.successful == 3
    assert all(good.fetch_job(j.id).result == j.args[0] + 1 for j in jobs)
    # backed off (not "still backed off now": on a loaded machine the burst may outlast
    # the first backoff's 1 s); a claim from it would have cleared the entry
    assert w.claimer.backoff["bad"][1] >= 1.0
    # nothing half-written: the bad queue's job is still queued, still pending
    assert r.zscore(bad.qkeys.pending, stuck.id) is not None
    assert bad.fetch_job(stuck.id).status == "queued" and bad.fetch_job(stuck.id).attempts == 0
    r.delete(bad.qkeys.started)                        # repaired: the job runs
    assert burst("bad").successful == 1
    assert bad.fetch_job(stuck.id).result == 2


def test_the_reaper_reaps_other_queues_when_one_is_refused(queue, settings, r):
    from fusionworker.middleware.reaper import reap_once
    from tests.middleware.test_reaper import claim

    bad, good = queue("bad"), queue("good")
    a = bad.enqueue("tests.jobs:noop", max_retries=3)
    b = good.enqueue("tests.jobs:noop", max_retries=3)
    claim(bad)
    claim(good)
    r.delete(bad.qkeys.failed)
    r.set(bad.qkeys.failed, "not a zset")
    counts = reap_once(r, settings)
    assert counts["jobs"] == [b.id] and counts["refused"] == ["bad"]
    assert good.fetch_job(b.id).status == "queued"
    assert bad.fetch_job(a.id).status == "started"    # untouched, not half-written


@pytest.mark.slow
def test_an_oom_refusal_does_not_kill_the_worker_nor_lose_the_job(
        redis_single, settings, processes, tmp_path):
    import redis

    from fusionworker.core.queue import Queue

    url = f"redis://127.0.0.1:{redis_single}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    s = settings.replace(redis_url=url)
    processes.settings = s
    q = Queue("default", client, settings=s)
    proc = processes.worker("-q", "default")
    first = q.enqueue("tests.jobs:sleep", 1.0)
    wait_for(lambda: q.fetch_job(first.id).status == "started")
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")                # every write is refused now: OOM
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        q.enqueue("tests.jobs:noop")                    # the producer gets a clear refusal
    wait_for(lambda: "refused the outcome" in processes.output(proc), timeout=10)
    wait_for(lambda: "Reaper pass" in (out := processes.output(proc)) and "refused it" in out)
    assert proc.poll() is None
    assert "Traceback" not in processes.output(proc)   # one line per refusal, no stack
    client.config_set("maxmemory", "0")                # memory back: the outcome lands
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=15)
    assert q.fetch_job(first.id).result == 1.0
    second = q.enqueue("tests.jobs:add", 2, 2)
    wait_for(lambda: q.fetch_job(second.id).status == "finished", timeout=10)
    assert proc.poll() is None


@pytest.mark.slow
def test_a_worker_started_before_redis_answers_waits_for_it(settings, processes, tmp_path):
    """A deploy racing a Redis restart: the worker (not --burst) says so in one line and
    waits; once a server answers on that URL it registers and runs jobs."""
    import redis

    from fusionworker.core.queue import Queue
    from tests.redis_servers import free_port, start_single

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    processes.settings = settings.replace(redis_url=url)
    proc = processes.start("--log-format", "json", "worker", "-q", "default")
    wait_for(lambda: processes.output(proc).count("trying again") >= 2)
    out = processes.output(proc)
    assert "the worker waits for it" in out and "Traceback" not in out
    for line in out.splitlines():                 # every line JSON: a log shipper reads it
        assert json.loads(line)["message"], line
    assert ".; the worker" not in out          # one sentence: redis-py's full stop dropped
    assert proc.poll() is None
    port, stop = start_single(port=port)
    try:
        client = redis.Redis.from_url(url, decode_responses=True)
        q = Queue("default", client, settings=settings.replace(redis_url=url))
        job = q.enqueue("tests.jobs:add", 2, 3)
        wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=60)
        assert q.fetch_job(job.id).result == 5
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        stop()


@pytest.mark.slow
def test_sigterm_ends_the_wait_for_redis_and_a_burst_worker_does_not_wait(settings, processes):
    from tests.redis_servers import free_port

    processes.settings = settings.replace(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    proc = processes.worker("-q", "default")
    wait_for(lambda: "trying again" in processes.output(proc))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert "stopped before Redis answered" in processes.output(proc)
    burst = processes.worker("-q", "default", "--burst")
    assert burst.wait(30) == 1
    assert "Error: cannot reach Redis" in processes.output(burst)


@pytest.mark.slow
def test_a_wrong_password_is_not_waited_out(settings, processes):
    """A Redis that answers and refuses the credentials: one error line, exit 1, the
    password masked; no "waits for it"."""
    from tests.redis_servers import start_single

    port, stop = start_single("--requirepass", "right")
    try:
        processes.settings = settings.replace(redis_url=f"redis://:wr0ng@127.0.0.1:{port}/0")
        proc = processes.worker("-q", "default")
        assert proc.wait(30) == 1
        out = processes.output(proc)
        assert "Error: cannot reach Redis at redis://:***@" in out and "wr0ng" not in out
        assert "waits for it" not in out and "Traceback" not in out
    finally:
        stop()


@pytest.mark.slow
def test_a_worker_refused_at_registration_for_memory_waits_until_redis_has_room(
        redis_single, settings, processes):
    import redis

    from fusionworker.core.keys import Keys

    url = f"redis://127.0.0.1:{redis_single}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")                # every write is refused: OOM
    processes.settings = settings.replace(redis_url=url)
    proc = processes.worker("-q", "default", "--name", "patient")
    wait_for(lambda: "did not take the registration" in processes.output(proc))
    burst = processes.worker("-q", "default", "--burst", "--name", "hasty")
    assert burst.wait(30) == 1
    assert "Error: Redis refused the worker's registration" in processes.output(burst)
    assert "Traceback" not in processes.output(burst)
    client.config_set("maxmemory", "0")
    wait_for(lambda: client.exists(Keys(settings.prefix).worker("patient")), timeout=60)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_refused_name_leaves_the_live_workers_registration_alone(r, settings):
    """A second worker with a live worker's name is refused (one line in the CLI) and
    writes nothing: before, its clean-up deleted the live worker's heartbeat hash."""
    from fusionworker.worker import Worker

    keys = Keys(settings.prefix)
    r.hset(keys.worker("dup"), mapping={"name": "dup", "pid": "1"})   # another process's
    r.sadd(keys.workers, "dup")
    with pytest.raises(ValueError, match="exists already"):
        Worker("default", r, settings=settings, defaults=False, middleware=[], name="dup").work()
    assert r.hget(keys.worker("dup"), "pid") == "1"
    assert r.sismember(keys.workers, "dup")


def test_a_silent_workers_name_is_taken_over(r, settings, caplog):
    """A worker SIGKILLed leaves its heartbeat hash for ``worker_ttl`` (7 minutes): a
    restart under its name was refused all that time, though every reader called it
    silent. A registration silent past its lease is taken over, and said so."""
    import time

    from fusionworker.worker import Worker

    keys = Keys(settings.prefix)
    r.hset(keys.worker("back"), mapping={"name": "back", "pid": "1", "lease": "10",
                                          "last_heartbeat": time.time() - 60})
    r.sadd(keys.workers, "back")
    w = Worker("default", r, settings=settings, defaults=False, middleware=[], name="back",
               burst=True)
    assert w.work() == 0
    assert "takes over the name of worker pid 1" in caplog.text
    assert not r.exists(keys.worker("back"))            # its own, deregistered at the end


def test_a_worker_whose_name_another_took_stops_and_leaves_the_others_registration(
        r, settings, processes):
    """A worker cut off past its lease (frozen, partitioned) was reaped, and another
    worker registered its name. Coming back, it found nothing wrong (its heartbeat's
    SADD answered 0) and both wrote one hash. Its heartbeat reads the hash's pid: it
    stops, and leaves the other's registration alone."""
    keys = Keys(settings.prefix)
    proc = processes.worker("-q", "default", "--name", "twice")
    wait_for(lambda: r.hget(keys.worker("twice"), "pid") == str(proc.pid), timeout=60)
    r.hset(keys.worker("twice"), "pid", "1")            # as the other worker registered
    assert proc.wait(30) == 0
    assert "registered this name while this one was cut off" in processes.output(proc)
    assert r.hget(keys.worker("twice"), "pid") == "1" and r.sismember(keys.workers, "twice")


LEASE_ENV = {"FUSIONWORKER_LEASE": "3", "FUSIONWORKER_HEARTBEAT_INTERVAL": "0.5",
             "FUSIONWORKER_REAPER_INTERVAL": "0.5"}


def _executions(r, key):
    entries = r.lrange(key, 0, -1)
    return entries, sum(e.startswith("start:") for e in entries)


def _horse_pid(r, key):
    return int(r.lrange(key, 0, 0)[0].split(":")[1])


def _frozen_then_handed_on(processes, q, r, job, key, send) -> int:
    """Once ``job`` (tests.jobs:exclusive, writing to ``key``) runs, ``send(SIGSTOP)``
    freezes its worker; a second worker takes the job over when the lease ran out, then
    ``send(SIGCONT)``. Checks that no two horses ever ran it at once and that the frozen
    horse was killed before its end; returns that horse's pid."""
    wait_for(lambda: r.llen(key) >= 1)
    first = _horse_pid(r, key)
    send(signal.SIGSTOP)
    try:
        processes.worker("-q", "default", env=LEASE_ENV)
        wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=30)
    finally:
        send(signal.SIGCONT)
    entries, runs = _executions(r, key)
    assert "overlap" not in entries, entries
    assert runs >= 2 and f"end:{first}" not in entries
    return first


@pytest.mark.slow
def test_a_frozen_parents_horse_dies_at_its_lease_before_the_job_is_handed_on(
        processes, queue, r, prefix, redis_url, tmp_path):
    q = queue()
    key, marker = f"{prefix}:runs", str(tmp_path / "marker")
    job = q.enqueue("tests.jobs:exclusive", redis_url, key, marker, 5.0, 0.5, max_retries=5)
    a = processes.worker("-q", "default", env=LEASE_ENV)
    first = _frozen_then_handed_on(processes, q, r, job, key,
                                   lambda sig: os.kill(a.pid, sig))   # the parent alone
    assert q.fetch_job(job.id).result != first
    heartbeats(r, Keys(prefix).worker(f"{socket.gethostname()}.{a.pid}"))  # carries on
    assert a.poll() is None
    assert q.fetch_job(job.id).status == "finished"


def test_a_stopped_workers_process_group_still_has_its_horse_die_at_its_lease(
        processes, queue, r, prefix, redis_url, settings, tmp_path):
    """SIGSTOP to the worker's whole process group (Ctrl-Z in a terminal): the fork server
    has a group of its own and its lease watchdog kills the horse (horse.py docstring)."""
    import subprocess
    import sys

    from tests.conftest import ROOT, worker_env

    q = queue()
    key, marker = f"{prefix}:runs", str(tmp_path / "marker")
    job = q.enqueue("tests.jobs:exclusive", redis_url, key, marker, 5.0, 0.5, max_retries=5)
    a = subprocess.Popen([sys.executable, str(ROOT / "run_worker.py"), "worker", "-q", "default"],
                         env=worker_env(settings, **LEASE_ENV), cwd=str(ROOT),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:                                                # the worker's group, as Ctrl-Z does
        _frozen_then_handed_on(processes, q, r, job, key, lambda sig: os.killpg(a.pid, sig))
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait(10)


@pytest.mark.slow
def test_a_partitioned_workers_horse_dies_at_its_lease_before_the_job_is_handed_on(
        processes, queue, r, prefix, redis_url, tmp_path):
    from tests.tcp_proxy import TcpProxy

    proxy = TcpProxy(("127.0.0.1", int(redis_url.split(":")[2].split("/")[0])))
    try:
        q = queue()
        key, marker = f"{prefix}:runs", str(tmp_path / "marker")
        job = q.enqueue("tests.jobs:exclusive", redis_url, key, marker, 5.0, 0.5, max_retries=5)
        a = processes.worker("-q", "default", env={**LEASE_ENV, "REDIS_URL": proxy.url})
        wait_for(lambda: r.llen(key) >= 1)
        first = _horse_pid(r, key)
        proxy.cut()
        processes.worker("-q", "default", env=LEASE_ENV)
        wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=30)
        proxy.heal()
        entries, runs = _executions(r, key)
        assert "overlap" not in entries, entries
        assert runs >= 2 and f"end:{first}" not in entries
        # killed by its own watchdog or by its parent's tick, whichever came first
        assert not _alive(first)
        heartbeats(r, Keys(prefix).worker(f"{socket.gethostname()}.{a.pid}"))  # reconnected
        assert a.poll() is None
        assert q.fetch_job(job.id).status == "finished"
    finally:
        proxy.cut()


BAD_NUMBERS = [
    # (setting env var, bad value, what the one line must say)
    ("FUSIONWORKER_POLL_INTERVAL", "0", ">= 0.01"),         # an idle worker would spin
    ("FUSIONWORKER_REAPER_INTERVAL", "0", "> 0"),           # would switch reaping off
    ("FUSIONWORKER_REAPER_INTERVAL", "-5", "> 0"),
    ("FUSIONWORKER_JOB_TIMEOUT", "nan", "finite"),
    ("FUSIONWORKER_LEASE", "inf", "finite"),
    ("FUSIONWORKER_HEARTBEAT_INTERVAL", "0", "> 0"),
    ("FUSIONWORKER_MAX_RETRIES", "-1", ">= 0"),
    ("MEMORY_THROTTLE_THRESHOLD", "150", "<= 100"),
    ("FUSIONWORKER_METRICS_PORT", "70000", "<= 65535"),
    ("FUSIONWORKER_LOG_FORMAT", "xml", "one of text, json"),
]


@pytest.mark.parametrize(("var", "value", "says"), BAD_NUMBERS)
def test_a_bad_setting_is_one_clear_line_and_a_refusal_from_env_file_and_api(
        var, value, says, settings, tmp_path):
    from click.testing import CliRunner

    from fusionworker.cli import main
    from fusionworker.core.config import SETTINGS, ConfigError, load_settings

    base = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix}
    runner = CliRunner()
    # environment: the worker refuses to start
    result = runner.invoke(main, ["worker", "--burst", "-q", "default"], env={**base, var: value})
    assert result.exit_code != 0 and not isinstance(result.exception, ConfigError)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and var in lines[0] and says in lines[0], result.stderr
    # config file
    conf = tmp_path / "bad.env"
    conf.write_text(f"{var}={value}\n")
    result = runner.invoke(main, ["-c", str(conf), "worker", "--burst", "-q", "default"], env=base)
    assert result.exit_code != 0 and says in result.stderr and "Traceback" not in result.stderr
    # API (code passes typed values)
    setting = next(s for s in SETTINGS if s.env == var)
    with pytest.raises(ConfigError, match=says.replace("+", r"\+")):
        load_settings(environ={}, **{setting.name: setting.parse(value)})


@pytest.mark.parametrize("options", [
    {"timeout": float("nan")}, {"timeout": float("inf")}, {"timeout": -1.0}, {"timeout": 0},
    {"max_retries": -1}, {"retry_delay": float("nan")},
])
def test_enqueue_refuses_nan_inf_and_negative_numbers_and_writes_nothing(options, queue, r,
                                                                        prefix):
    q = queue()
    with pytest.raises(ValueError):
        q.enqueue("tests.jobs:noop", **options)
    assert [k for k in r.scan_iter(f"{prefix}:{{default}}:*")] == []


@pytest.mark.parametrize("args", [
    ["--timeout", "nan"], ["--timeout", "inf"], ["--in", "nan"], ["--retry-delay", "inf"],
])
def test_cli_enqueue_refuses_nan_and_inf_in_one_line(args, settings, r, prefix):
    from click.testing import CliRunner

    from fusionworker.cli import main

    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    result = CliRunner().invoke(main, ["enqueue", *args, "default", "tests.jobs:noop"], env=env)
    assert result.exit_code != 0 and "Traceback" not in result.stderr, result.stderr
    assert len([x for x in result.stderr.splitlines() if x.strip()]) == 1
    assert "finite" in result.stderr
    assert [k for k in r.scan_iter(f"{prefix}:{{default}}:*")] == []


def test_an_unexpected_error_is_one_line_with_the_password_masked(settings):
    from click.testing import CliRunner

    from fusionworker.cli import main

    # a NaN socket timeout in the URL makes redis-py raise a plain ValueError
    env = {"REDIS_URL": "redis://:s3cretpw@127.0.0.1:6379/0?socket_timeout=nan",
           "FUSIONWORKER_PREFIX": settings.prefix}
    result = CliRunner().invoke(main, ["health"], env=env)
    assert result.exit_code != 0 and "Traceback" not in result.stderr
    assert "s3cretpw" not in result.output + result.stderr
    assert len([x for x in result.stderr.splitlines() if x.strip()]) == 1


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


@pytest.mark.slow
def test_the_fork_server_releases_a_large_report_before_the_next_horse(queue, burst, settings):
    from fusionworker.core.hooks import Middleware

    class ServerRss(Middleware):
        def __init__(self) -> None:
            self.kib: list[int] = []

        def on_horse_tick(self, worker, job, pid):   # while a job runs
            self.kib.append(_rss_kib(worker.launcher.server.proc.pid))

    q = queue()
    q.enqueue("tests.jobs:sleep", 0.3)
    big = q.enqueue("tests.jobs:big_result", 100)
    q.enqueue("tests.jobs:sleep", 0.3)
    probe = ServerRss()
    w = burst(settings=settings.replace(result_ttl=5, max_result_bytes=0), middleware=[probe])
    assert w.successful == 3 and len(q.fetch_job(big.id).result) == 100 * 1024 * 1024
    baseline, after = probe.kib[0], probe.kib[-1]     # during the first and the last job
    assert after < baseline + 30 * 1024, probe.kib


def test_enqueue_registers_the_queue_again_after_a_data_loss(queue, r, settings, burst):
    from fusionworker.core.queue import known_queues

    q = queue("lost")
    q.enqueue("tests.jobs:noop")
    assert "lost" in known_queues(r, settings.prefix)
    r.delete(q.keys.queues)            # the registry lost (FLUSHALL, eviction, restart)
    job = q.enqueue("tests.jobs:add", 1, 2)   # the same Queue object, registered "once"
    assert "lost" in known_queues(r, settings.prefix)
    burst("all")                       # a worker on "all" finds it through the registry
    assert q.fetch_job(job.id).result == 3


def test_a_dead_worker_with_a_fast_clock_is_reaped_after_its_lease_not_its_ttl(
        queue, settings, r, prefix):
    from fusionworker.core.keys import Keys
    from fusionworker.middleware.reaper import reap_once
    from tests.middleware.test_reaper import claim

    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=3)
    claim(q, worker="fast.1")
    key = Keys(prefix).worker("fast.1")
    # what a worker whose clock runs an hour fast wrote at its last heartbeat, 20 s ago
    # by the server's clock (TTL re-armed to worker_ttl=420 then, 400 s left now)
    r.hset(key, mapping={"name": "fast.1", "current_job": job.id, "lease": 15,
                         "worker_ttl": 420, "last_heartbeat": time.time() + 3600})
    r.expire(key, 400)
    r.sadd(Keys(prefix).workers, "fast.1")
    counts = reap_once(r, settings)
    assert counts["jobs"] == [job.id]
    assert q.fetch_job(job.id).status == "queued"
    # and one that heartbeat 5 s ago is alive, whatever its clock says (an hour slow)
    jid, _ = claim(q, worker="slow.1")         # the same job, claimed again
    key = Keys(prefix).worker("slow.1")
    r.hset(key, mapping={"name": "slow.1", "current_job": jid, "lease": 15,
                         "worker_ttl": 420, "last_heartbeat": time.time() - 3600})
    r.expire(key, 415)
    counts = reap_once(r, settings)
    assert counts["jobs"] == [] and counts["alive"] == 1


def test_an_evicting_policy_is_warned_about_at_start_and_in_health(redis_single, settings,
                                                                   caplog):
    import redis

    from fusionworker.ops.health import check
    from fusionworker.worker import Worker

    client = redis.Redis(port=redis_single, decode_responses=True)
    s = settings.replace(redis_url=f"redis://127.0.0.1:{redis_single}/0")
    assert "WARNING" not in check(client, s.prefix).message          # noeviction: quiet
    client.config_set("maxmemory-policy", "allkeys-lru")
    health = check(client, s.prefix)
    assert health.ok and "maxmemory-policy is allkeys-lru" in health.message
    with caplog.at_level("ERROR", logger="fusionworker"):
        Worker("default", client, settings=s, burst=True, defaults=False, middleware=[]).work()
    assert any("maxmemory-policy is allkeys-lru" in rec.getMessage() for rec in caplog.records)
    # CONFIG refused (ACL, managed Redis): no crash, no verdict on the policy
    client.acl_setuser("limited", enabled=True, passwords=["+limitedpw"], keys=["*"],
                       commands=["+@all", "-config"])
    limited = redis.Redis(port=redis_single, username="limited", password="limitedpw")
    assert "WARNING" not in check(limited, s.prefix).message
    client.config_set("maxmemory-policy", "noeviction")
