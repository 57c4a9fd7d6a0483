"""Schedules registered like jobs: ``cron add --import`` (the current folder first, as
``worker`` and ``enqueue``), and schedules declared in code (``fusionworker.periodic``,
``fusionworker.schedule``) that workers register at start, once between them."""

from __future__ import annotations

import pytest

import fusionworker
from fusionworker.middleware import cron, schedules
from tests.cli.test_cli import cli  # noqa: F401 - the fixture
from tests.compat import rq_jobs

TASKS = '''
from fusionworker import job


@job(queue="reports")
def tick() -> str:
    return "tick"
'''


def test_cron_add_imports_from_the_current_folder(cli, tmp_path, monkeypatch, r,  # noqa: F811
                                                  settings):
    (tmp_path / "mytasks_cron.py").write_text(TASKS)
    monkeypatch.chdir(tmp_path)
    refused = cli("cron", "add", "t", "* * * * *", "mytasks_cron:tick", code=1)
    assert "neither a registered job function nor in an allowed module" in refused.output
    cli("cron", "add", "t", "* * * * *", "mytasks_cron:tick", "--import", "mytasks_cron")
    entry = cron.get_entry(r, settings, "t", "default")
    assert entry.func == "mytasks_cron:tick"


@pytest.fixture
def declared(monkeypatch):
    """A fresh declaration table: what a test declares goes with it."""
    monkeypatch.setattr(schedules, "_DECLARED", {})


def test_schedules_declared_in_code_are_registered_once_by_the_workers(declared, r, settings,
                                                                       work):
    handle = fusionworker.periodic("0 3 * * *", timezone="Europe/Berlin")(
        rq_jobs.nightly_report)
    fusionworker.schedule("daily-add", "0 4 * * *", "tests.jobs:add", args=[1, 2])
    assert handle.ref == "tests.compat.rq_jobs:nightly_report"
    work()                                          # a worker starts: it registers them
    nightly = cron.get_entry(r, settings, "nightly_report", "default")
    daily = cron.get_entry(r, settings, "daily-add", "default")
    assert (nightly.schedule, nightly.timezone) == ("0 3 * * *", "Europe/Berlin")
    assert (daily.func, daily.args) == ("tests.jobs:add", [1, 2])
    # another worker with the same code writes nothing: the next run does not move
    key = r.hget(f"{settings.prefix}:{{default}}:cron:daily-add", "next_run")
    assert schedules.ensure_declared(r, settings) == []
    work()
    assert r.hget(f"{settings.prefix}:{{default}}:cron:daily-add", "next_run") == key
    # a changed declaration replaces the entry
    fusionworker.schedule("daily-add", "30 4 * * *", "tests.jobs:add", args=[1, 2])
    assert schedules.ensure_declared(r, settings) == ["daily-add"]
    assert cron.get_entry(r, settings, "daily-add").schedule == "30 4 * * *"


def test_a_bad_declaration_raises_at_import(declared):
    with pytest.raises(cron.InvalidSchedule):
        fusionworker.schedule("bad", "61 * * * *", "tests.jobs:add")
    assert schedules.declared() == []


def test_a_schedule_no_live_worker_can_run_is_said_at_start(declared, work, caplog):
    """A schedule's runs are made by a worker of its queue: one declared on a queue that
    no live worker serves (a typo in ``queue=``, say) enqueues nothing, and the starting
    worker says so; one on a queue it serves is not named."""
    fusionworker.schedule("served", "0 4 * * *", "tests.jobs:add", args=[1, 2])
    fusionworker.schedule("orphan", "0 4 * * *", "tests.jobs:add", args=[1, 2],
                          queue="reprts")
    with caplog.at_level("WARNING", logger="fusionworker"):
        work()
    said = [rec.getMessage() for rec in caplog.records if "no live worker serves" in
            rec.getMessage()]
    assert said == ["Schedule 'orphan' enqueues on queue 'reprts', which no live worker "
                    "serves: its runs are made by a worker of that queue, so none is made yet"]


@pytest.mark.parametrize(("every", "says"), [
    (30, "'* * * * * */30' for every 30 s"),
    (300.0, "'*/5 * * * *' for every 5 min"),
    (45, "(5 fields, minute hour day month weekday, or 6 with seconds last)"),
])
def test_an_interval_is_refused_with_the_cron_expression_of_its_period(declared, every, says):
    from datetime import timedelta
    for given in (every, timedelta(seconds=every)):
        with pytest.raises(cron.InvalidSchedule, match="is not a schedule here") as info:
            fusionworker.schedule("every", given, "tests.jobs:add")   # type: ignore[arg-type]
        assert says in str(info.value)
    assert schedules.declared() == []
