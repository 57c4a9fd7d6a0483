"""A job that reports progress often keeps a page of bounded height: its timeline shows
the latest progress events and one row for the earlier ones."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from fusionworker.events import flush_default_sinks
from fusionworker.events.middleware import emit_job_event
from tests.web.test_web_pages import client, get  # noqa: F401 - the fixture


def test_the_timeline_bounds_progress_rows(client, queue, r, settings):  # noqa: F811
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2)
    for n in range(60):
        emit_job_event(settings, "progress", job, connection=r, progress=n / 60,
                       progress_message=f"row {n}")
    flush_default_sinks(5)
    page = get(client, f"/jobs/{job.id}?queue=default").text
    timeline = page[page.index('id="timeline"'):]
    assert timeline.count("status-progress") == 6            # 5 latest + the summary row
    assert "55 earlier progress updates not shown" in timeline
    assert "row 59" in timeline and "row 10" not in timeline
    whole = get(client, f"/api/v1/jobs/{job.id}?queue=default").json()
    assert sum(e["event"] == "progress" for e in whole["events"]) == 60   # the API: all
