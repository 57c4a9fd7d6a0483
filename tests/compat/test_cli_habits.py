"""The command line as RQ users type it: -u/--url, positional queues, one meaning per
short flag, ``enqueue`` from a project folder, and clear answers for unknown names."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import click
import pytest

from fusionworker.cli import main
from fusionworker.cli.common import METAVARS
from fusionworker.core.queue import Queue
from tests.cli.test_cli import cli, one_error_line  # noqa: F401 - the fixture


def test_url_short_and_long_on_any_command(cli, r, settings):  # noqa: F811
    Queue("uq", r, settings=settings).enqueue("tests.jobs:noop")
    env = {"REDIS_URL": "redis://127.0.0.1:1/0"}        # the environment names a dead one
    for flag in ("-u", "--url", "--redis-url"):
        assert "uq" in cli("queue", "list", flag, settings.redis_url, env_extra=env).output
        assert "uq" in cli(flag, settings.redis_url, "queue", "list", env_extra=env).output
    cli("worker", "-q", "uq", "--burst", "-u", settings.redis_url, env_extra=env)
    assert Queue("uq", r, settings=settings).count == 0


def test_q_list_is_round_robin_and_says_so(cli, r, settings):  # noqa: F811
    text = cli("worker", "--help").output
    assert "ROUND-ROBIN" in text and "STRICT" in text
    a, b = Queue("a", r, settings=settings), Queue("b", r, settings=settings)
    for _ in range(2):
        a.enqueue("tests.jobs:noop")
        b.enqueue("tests.jobs:noop")
    cli("worker", "-q", "a,b", "--burst")
    assert a.count == b.count == 0


def _fill_three_queues(r: Any, settings: Any, key: str) -> None:
    """Two jobs in each of low, default, high (enqueued in that order), each
    recording its queue's name when it runs."""
    for name in ("low", "default", "high"):
        q = Queue(name, r, settings=settings)
        for _ in range(2):
            q.enqueue("tests.jobs:record", settings.redis_url, key, name)


def test_positional_queues_are_served_in_strict_order(cli, r, settings):  # noqa: F811
    key = f"{settings.prefix}order"
    _fill_three_queues(r, settings, key)
    cli("worker", "high", "default", "low", "--burst")
    assert r.lrange(key, 0, -1) == ["high", "high", "default", "default", "low", "low"]
    r.delete(key)
    _fill_three_queues(r, settings, key)
    cli("worker", "-q", "high,default,low", "--burst")     # round-robin: interleaved
    assert r.lrange(key, 0, -1) == ["high", "default", "low"] * 2
    both = cli("worker", "high", "-q", "low", "--burst", code=2)
    assert "not both" in both.stderr
    weighted = cli("worker", "high:3", "--burst", code=2)
    assert "go with -q" in weighted.stderr


def test_short_n_means_a_count_everywhere(cli):  # noqa: F811
    result = cli("worker", "-n", "4", "--burst", code=2)
    assert "--processes N" in result.stderr
    both = cli("worker", "-n", "w1", "--name", "w2", "--burst", code=2)
    assert "not both" in both.stderr
    shorts: dict[str, set[str]] = {}

    def walk(command: click.Command) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                longs = [o for o in param.opts if o.startswith("--")]
                for short in (o for o in param.opts if len(o) == 2):
                    shorts.setdefault(short, set()).add(longs[0] if longs else short)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
    walk(main)
    assert shorts["-n"] == {"--limit"} and shorts["-q"] == {"--queue"}
    assert {s: ls for s, ls in shorts.items() if len(ls) > 1} == {}


