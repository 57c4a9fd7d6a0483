"""Every CLI command through click's runner, against the real Redis (per-test prefix)."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fusionworker.cli import main
from fusionworker.core.config import Settings
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.worker import Worker

Run = Callable[..., Result]


@pytest.fixture
def cli(settings: Settings) -> Iterator[Run]:
    """``cli("info", "--json", code=0, input=None)``: run a command; check its exit code.

    The CLI configures the ``fusionworker`` logger (own handler, no propagation);
    it is put back afterwards so that other tests' ``caplog`` still sees records.
    """
    logger = logging.getLogger("fusionworker")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    runner = CliRunner()
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests", "FUSIONWORKER_LOG_LEVEL": "WARNING"}

    def run(*args: str, code: int = 0, input: str | None = None,
            env_extra: dict[str, str] | None = None) -> Result:
        result = runner.invoke(main, list(args), env={**env, **(env_extra or {})}, input=input)
        assert "Traceback" not in result.stderr, result.stderr  # (a job's own may be shown)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        assert result.exit_code == code, (result.exit_code, result.output)
        return result
    yield run
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def one_error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def registered(r: Any, settings: Settings) -> Iterator[Callable[..., Worker]]:
    """A worker registered in Redis (heartbeat hash) without running its loop."""
    made: list[Worker] = []

    def make(queues: str = "default", **fields: Any) -> Worker:
        w = Worker(queues, r, settings=settings, name=f"w{len(made)}", defaults=False,
                   middleware=[])
        w.register()
        if fields:
            r.hset(w.key, mapping=fields)
        made.append(w)
        return w
    yield make
    for w in made:
        w.deregister()


def failed_jobs(queue: Callable[..., Any], burst: Callable[..., Any], n: int,
                name: str = "default") -> list[str]:
    q = queue(name)
    ids = [q.enqueue("tests.jobs:boom", f"no {i}").id for i in range(n)]
    burst(name)
    return ids


# -- info -------------------------------------------------------------------------

INFO_KEYS = {"schema", "version", "redis_url", "prefix", "time", "suspended",
             "suspended_remaining", "queues", "workers", "cron", "groups", "queues_total"}
QUEUE_KEYS = {"queue", "pending", "bands", "scheduled", "started", "failed", "finished",
              "paused", "max_active", "busy_groups", "oldest_age", "cron", "held", "due",
              "awaiting_compute"}
WORKER_KEYS = {"name", "host", "pid", "state", "throttle", "queues", "current_job",
               "current_queue", "current_job_age", "heartbeat_age", "uptime", "successful",
               "failed", "total_working_time", "lease", "version", "current_jobs", "concurrency",
               "events_buffered", "events_dropped", "events_errors", "cpu_percent",
               "queue_order", "gpus", "gpus_held"}


def test_info_json_schema(cli: Run, queue: Any, registered: Any, r: Any) -> None:
    q = queue("sms")
    q.enqueue("tests.jobs:noop", priority=20)
    q.enqueue("tests.jobs:noop")
    q.enqueue("tests.jobs:noop", priority=-3)
    q.enqueue_in(60, "tests.jobs:noop")
    q.pause()
    q.set_max_active(4)
    w = registered("sms", state="busy", current_job="abc", current_queue="sms",
                   current_job_started=time.time() - 5, throttle="RAM at 93.0%", successful=7)
    doc = json.loads(cli("info", "--json").stdout)
    assert set(doc) == INFO_KEYS
    assert doc["schema"] == 1 and doc["suspended"] is False
    [qs] = doc["queues"]
    assert QUEUE_KEYS <= set(qs)
    assert qs["queue"] == "sms" and qs["pending"] == 3 and qs["scheduled"] == 1
    assert qs["bands"] == {"high": 1, "normal": 1, "low": 1}
    assert qs["paused"] is True and qs["max_active"] == 4 and qs["oldest_age"] >= 0
    assert qs["awaiting_compute"] == 0 and qs["held"] == 0 and qs["due"] == 0   # paused
    [ws] = doc["workers"]
    assert set(ws) == WORKER_KEYS
    assert ws["name"] == w.name and ws["pid"] == w.pid and ws["queues"] == ["sms"]
    assert ws["state"] == "busy" and ws["throttle"] == "RAM at 93.0%"
    assert ws["cpu_percent"] is None            # the CPU check is off by default
    assert ws["current_job"] == "abc" and 4 < ws["current_job_age"] < 60
    assert ws["current_jobs"] == ["abc"] and ws["concurrency"] == 1   # one-slot worker
    assert ws["successful"] == 7 and ws["failed"] == 0 and ws["heartbeat_age"] < 60


def test_info_text_shows_queues_bands_and_workers(cli: Run, queue: Any, registered: Any) -> None:
    q = queue("sms")
    q.enqueue("tests.jobs:noop", priority=20)
    q.pause()
    registered("sms", state="throttled", throttle="RAM at 93.0%")
    out = cli("info").stdout
    assert "QUEUE" in out and "HIGH" in out and "NORMAL" in out and "LOW" in out
    sms = next(line for line in out.splitlines() if line.startswith("sms"))
    assert sms.split()[1:3] == ["1", "1"] and sms.endswith("paused")
    assert "throttled (RAM at 93.0%)" in out and "w0" in out
    assert "1 queue(s): 1 pending" in out and "1 worker(s): 1 throttled" in out


def test_info_shows_the_last_hour_of_outcomes(cli: Run, queue: Any, burst: Any) -> None:
    """The per-minute counts finish.lua keeps (the dashboard's chart) reach ``info``."""
    q = queue("default")
    for _ in range(3):
        q.enqueue("tests.jobs:noop")
    q.enqueue("tests.jobs:boom")
    burst("default")
    for idle in ("aaa", "zzz"):   # no minute hash: counted 0 beside a busy queue
        queue(idle).enqueue("tests.jobs:noop")
    doc = json.loads(cli("info", "-Q", "--json").stdout)
    assert {qs["queue"]: qs["last_hour"] for qs in doc["queues"]} == {
        "aaa": {"finished": 0, "failed": 0}, "default": {"finished": 3, "failed": 1},
        "zzz": {"finished": 0, "failed": 0}}
    assert "last hour 3 finished, 1 failed" in cli("info", "-Q").stdout


def test_info_only_workers_and_only_queues(cli: Run, queue: Any, registered: Any) -> None:
    queue("sms").enqueue("tests.jobs:noop")
    registered("sms")
    only_w = cli("info", "-W").stdout
    assert "WORKER" in only_w and "QUEUE " not in only_w
    only_q = cli("info", "--only-queues").stdout
    assert "QUEUE" in only_q and "WORKER" not in only_q
    doc = json.loads(cli("info", "-W", "--json").stdout)
    assert "queues" not in doc and len(doc["workers"]) == 1
    doc = json.loads(cli("info", "-Q", "--json").stdout)
    assert "workers" not in doc and len(doc["queues"]) == 1
    result = cli("info", "-W", "-Q", code=2)
    assert "exclude each other" in result.stderr


def test_info_interval_refreshes_until_ctrl_c(cli: Run, queue: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    queue("sms").enqueue("tests.jobs:noop")
    sleeps: list[float] = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr("fusionworker.cli.admin.time.sleep", fake_sleep)
    out = cli("info", "--interval", "0.5", "--json").stdout
    lines = out.splitlines()
    assert len(lines) == 2 and all(json.loads(x)["schema"] == 1 for x in lines)
    assert sleeps == [0.5, 0.5]


def test_info_shows_suspension(cli: Run) -> None:
    cli("suspend", "--duration", "30")
    out = cli("info").stdout
    assert "SUSPENDED (resume in" in out
    doc = json.loads(cli("info", "--json").stdout)
    assert doc["suspended"] is True and 0 < doc["suspended_remaining"] <= 30
    cli("resume")
    assert json.loads(cli("info", "--json").stdout)["suspended"] is False


# -- suspend / resume / pause / caps ----------------------------------------------

def test_suspend_and_resume(cli: Run, r: Any, prefix: str) -> None:
    key = Keys(prefix).suspended
    assert "until `resume`" in cli("suspend").stdout
    assert r.exists(key) and r.ttl(key) == -1
    assert cli("resume").stdout.strip() == "Resumed all workers"
    assert not r.exists(key)
    assert "for 2.5 s" in cli("suspend", "--duration", "2.5").stdout
    assert 0 < r.pttl(key) <= 2500
    cli("suspend", "--duration", "0", code=2)


def test_pause_unpause_and_unknown_queue_note(cli: Run, queue: Any) -> None:
    q = queue("sms")
    q.enqueue("tests.jobs:noop")
    assert cli("pause", "sms").stdout.strip() == "Paused sms"
    assert q.is_paused
    assert cli("unpause", "sms").stdout.strip() == "Unpaused sms"
    assert not q.is_paused
    result = cli("pause", "smss")
    assert "typo?" in result.stderr
    cli("pause", "bad name!", code=1)


def test_set_max_active(cli: Run, queue: Any) -> None:
    q = queue("sms")
    q.enqueue("tests.jobs:noop")
    assert "at most 3 job(s)" in cli("set-max-active", "sms", "3").stdout
    assert q.max_active == 3
    assert "no cap" in cli("set-max-active", "sms", "--none").stdout
    assert q.max_active is None
    assert "0 is not in the range" in cli("set-max-active", "sms", "0", code=2).stderr
    q.set_max_active(3)
    with pytest.raises(ValueError, match=r">= 1 .*pause it"):    # Python refuses 0 too
        q.set_max_active(0)
    assert q.max_active == 3                                     # and wrote nothing
    q.set_max_active(None)
    assert "give N" in cli("set-max-active", "sms", code=2).stderr
    assert "give N" in cli("set-max-active", "sms", "2", "--none", code=2).stderr


# -- requeue --------------------------------------------------------------------------

def test_requeue_all_and_by_id(cli: Run, queue: Any, burst: Any) -> None:
    ids = failed_jobs(queue, burst, 5)
    q = queue("default")
    out = cli("requeue", ids[0], ids[1]).stdout
    assert out.strip() == "Requeued 2 job(s)"  # piped: no progress bar
    assert q.fetch_job(ids[0]).status == "queued"
    assert cli("requeue", "--all").stdout.strip() == "Requeued 3 job(s)"
    assert q.count == 5 and q.stats()["failed"] == 0
    assert cli("requeue", "--all", "--queue", "default").stdout.strip() == "Requeued 0 job(s)"


def test_requeue_errors(cli: Run, queue: Any, burst: Any) -> None:
    [failed] = failed_jobs(queue, burst, 1)
    pending = queue("default").enqueue("tests.jobs:noop").id
    result = cli("requeue", failed, "nope", pending, code=1)
    assert result.stdout.strip() == "Requeued 1 job(s)"
    errors = result.stderr.splitlines()
    assert len(errors) == 2 and "no job 'nope'" in errors[0] and "not failed" in errors[1]
    assert "JOB_IDs or --all" in cli("requeue", code=2).stderr
    assert "JOB_IDs or --all" in cli("requeue", "--all", failed, code=2).stderr
    assert "no queue 'other'" in one_error_line(cli("requeue", "--all", "--queue", "other",
                                                    code=1))


# -- job --------------------------------------------------------------------------

def test_job_list_filters_limit_and_json(cli: Run, queue: Any, burst: Any) -> None:
    failed = failed_jobs(queue, burst, 2)
    a = queue("default").enqueue("tests.jobs:add", 1, 2, priority=5).id
    b = queue("other").enqueue("tests.jobs:noop").id
    out = cli("job", "list").stdout
    assert all(i in out for i in (*failed, a, b)) and "4 job(s)" in out
    out = cli("job", "list", "--status", "failed").stdout
    assert failed[0] in out and a not in out and "ValueError: no" in out
    out = cli("job", "list", "--queue", "other").stdout
    assert b in out and a not in out
    doc = json.loads(cli("job", "list", "--status", "queued", "--json").stdout)
    assert set(doc) == {"schema", "jobs", "count", "truncated"}
    assert doc["count"] == 2 and doc["truncated"] is False
    assert {j["id"] for j in doc["jobs"]} == {a, b}
    job = next(j for j in doc["jobs"] if j["id"] == a)
    assert job["args"] == [1, 2] and job["priority"] == 5 and job["status"] == "queued"
    doc = json.loads(cli("job", "list", "--limit", "1", "--json").stdout)
    assert doc["count"] == 1 and doc["truncated"] is True
    assert "more not shown: the --limit is 1" in cli("job", "list", "-n", "1").stdout
    # exactly the limit, and nothing in the registries after: not "truncated"
    doc = json.loads(cli("job", "list", "--status", "queued", "--status", "canceled",
                         "--status", "stopped", "--limit", "2", "--json").stdout)
    assert doc["count"] == 2 and doc["truncated"] is False
    assert "'lost' is not one of" in cli("job", "list", "--status", "lost", code=2).stderr
    assert "no queue 'nope'" in one_error_line(cli("job", "list", "--queue", "nope", code=1))


def test_a_job_id_given_to_two_queues_is_never_acted_on_by_a_guess(cli: Run,
                                                                    queue: Any) -> None:
    """An id is unique in its queue only: ``job show ID`` read the first queue's job,
    without a word of the other (found by a trial); an action would have picked one."""
    a, b = queue("aa"), queue("bb")
    a.enqueue("tests.jobs:add", 1, 2, job_id="fixed-1")
    b.enqueue("tests.jobs:add", 3, 4, job_id="fixed-1")
    for args in (["job", "show", "fixed-1"], ["job", "cancel", "fixed-1"]):
        out = cli(*args, code=2)
        assert "job id 'fixed-1' names a job in each of the queues aa, bb: say which " \
               "with --queue" in out.stderr
    assert "queue     bb" in cli("job", "show", "fixed-1", "--queue", "bb").stdout
    assert a.fetch_job("fixed-1").status == b.fetch_job("fixed-1").status == "queued"


def test_job_show_clips_a_huge_result(cli: Run, queue: Any, burst: Any) -> None:
    q = queue()
    job = q.enqueue("tests.jobs:echo", "y" * 50_000)
    burst()
    line = next(x for x in cli("job", "show", job.id).stdout.splitlines()
                if x.startswith("result"))
    assert len(line) < 2100 and line.endswith(" more characters: --json)")
    assert json.loads(cli("job", "show", job.id, "--json").stdout)["result"] == {
        "args": ["y" * 50_000], "kwargs": {}}


def test_job_show(cli: Run, queue: Any, burst: Any) -> None:
    [failed] = failed_jobs(queue, burst, 1)
    out = cli("job", "show", failed).stdout
    assert "status    failed" in out and "ValueError: no 0" in out
    assert "raise ValueError(message)" in out  # the job's traceback
    doc = json.loads(cli("job", "show", failed, "--json").stdout)
    assert doc["id"] == failed and doc["status"] == "failed"
    assert "no job 'nope'" in one_error_line(cli("job", "show", "nope", code=1))
    # why it was not retried (it was said in the worker's log only) and its times
    why = "not retried: max_retries is 0 (and ValueError is not in FUSIONWORKER_RETRYABLE)"
    assert f"why       {why}" in out and doc["not_retried"] == why
    times = next(line for line in out.splitlines() if line.startswith("times"))
    assert "enqueued 20" in times and "started 20" in times and "ended 20" in times
    assert re.search(r"ran \d+\.\d{3} s \(timeout 180 s\)", times), times  # (a loaded
    # machine can take a second to run it)
    # requeued, it is no longer "not retried"; run again, the end is its own
    cli("job", "retry", failed)
    again = cli("job", "show", failed).stdout
    assert "why" not in again and "last error" in again      # not this attempt's
    times = next(line for line in again.splitlines() if line.startswith("times"))
    assert "enqueued 20" in times and "started" not in times and "ran" not in times
    assert json.loads(cli("job", "show", failed, "--json").stdout)["not_retried"] is None


def test_job_retry_delete_cancel(cli: Run, queue: Any, burst: Any) -> None:
    q = queue("default")
    [failed] = failed_jobs(queue, burst, 1)
    assert cli("job", "retry", failed).stdout.strip() == f"Requeued {failed} on default"
    assert q.fetch_job(failed).status == "queued"
    assert "not failed" in one_error_line(cli("job", "retry", failed, code=1))
    assert cli("job", "cancel", failed).stdout.startswith("Canceled")
    assert q.fetch_job(failed).status == "canceled"
    refused = one_error_line(cli("job", "cancel", failed, code=1))
    assert "only queued, scheduled, deferred or held" in refused
    assert "a running one is stopped: job.stop(), `fusionworker job stop`" in refused
    assert cli("job", "delete", failed).stdout.startswith("Deleted")
    assert q.fetch_job(failed) is None
    for verb in ("retry", "delete", "cancel"):
        assert "no job 'nope'" in one_error_line(cli("job", verb, "nope", code=1))


def test_job_priority(cli: Run, queue: Any, burst: Any) -> None:
    q = queue("default")
    low = q.enqueue("tests.jobs:noop").id
    q.enqueue("tests.jobs:noop", priority=5)
    assert cli("job", "priority", low, "9").stdout.strip() == f"{low} on default: priority 9"
    assert q.job_ids("queued")[0] == low
    cli("job", "priority", "--", low, "-7")
    assert q.fetch_job(low).priority == -7
    assert "not in the range" in cli("job", "priority", low, "5000", code=2).stderr
    burst("default")
    line = one_error_line(cli("job", "priority", low, "1", code=1))
    assert "is finished; only a pending job can be reprioritized" in line
    assert "no job 'nope'" in one_error_line(cli("job", "priority", "nope", "1", code=1))


# -- queue --------------------------------------------------------------------------

def test_queue_list(cli: Run, queue: Any) -> None:
    queue("sms").enqueue("tests.jobs:noop")
    queue("email").pause()
    queue("email").enqueue("tests.jobs:noop")
    out = cli("queue", "list").stdout.splitlines()
    assert out[0].split()[0] == "QUEUE" and out[-1] == "2 queue(s)"
    assert out[1].startswith("email") and out[1].endswith("paused")
    doc = json.loads(cli("queue", "list", "--json").stdout)
    assert [q["queue"] for q in doc["queues"]] == ["email", "sms"]


def test_queue_empty_asks_unless_yes(cli: Run, queue: Any) -> None:
    q = queue("sms")
    for _ in range(3):
        q.enqueue("tests.jobs:noop")
    q.enqueue_in(60, "tests.jobs:noop")
    result = cli("queue", "empty", "sms", input="n\n", code=1)
    assert "Delete 4 pending and scheduled job(s) of sms?" in result.stderr
    assert q.count == 3
    assert "Deleted 4 job(s)" in cli("queue", "empty", "sms", input="y\n").stdout
    assert q.count == 0
    q.enqueue("tests.jobs:noop")
    assert cli("queue", "empty", "sms", "--yes").stdout.strip() == "Deleted 1 job(s) from sms"
    assert "empty already" in cli("queue", "empty", "sms", "-y").stdout
    assert "no queue 'nope'" in one_error_line(cli("queue", "empty", "nope", "--yes", code=1))


# -- health ---------------------------------------------------------------------------

def test_health(cli: Run, queue: Any, registered: Any, r: Any, prefix: str) -> None:
    queue("sms").enqueue("tests.jobs:noop")
    assert cli("health").stdout.strip() == "ok: Redis answers"
    line = one_error_line(cli("health", "--queue", "sms", code=1))
    assert line == "unhealthy: no live worker serves queue sms"
    registered("sms,email")
    assert "sms: 1 worker(s)" in cli("health", "--queue", "sms").stdout
    r.zadd(Keys(prefix).queue("sms").started, {"stuck1": time.time() - 10})
    line = one_error_line(cli("health", "-q", "email", "-q", "sms", code=1))
    assert line == "unhealthy: job stuck1 of queue sms is stuck past its lease deadline"


# -- errors -------------------------------------------------------------------------

def test_unreachable_redis_is_one_line_with_masked_url(cli: Run) -> None:
    url = "redis://:s3cret@127.0.0.1:1/0"
    for args in (["info"], ["job", "list"], ["requeue", "--all"], ["queue", "list"]):
        line = one_error_line(cli(*args, code=1, env_extra={"REDIS_URL": url}))
        assert line.startswith("Error: cannot reach Redis at redis://:***@127.0.0.1:1/0")
        assert "s3cret" not in line
    line = one_error_line(cli("health", code=1, env_extra={"REDIS_URL": url}))
    assert line.startswith("unhealthy: cannot reach Redis at redis://:***@127.0.0.1:1/0")
    line = one_error_line(cli("--redis-url", url, "info", code=1))
    assert "s3cret" not in line and "***" in line


@pytest.mark.parametrize("url", [":s3cret@127.0.0.1:1/0", "redis:/:s3cret@127.0.0.1:1/0",
                                 "redis//:s3cret@127.0.0.1:1/0", "redis://s3cret@127.0.0.1:1/0"])
def test_a_mistyped_url_never_shows_its_password(cli: Run, url: str) -> None:
    """Without ``scheme://`` (a typo) the URL was printed whole, twice, by every command;
    a password written as the user name was shown too (found by a trial)."""
    for args in (["info"], ["health"]):
        out = cli(*args, code=1, env_extra={"REDIS_URL": url})
        assert "s3cret" not in out.stdout + out.stderr and "***" in out.stdout + out.stderr


def test_health_of_an_address_that_answers_no_redis_is_its_one_line(cli: Run) -> None:
    """Something else at the address (an HTTP server) was "unexpected error:
    InvalidResponse ..." instead of health's own line (found by a trial)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    # an unreachable Cluster raises no RedisError (RedisClusterException): the same line
    line = one_error_line(cli("health", code=1, env_extra={
        "REDIS_URL": "redis+cluster://:s3cret@127.0.0.1:1"}))
    assert line.startswith("unhealthy: ") and "s3cret" not in line
    try:
        url = f"redis://:s3cret@127.0.0.1:{port}/0"
        line = one_error_line(cli("health", code=1, env_extra={"REDIS_URL": url}))
        assert line.startswith(f"unhealthy: Redis at redis://:***@127.0.0.1:{port}/0 answered")
        assert "s3cret" not in line
    finally:
        server.close()


def test_bad_url_and_bad_flags(cli: Run) -> None:
    line = one_error_line(cli("info", code=1, env_extra={"REDIS_URL": "redis://h:port/0"}))
    assert line.startswith("Error: bad Redis URL")
    assert "No such option '--frobnicate'" in cli("info", "--frobnicate", code=2).stderr
    assert "No such command" in cli("jobb", code=2).stderr
    assert "not a valid integer" in cli("set-max-active", "sms", "x", code=2).stderr


def test_info_shows_cron_entries_and_busy_groups(cli: Run, queue: Any, settings: Any,
                                                 r: Any) -> None:
    from fusionworker.middleware import cron

    q = queue("email")
    cron.register(r, settings, "nightly", "0 3 * * *", "tests.jobs:noop", queue="email",
                  timezone="Europe/Berlin")
    holder = q.enqueue("tests.jobs:noop", group="cust-1")
    q.enqueue("tests.jobs:noop", group="cust-1")
    doc = json.loads(cli("info", "--json").stdout)
    assert doc["queues"][0]["cron"] == 1
    [entry] = doc["cron"]
    assert entry["name"] == "nightly" and entry["timezone"] == "Europe/Berlin"
    assert entry["next_run"] > doc["time"] and entry["paused"] is False
    assert doc["groups"] == [{"queue": "email", "group": "cust-1", "job_id": holder.id,
                              "job_status": "queued", "waiting": 1}]
    out = cli("info").stdout
    assert "nightly" in out and "0 3 * * *" in out and "Europe/Berlin" in out
    row = next(line for line in out.splitlines() if line.startswith("cust-1"))
    assert holder.id in row and row.split()[-1] == "1"


@pytest.mark.parametrize("command", [["enqueue", "q"], ["cron", "add", "n", "* * * * *"]])
@pytest.mark.parametrize("bad, message", [("{nope", "not JSON"), ("[1, 2]", "must be a JSON object")])
def test_bad_kwargs_is_a_usage_error_and_enqueues_nothing(cli: Run, r: Any, settings: Any,
                                                          command: list[str], bad: str,
                                                          message: str) -> None:
    result = cli(*command, "tests.jobs:noop", "--kwargs", bad, code=2)
    assert message in result.output and "Traceback" not in result.output
    assert not list(r.scan_iter(f"{settings.prefix}:*job:*"))
    assert not list(r.scan_iter(f"{settings.prefix}:*cron*"))


def test_enqueue_refuses_rqs_argument_order_and_json_too_deep(cli: Run, queue: Any) -> None:
    q = queue("sms")
    wrong = cli("enqueue", "tests.jobs:add", "1", "2", code=2).stderr
    assert "looks like a function: the queue comes first" in wrong
    dotted = cli("enqueue", "tests.jobs.add", "1", "2", code=2).stderr   # RQ's dotted name
    assert "'1' is no function reference" in dotted and "if 'tests.jobs.add' is the " \
        "function, the queue comes first" in dotted and "-q QUEUE" in dotted
    number = cli("enqueue", "tests.jobs.add", "1.5", "2", code=2).stderr
    assert "'1.5' is no function reference" in number
    assert "Missing argument 'QUEUE'" in cli("enqueue", code=2).stderr
    depth = sys.getrecursionlimit() + 5000          # past what the JSON parser can read
    deep = cli("enqueue", "sms", "tests.jobs:echo", "[" * depth + "]" * depth, code=2).stderr
    assert "JSON nested too deeply" in deep and "unexpected error" not in deep
    assert q.count == 0


def test_enqueue_takes_the_queue_as_an_option_too(cli: Run, queue: Any) -> None:
    """RQ's `rq enqueue -q QUEUE FUNC ARGS`: with -q every argument is one place on."""
    q = queue("sms")
    job_id = cli("enqueue", "-q", "sms", "tests.jobs:echo", "bob", "n=3").stdout.strip()
    job = q.fetch_job(job_id)
    assert job is not None and job.func == "tests.jobs:echo"
    assert job.args == ["bob"] and job.kwargs == {"n": 3}
    line = '{"func": "tests.jobs:echo"}\n'
    for args in (["-q", "sms", "tests.jobs:add"], ["other", "-q", "sms"]):   # nothing dropped
        refused = cli("enqueue", *args, "--from-file", "-", input=line, code=2).stderr
        assert "drop func" in refused
    assert q.count == 1


def test_enqueue_takes_rqs_name_value_keyword_arguments(cli: Run, queue: Any) -> None:
    q = queue("sms")
    job_id = cli("enqueue", "sms", "tests.jobs:echo", "bob", "greeting=yo", "n=3",
                 '"a=b"', "https://x.test/?q=1", "--kwargs", '{"to": "+1555"}').stdout.strip()
    job = q.fetch_job(job_id)
    assert job is not None and job.args == ["bob", "a=b", "https://x.test/?q=1"]
    assert job.kwargs == {"greeting": "yo", "n": 3, "to": "+1555"}
    twice = cli("enqueue", "sms", "tests.jobs:echo", "to=1", "--kwargs", '{"to": 2}', code=2)
    assert "to is given twice" in twice.stderr and q.count == 1


def test_enqueue_by_name_takes_the_functions_job_options(
        cli: Run, r: Any, settings: Any, fresh_defaults_module: None) -> None:
    q = Queue("q", r, settings=settings)
    job_id = cli("enqueue", "q", "tests.defaults_jobs:long_allowed", "1").output.strip()
    job = q.fetch_job(job_id)
    assert job is not None and (job.timeout, job.priority) == (600.0, 7)
    job_id = cli("enqueue", "q", "tests.defaults_jobs:long_allowed", "1", "--priority", "0",
                 "--timeout", "9").output.strip()
    job = q.fetch_job(job_id)
    assert job is not None and (job.timeout, job.priority) == (9.0, 0)
    line = '{"func": "tests.defaults_jobs:always_retries"}\n'
    cli("enqueue", "q", "--from-file", "-", input=line)
    [job] = [j for j in q.jobs() if j.func.endswith(":always_retries")]
    assert job.max_retries == 3


def test_enqueue_from_file_takes_the_rq_options(cli: Run, r: Any, settings: Any) -> None:
    q = Queue("q", r, settings=settings)
    line = ('{"func": "tests.jobs:add", "args": [1, 2], "options": {"ttl": 60, "at_front": true, '
            '"result_ttl": -1, "failure_ttl": 90, "retry": {"max": 2, "interval": [5, 10]}}}\n')
    cli("enqueue", "q", "--from-file", "-", input=line)
    [job] = q.jobs()
    assert (job.ttl, job.result_ttl, job.failure_ttl) == (60.0, -1, 90)
    assert (job.max_retries, job.retry_intervals) == (2, [5.0, 10.0])


def test_enqueue_finds_the_job_module_in_the_current_folder(
        cli: Run, r: Any, settings: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"fw_project_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from fusionworker import job\n\n\n@job(max_retries=2)\ndef send(to):\n    return to\n",
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))   # the CLI puts the folder in front
    monkeypatch.delitem(sys.modules, name, raising=False)
    env = {"FUSIONWORKER_ALLOWED_MODULES": name}
    job_id = cli("enqueue", "q", f"{name}:send", "a", env_extra=env).output.strip()
    job = Queue("q", r, settings=settings).fetch_job(job_id)
    assert job is not None and job.max_retries == 2
    result = cli("enqueue", "q", f"{name}:nosuch", "a", env_extra=env, code=1)
    assert "nosuch" in result.output
    sys.modules.pop(name, None)


def test_job_hold_and_release(cli, queue):
    """Issue 34: `job hold` sets a queued job aside (listed as held), `job release`
    gives it back its place; bad input is one line and changes nothing."""
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    assert cli("job", "hold", job.id).output == f"Held {job.id} on default\n"
    assert job.id[:8] in cli("job", "list", "--status", "held").output
    assert "no job 'nope'" in cli("job", "hold", "nope", code=1).output
    assert cli("job", "release", job.id).output == f"Released {job.id} on default (queued)\n"
    assert "is queued, not held" in cli("job", "release", job.id, code=1).output
    assert q.fetch_job(job.id).status == "queued"


def test_info_shows_one_page_of_queues(cli: Run, queue: Any) -> None:
    for n in range(12):
        queue(f"pg{n:02d}").enqueue("tests.jobs:noop")
    doc = json.loads(cli("info", "--json", "--page", "2", "--per-page", "5").stdout)
    assert [q["queue"] for q in doc["queues"]] == [f"pg{n:02d}" for n in range(5, 10)]
    assert (doc["queues_total"], doc["page"], doc["per_page"], doc["pages"]) == (12, 2, 5, 3)
    out = cli("info", "--page", "3", "--per-page", "5").stdout
    assert "pg11" in out and "pg04" not in out and "page 3 of 3 (12 queue(s) in all" in out
    assert len(json.loads(cli("info", "--json").stdout)["queues"]) == 12
    cli("info", "--page", "0", code=2)


def test_info_text_shows_the_first_page_and_how_to_see_the_rest(cli: Run, queue: Any) -> None:
    """Issue 30: beyond 50 queues the text shows the first 50 and a hint line; --all
    shows every queue; the JSON keeps every queue; 50 or fewer: the screen of before."""
    for n in range(51):
        queue(f"pq{n:02d}").enqueue("tests.jobs:noop")
    out = cli("info", "-Q").stdout
    assert "pq49" in out and "pq50" not in out
    assert out.rstrip().splitlines()[-1] == (
        "(the first 50 of 51 queues, page 1 of 2: --page N for another, --all for every "
        "queue)")
    every = cli("info", "-Q", "--all").stdout
    assert "pq50" in every and "--all" not in every and "page" not in every
    assert "pq50" in cli("info", "-Q", "--page", "2").stdout
    assert len(json.loads(cli("info", "--json").stdout)["queues"]) == 51
    small = cli("info", "-Q", "--per-page", "60").stdout
    assert "pq50" in small and "--all" not in small and "page" not in small
    assert len(small.splitlines()) == len(every.splitlines())
    assert "exclude each other" in cli("info", "--all", "--page", "1", code=2).output
