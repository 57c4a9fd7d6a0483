"""RQ's tests/test_cli.py, case by case, with the ``fusionworker`` command (see
docs/from-rq.md for the options done differently)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from fusionworker import admin
from fusionworker.core.queue import Queue
from tests.cli.test_cli import cli, one_error_line  # noqa: F401 - the fixture

HELLO = "tests.compat.rq_jobs:say_hello"


def _ids(text: str) -> list[str]:
    return re.findall(r"[0-9a-f]{32}", text)


def test_config_file_and_flags_over_it(cli, r, settings, tmp_path: Path):  # noqa: F811
    conf = tmp_path / "fusionworker.env"
    conf.write_text(f"REDIS_URL={settings.redis_url}\nFUSIONWORKER_PREFIX={settings.prefix}\n")
    Queue("fromconf", r, settings=settings).enqueue(HELLO)
    no_env = {"REDIS_URL": None, "FUSIONWORKER_PREFIX": None}
    assert "fromconf" in cli("-c", str(conf), "queue", "list", env_extra=no_env).output
    other = cli("-c", str(conf), "--prefix", "elsewhere", "queue", "list", env_extra=no_env)
    assert "fromconf" not in other.output                   # the flag wins over the file


def test_config_from_environment_variables(cli, r, settings):  # noqa: F811
    Queue("fromenv", r, settings=settings).enqueue(HELLO)
    assert "fromenv" in cli("queue", "list").output       # REDIS_URL, FUSIONWORKER_PREFIX


def test_empty(cli, r, settings):  # noqa: F811
    q = Queue("default", r, settings=settings)
    for _ in range(3):
        q.enqueue(HELLO)
    cli("queue", "empty", "default", "--yes")
    assert q.count == 0


def test_requeue_all(cli, queue, work):  # noqa: F811
    q = queue()
    jobs = [q.enqueue("tests.jobs:boom") for _ in range(2)]
    work()
    assert q.failed_job_registry.count == 2
    assert cli("requeue", "--all").stdout.strip() == "Requeued 2 job(s)"
    assert sorted(q.get_job_ids()) == sorted(j.id for j in jobs)


def test_info_only_queues_and_only_workers(cli, r, settings):  # noqa: F811
    Queue("infoq", r, settings=settings).enqueue(HELLO)
    full = cli("info").output
    assert "infoq" in full
    only_queues = cli("info", "-Q").output
    assert "infoq" in only_queues
    only_workers = cli("info", "-W").output
    assert "infoq" not in only_workers


def test_worker_burst_short_and_long(cli, r, settings):  # noqa: F811
    q = Queue("default", r, settings=settings)
    for flag in ("-b", "--burst"):
        job = q.enqueue(HELLO)
        cli("worker", "-q", "default", flag, "-u", settings.redis_url)
        assert job.get_status() == "finished", flag


def test_worker_runs_scheduled_jobs_without_a_scheduler_flag(cli, r, settings):  # noqa: F811
    """RQ needs ``--with-scheduler``; here every worker promotes due jobs."""
    q = Queue("default", r, settings=settings)
    job = q.enqueue_in(0.2, HELLO)
    assert job.get_status() == "scheduled"
    time.sleep(0.3)                     # due now: a burst worker does not wait for later
    cli("worker", "-q", "default", "-b")
    assert job.get_status() == "finished"


def test_suspend_and_resume(cli, r, settings):  # noqa: F811
    cli("suspend")
    assert admin.suspended_for(r, settings.prefix) == -1.0
    cli("resume")
    assert admin.suspended_for(r, settings.prefix) is None
    cli("suspend", "--duration", "2")
    left = admin.suspended_for(r, settings.prefix)
    assert left is not None and 0 < left <= 2
    cli("resume")
    assert "--duration" in cli("suspend", "--duration", "0", code=2).stderr


def test_cli_enqueue(cli, r, settings):  # noqa: F811
    out = cli("enqueue", "default", HELLO).stdout
    [job_id] = _ids(out)
    q = Queue("default", r, settings=settings)
    assert q.get_job_ids() == [job_id]
    cli("worker", "-q", "default", "-b")
    assert q.fetch_job(job_id).return_value() == "Hi there, Stranger!"


def test_cli_enqueue_args(cli, r, settings):  # noqa: F811
    out = cli("enqueue", "default", "tests.jobs:echo", "hello", '[1, {"key": "value"}]',
              "--kwargs", json.dumps({"json": ["abc"], "nojson": "def"})).stdout
    job = Queue("default", r, settings=settings).fetch_job(_ids(out)[0])
    assert job.args == ["hello", [1, {"key": "value"}]]
    assert job.kwargs == {"json": ["abc"], "nojson": "def"}


def test_cli_enqueue_schedule_in(cli, r, settings):  # noqa: F811
    out = cli("enqueue", "default", HELLO, "--in", "60").stdout
    q = Queue("default", r, settings=settings)
    job = q.fetch_job(_ids(out)[0])
    assert job.get_status() == "scheduled" and job.id in q.scheduled_job_registry


def test_cli_enqueue_retry(cli, r, settings):  # noqa: F811
    out = cli("enqueue", "default", HELLO, "--max-retries", "3", "--retry-delay", "10").stdout
    job = Queue("default", r, settings=settings).fetch_job(_ids(out)[0])
    assert (job.max_retries, job.retry_delay) == (3, 10)


def test_cli_enqueue_errors(cli, r, settings):  # noqa: F811
    assert "Missing argument" in cli("enqueue", "default", code=2).stderr
    line = one_error_line(cli("enqueue", "default", "not_a_function", code=1))
    assert "not_a_function" in line
    line = one_error_line(cli("enqueue", "default", "os:system", "ls", code=1))
    assert "not allowed" in line or "neither a registered" in line
    assert "JSON object" in cli("enqueue", "default", HELLO, "--kwargs", "[1]", code=2).stderr
    assert Queue("default", r, settings=settings).count == 0


def test_worker_pool_burst_and_processes(cli, r, settings):  # noqa: F811
    """``rq worker-pool -b -n 3`` is ``worker --processes 3 --burst`` here."""
    q = Queue("pool", r, settings=settings)
    jobs = [q.enqueue(HELLO) for _ in range(4)]
    cli("worker", "-q", "pool", "--processes", "2", "-b")
    assert all(j.get_status() == "finished" for j in jobs)