def test_same_metavar_for_the_same_option_everywhere():
    seen: dict[str, set[str]] = {}

    def walk(command: click.Command) -> None:
        for param in command.params:
            if isinstance(param, click.Option):
                long = next((o for o in param.opts if o in METAVARS), None)
                if long is not None:
                    seen.setdefault(long, set()).add(str(param.metavar))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
    walk(main)
    assert {"--timeout", "--queue", "--priority", "--limit"} <= set(seen)
    assert {k: v for k, v in seen.items() if len(v) > 1 and k != "--queue"} == {}
    assert seen["--queue"] == {"QUEUE", "QUEUES"} and seen["--timeout"] == {"SECONDS"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A project folder, the current directory, whose package is on no import path."""
    package = f"proj{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "tasks.py").write_text(textwrap.dedent("""\
        from fusionworker import job

        def send(to):
            return to

        @job(queue="mail")
        def registered_send(to):
            return to
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return package


def test_enqueue_imports_from_the_current_folder_and_refuses_a_missing_function(
        cli, r, settings, project):  # noqa: F811
    env = {"FUSIONWORKER_ALLOWED_MODULES": project}
    result = cli("enqueue", "mail", f"{project}.tasks:nosuch", "x", env_extra=env, code=1)
    assert "no attribute 'nosuch'" in one_error_line(result)
    q = Queue("mail", r, settings=settings)
    assert q.count == 0
    out = cli("enqueue", "mail", f"{project}.tasks:send", "x", env_extra=env).stdout
    assert q.get_job_ids() == [out.strip()]


def test_enqueue_import_flag_registers_job_functions(cli, r, settings, project):  # noqa: F811
    ref = f"{project}.tasks:registered_send"
    env = {"FUSIONWORKER_ALLOWED_MODULES": ""}
    refused = cli("enqueue", "mail", ref, env_extra=env, code=1)
    assert "registered job function" in refused.stderr
    # the module is importable here but was not named: the refusal says what to add
    assert one_error_line(refused).endswith(
        f"(here: add --import {project}.tasks if 'registered_send' is one of its @job "
        f"functions; else allow the module: FUSIONWORKER_ALLOWED_MODULES={project})")
    typo = cli("enqueue", "mail", ref + "x", "--import", f"{project}.tasks", env_extra=env,
               code=1)
    assert one_error_line(typo).endswith(
        f"(module {project}.tasks has no @job function 'registered_sendx'; "
        "its @job functions: registered_send)")
    out = cli("enqueue", "mail", ref, "--import", f"{project}.tasks", env_extra=env).stdout
    assert Queue("mail", r, settings=settings).get_job_ids() == [out.strip()]
    bad = cli("enqueue", "mail", ref, "--import", "nosuchmodule_x", env_extra=env, code=1)
    assert "cannot import 'nosuchmodule_x'" in bad.stderr


def test_enqueue_warns_when_the_module_is_not_here(cli, r, settings):  # noqa: F811
    result = cli("enqueue", "q", "elsewhere_mod.tasks:run",
                 env_extra={"FUSIONWORKER_ALLOWED_MODULES": "elsewhere_mod"})
    assert "cannot be imported here" in result.stderr and "only the name" in result.stderr
    assert Queue("q", r, settings=settings).count == 1


def test_health_names_an_unknown_queue(cli, queue: Any):  # noqa: F811
    queue("sms").enqueue("tests.jobs:noop")
    line = one_error_line(cli("health", "-q", "nosuch", code=1))
    assert line == "unhealthy: unknown queue 'nosuch' (known: sms)"


def test_events_of_an_unknown_job_say_so(cli, queue: Any):  # noqa: F811
    job = queue().enqueue("tests.jobs:noop")
    assert "no job 'nosuch'" in one_error_line(cli("events", "--job", "nosuch", code=1))
    cli("events", "--job", job.id)                    # a known job without events: no error


def test_requeue_of_an_unknown_id_prints_only_the_error(cli):  # noqa: F811
    result = cli("requeue", "nosuch", code=1)
    assert result.stdout == ""
    assert "no job 'nosuch'" in one_error_line(result)


def test_rq_info_with_queue_names_and_commands_spelled_otherwise(cli, r, settings):  # noqa: F811
    """``rq info Q1 Q2`` (those queues and their workers) was "unexpected extra
    argument"; ``rq empty Q`` (and Celery's ``purge``) was "No such command" alone."""
    import json

    for name in ("iq1", "iq2", "iq3"):
        Queue(name, r, settings=settings).enqueue("tests.jobs:noop")
    doc = json.loads(cli("info", "iq1", "iq3", "--json").output)
    assert [q["queue"] for q in doc["queues"]] == ["iq1", "iq3"]
    assert "iq2" not in cli("info", "iq1", "iq3").output
    assert "no queue 'nope'" in one_error_line(cli("info", "nope", code=1))
    for rq_name, ours in (("empty", "queue empty QUEUE"), ("worker-pool", "--processes N"),
                          ("purge", "queue empty QUEUE")):
        said = cli(rq_name, "iq1", code=2).output
        assert f"No such command {rq_name!r}" in said and ours in said, said
