"""``info`` shows the jobs waiting on dependencies (a DEFERRED column once a queue has
some; ``--json`` has ``deferred`` per queue)."""

from __future__ import annotations

import json

from tests.cli.test_cli import cli  # noqa: F401 - the fixture


def test_info_counts_deferred_jobs(cli, queue):  # noqa: F811
    q = queue()
    parent = q.enqueue_in(600, "tests.jobs:add", 1, 2)
    q.enqueue("tests.jobs:add", 3, 4, depends_on=parent)
    q.enqueue("tests.jobs:add", 5, 6, depends_on=parent)
    lines = cli("info", "-Q").output.splitlines()
    header = next(line for line in lines if line.startswith("QUEUE")).split()
    row = next(line for line in lines if line.startswith(q.name + " ")).split()
    assert row[header.index("DEFERRED")] == "2"
    shown = json.loads(cli("info", "--json").output)
    assert next(x for x in shown["queues"] if x["queue"] == q.name)["deferred"] == 2


def test_a_cron_entry_due_this_instant_reads_due_now_not_a_negative_wait():
    """``info`` read "in -0.1s" for an entry whose run was due while the page was read."""
    from fusionworker.cli.admin import _cron_lines

    entry = {"name": "tick", "queue": "default", "schedule": "* * * * *", "timezone": "UTC",
             "paused": False, "last_run": None, "last_status": None, "last_job_status": None,
             "runs": 0, "skips": 0}
    due = "\n".join(_cron_lines([{**entry, "next_run": 99.9}], 100.0))
    later = "\n".join(_cron_lines([{**entry, "next_run": 160.0}], 100.0))
    assert "due now" in due and "in -" not in due
    assert "in 1m" in later or "in 60" in later
