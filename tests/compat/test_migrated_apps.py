"""A small RQ app and a small Celery app, written as their users write them
(``tests/compat/apps/``), run on a real worker after the changes the migration docs
name, and nothing in them silently different: each result, retry, stop and option
is checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusionworker.core.job import JobStatus
from tests.compat.apps import celery_app, rq_app
from tests.waiting import wait_for

DOCS = Path(__file__).resolve().parents[2] / "docs"


def migrated(text: str, changes: list[tuple[str, str]]) -> str:
    """``text`` with each change made where it applies."""
    for before, after in changes:
        text = text.replace(before, after)
    return text


@pytest.mark.parametrize("app", [rq_app, celery_app])
def test_every_change_applies_to_the_app(app):
    for before, _ in app.CHANGES:
        assert before in app.TASKS or before in app.PRODUCER, before


@pytest.mark.parametrize(("app", "doc"), [(rq_app, "from-rq.md"), (celery_app, "from-celery.md")])
def test_the_changes_are_the_ones_the_migration_doc_names(app, doc):
    text = (DOCS / doc).read_text()
    for before, after in app.CHANGES:
        named = [part.strip() for part in (before, after) if part.strip()]
        for part in named:       # each side, or its first word, appears in the doc
            key = part.split("(")[0].split(" import ")[-1].split(",")[0].strip()
            assert key in text, (doc, key)


@pytest.fixture
def app_env(tmp_path, monkeypatch, settings, redis_url):
    """The app's folder on the path; the environment its processes read."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FUSIONWORKER_PREFIX", settings.prefix)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("FUSIONWORKER_ALLOWED_MODULES", "tasks")   # default deny (docs)
    monkeypatch.delitem(__import__("sys").modules, "tasks", raising=False)
    yield tmp_path
    __import__("sys").modules.pop("tasks", None)


def test_the_rq_app_runs_after_its_one_line_changes(app_env, processes, redis_url, r,
                                                    settings):
    (app_env / "tasks.py").write_text(rq_app.TASKS)
    processes.worker("default", "--path", str(app_env),
                     env={"FUSIONWORKER_ALLOWED_MODULES": "tasks"})
    space = {"REDIS_URL": redis_url, "MARKER": str(app_env / "flaky.marker")}
    exec(compile(migrated(rq_app.PRODUCER, rq_app.CHANGES), "producer.py", "exec"), space)
    words, retried, later, running = (space[n] for n in ("words", "retried", "later",
                                                         "running"))
    job_class = space["Job"]
    assert words.timeout == 30 and words.result_ttl == 3600 and running.timeout == 300
    assert job_class.fetch(words.id, connection=space["redis"]).wait(timeout=60).result == 6
    assert retried.wait(timeout=60).return_value() == "second run works"
    assert retried.attempts == 2                       # RQ's Retry retried the ValueError
    assert later.wait(timeout=60).result == 2
    wait_for(lambda: running.get_status() == JobStatus.STARTED, what="the slow job ran")
    space["send_stop_job_command"](space["redis"], running.id)
    wait_for(lambda: running.get_status() == JobStatus.STOPPED, what="stopped")
    callback = wait_for(lambda: space["q"].fetch_job(f"{running.id}:on_stopped"))
    assert callback.wait(timeout=60).result == 1       # count_words(job id): one word


def test_the_celery_app_runs_after_its_one_line_changes(app_env, processes, redis_url):
    (app_env / "tasks.py").write_text(
        "REDIS_URL = None\n" + migrated(celery_app.TASKS, celery_app.CHANGES))
    processes.worker("--import", "tasks", "--path", str(app_env))
    space = {"MARKER": str(app_env / "lookup.marker")}
    exec(compile(migrated(celery_app.PRODUCER, celery_app.CHANGES), "producer.py", "exec"),
         space)
    assert space["total"] == 5
    assert space["found"] == "found"                     # autoretry_for: retried once
    forgotten = space["forgotten"]
    assert forgotten.result_ttl == 0                     # ignore_result=True
    wait_for(lambda: forgotten.queue and not forgotten._queue.connection.exists(
        forgotten._queue.qkeys.job(forgotten.id)), what="the result not kept")
