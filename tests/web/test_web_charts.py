"""The charts' history: outcomes of the event stream added up per queue and per
minute / 10 minutes, with duration percentiles, bounded in Redis; the API, the
page, and the dashboard's recorder thread. Real Redis, real worker runs."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core.keys import Keys
from fusionworker.events import EventsMiddleware, flush_default_sinks
from fusionworker.events import metrics_history as mh
from fusionworker.web import create_app
from tests.waiting import wait_for

TOKEN = "charts-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def add_events(r, prefix, queue, event, durations):
    stream = Keys(prefix).events
    for d in durations:
        r.xadd(stream, {"event": event, "queue": queue, "job_id": "x", "duration": repr(d)})


def test_counts_and_percentiles_from_the_stream(r, settings):
    prefix = settings.prefix
    add_events(r, prefix, "mail", "completed", [0.010] * 90 + [1.0] * 10)
    add_events(r, prefix, "mail", "failed", [0.5] * 4)
    add_events(r, prefix, "mail", "retry", [0.5] * 2)
    add_events(r, prefix, "sms", "completed", [0.002] * 5)
    r.xadd(Keys(prefix).events, {"event": "queued", "queue": "mail", "job_id": "y"})
    r.xadd(Keys(prefix).events, {"event": "completed", "queue": "bad name!", "job_id": "z"})
    assert mh.record_from_stream(r, prefix) == 113
    assert mh.record_from_stream(r, prefix) == 0          # the cursor moved on
    doc = mh.history(r, prefix, ["mail"], "hour")
    assert len(doc["rows"]) == 60 and doc["bucket_seconds"] == 60
    total = doc["total"]
    assert (total["finished"], total["failed"], total["retry"]) == (100, 4, 2)
    assert 10 / 1.19 <= total["p50"] <= 10 * 1.19
    assert 500 / 1.19 <= total["p95"] <= 1000 * 1.19
    assert 1000 / 1.19 <= total["p99"] <= 1000 * 1.19
    assert doc["rows"][-1]["finished"] + doc["rows"][-2]["finished"] == 100
    both = mh.history(r, prefix, ["mail", "sms"], "day")
    assert len(both["rows"]) == 144 and both["total"]["finished"] == 105
    # bounded: every history hash expires its retention after its own end
    keys = list(r.scan_iter(match=f"{prefix}:{{mail}}:hist:*"))
    assert keys and len(keys) <= 4
    for key in keys:
        resolution = int(key.split(":")[-2])
        assert 0 < r.ttl(key) <= mh.RESOLUTIONS[resolution] + resolution
    # a second reader waits for the lock holder
    r.set(f"{prefix}:hist:lock", "someone", px=5000)
    add_events(r, prefix, "mail", "completed", [0.01])
    assert mh.record_from_stream(r, prefix) == 0
    r.delete(f"{prefix}:hist:lock")
    assert mh.record_from_stream(r, prefix) == 1


def test_history_api_page_and_the_recorder_thread(r, settings, queue, burst):
    q = queue("default")
    for i in range(3):
        q.enqueue("tests.jobs:add", i, 1)
    q.enqueue_call("tests.jobs:boom", max_retries=0)
    app = create_app(settings.replace(web_token=TOKEN), r, history_interval=0.2)
    with TestClient(app) as client:
        burst("default", middleware=[EventsMiddleware()])
        flush_default_sinks(5)

        def counted():
            doc = client.get("/api/v1/history?range=hour", headers=BEARER).json()
            return doc if doc["total"]["finished"] == 3 and doc["total"]["failed"] == 1 else None

        doc = wait_for(counted, timeout=15, what="the recorder to count the outcomes")
        assert doc["total"]["p50"] is not None and doc["queue"] is None
        one = client.get("/api/v1/history?queue=default&range=day", headers=BEARER).json()
        assert one["total"]["finished"] == 3 and one["bucket_seconds"] == 600
        assert client.get("/api/v1/history?range=week", headers=BEARER).status_code == 400
        assert client.get("/api/v1/history?queue=nosuch", headers=BEARER).status_code == 404
        page = client.get("/charts", headers=BEARER)
        assert page.status_code == 200 and 'id="chart-durations"' in page.text
        row = page.text.split('<tr data-queue="default">', 1)[1].split("</tr>", 1)[0]
        assert 'data-label="finished">3<' in row and 'data-label="failed">1<' in row
    # the thread stopped with the app: new outcomes are not counted any more
    before = mh.history(r, settings.prefix, ["default"], "hour")["total"]["finished"]
    add_events(r, settings.prefix, "default", "completed", [0.01])
    time.sleep(0.6)
    assert mh.history(r, settings.prefix, ["default"], "hour")["total"]["finished"] == before
