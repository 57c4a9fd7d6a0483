"""CLI consistency (issue 12, item C): global options after the subcommand, one name
per idea, a settings table of flags that exist, metrics bound to 127.0.0.1 by default."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fusionworker.cli import main
from fusionworker.core.config import SETTINGS, load_settings, settings_table
from fusionworker.core.queue import Queue
from fusionworker.middleware.metrics import MetricsMiddleware
from fusionworker.worker import default_middleware
from tests.cli.test_cli import cli  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]


def test_global_options_after_the_subcommand(cli, r, settings):  # noqa: F811
    q = Queue("gq", r, settings=settings, events=False)
    q.enqueue("tests.jobs:noop")
    # the env names an unreachable Redis and another prefix: the flags after the command win
    env = {"REDIS_URL": "redis://127.0.0.1:1/0", "FUSIONWORKER_PREFIX": "nothing-here"}
    out = cli("queue", "list", "--json", "--redis-url", settings.redis_url,
              "--prefix", settings.prefix, "--log-level", "ERROR", env_extra=env).output
    assert "gq" in out
    cli("worker", "-q", "gq", "--burst", "--redis-url", settings.redis_url,
        f"--prefix={settings.prefix}", "--log-level", "WARNING", env_extra=env)
    assert q.count == 0
    # before the command still works
    assert "gq" in cli("--redis-url", settings.redis_url, "--prefix", settings.prefix,
                       "queue", "list", "--json", env_extra=env).output


def test_a_subcommand_argument_after_double_dash_is_not_moved(cli, r, settings):  # noqa: F811
    out = cli("enqueue", "dd", "tests.jobs:echo", "--", "--prefix", "x").output
    job_id = re.search(r"[0-9a-f]{32}", out).group(0)
    job = Queue("dd", r, settings=settings, events=False).fetch_job(job_id)
    assert job.args == ["--prefix", "x"]


def test_one_name_per_idea_old_spellings_still_work(cli, r, settings):  # noqa: F811
    q = Queue("one", r, settings=settings, events=False)
    for spelling in ("--queue", "--queues", "--customq", "-q"):
        q.enqueue("tests.jobs:noop")
        cli("worker", spelling, "one", "--burst")
        assert q.count == 0, spelling
    j = q.enqueue("tests.jobs:noop")
    for spelling in (["-q", "one"], ["--queue", "one"]):
        lines = cli("events", *spelling, "-n", "5", "--json").output.splitlines()
        assert all(json.loads(x)["queue"] == "one" for x in lines)
    assert j.id


def test_settings_table_lists_only_flags_that_exist():
    existing = set()
    for command in (main, main.commands["worker"]):
        for param in command.params:
            existing.update(getattr(param, "opts", ()))
    flags = {s.flag for s in SETTINGS if s.flag}
    assert flags and flags <= existing, flags - existing
    readme = (ROOT / "README.md").read_text()
    assert settings_table().strip() in readme


def test_metrics_listen_on_loopback_by_default(settings):
    s = load_settings(environ={}, metrics_port=9999)
    [mw] = [m for m in default_middleware(s) if isinstance(m, MetricsMiddleware)]
    assert mw.addr == "127.0.0.1"
    s = load_settings(environ={"FUSIONWORKER_METRICS_BIND": "0.0.0.0"}, metrics_port=9999)
    [mw] = [m for m in default_middleware(s) if isinstance(m, MetricsMiddleware)]
    assert mw.addr == "0.0.0.0"
    exporter = {p.name: p for p in main.commands["exporter"].params}
    assert exporter["addr"].default == "127.0.0.1"
    assert {"--bind", "--addr"} <= set(exporter["addr"].opts)


def test_cron_add_warns_when_no_worker_serves_the_queue(cli, r, settings):  # noqa: F811
    from fusionworker.worker import Worker

    res = cli("cron", "add", "nightly", "0 3 * * *", "tests.jobs:noop", "-q", "lonely")
    assert "warning: no live worker serves queue 'lonely'" in res.stderr
    w = Worker("lonely", r, settings=settings, burst=True, defaults=False, middleware=[])
    w.register()                               # a live worker on the queue: no warning
    try:
        res = cli("cron", "add", "nightly", "0 3 * * *", "tests.jobs:noop", "-q", "lonely")
        assert "warning" not in res.stderr
    finally:
        w.deregister()


def test_queue_delete_forgets_a_queue(cli, r, settings):  # noqa: F811
    from fusionworker.core.queue import known_queues
    from fusionworker.middleware import cron as cron_api
    from tests.middleware.test_reaper import claim

    q = Queue("gone", r, settings=settings, events=False)
    q.enqueue("tests.jobs:noop")
    q.enqueue_in(3600, "tests.jobs:noop")
    cron_api.register(r, settings, "nightly", "0 3 * * *", "tests.jobs:noop", queue="gone")
    other = Queue("stays", r, settings=settings, events=False)
    kept = other.enqueue("tests.jobs:noop")
    res = cli("queue", "delete", "gone", input="n\n", code=1)   # asks; "no" keeps everything
    assert "holds 2 job(s)" in res.stderr
    assert "gone" in known_queues(r, settings.prefix) and q.count == 1
    assert not q.is_paused
    running = q.enqueue("tests.jobs:noop", priority=9)
    claim(q, lease=30.0)                                        # a job of it runs: refused
    res = cli("queue", "delete", "gone", "--yes", code=1)
    assert "running job" in res.output + res.stderr and q.fetch_job(running.id)
    assert not q.is_paused                                   # the refusal undid its pause
    r.delete(q.qkeys.started)
    cli("queue", "delete", "gone", "--yes")
    assert "gone" not in known_queues(r, settings.prefix)
    assert list(r.scan_iter(match=f"{q.qkeys.base}*")) == []
    assert other.fetch_job(kept.id) is not None                # another queue untouched
    res = cli("queue", "delete", "gone", "--yes", code=1)       # unknown now
    assert "no queue 'gone'" in res.output + res.stderr
