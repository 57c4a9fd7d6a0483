"""The dashboard at many queues (issue #30, item 6): the overview, its polls, the
charts, ``/api/v1/queues`` and ``/api/v1/info`` are paged by queue name, the
charts of all queues read the recorder's sums, and the queues' stats are read in
a few pipelines whatever their number. Real Redis; the overview's polling in a
real Chromium."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.core.queue_read import stats_many
from fusionworker.events import flush_default_sinks
from fusionworker.events import metrics_history as mh
from fusionworker.web import create_app
from tests.web_support import SAME_SITE, browser_missing

TOKEN = "scale-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
COUNT = 120   # more than two pages of 50


@pytest.fixture
def many(r, settings):
    """COUNT queues ``q000``... with one job each (``q007`` paused, two jobs)."""
    for n in range(COUNT):
        Queue(f"q{n:03d}", r, settings=settings).enqueue("tests.jobs:add", n, 1)
    q = Queue("q007", r, settings=settings)
    q.enqueue("tests.jobs:add", 1, 1, priority=20)
    q.pause()
    return [f"q{n:03d}" for n in range(COUNT)]


@pytest.fixture
def client(r, settings):
    app = create_app(settings.replace(web_token=TOKEN), r, history_interval=None)
    with TestClient(app, headers={**SAME_SITE, **BEARER}) as c:
        yield c


def test_the_overview_shows_one_page_of_queues(client, many):
    first = client.get("/").text
    rows = re.findall(r'<tr data-queue="([^"]+)"', first)
    assert rows == many[:50]
    assert "queues 1–50 of 120 (page 1 of 3)" in first
    assert 'data-page="1" data-per-page="50"' in first and "(the queues of this page)" in first
    last = client.get("/?page=3").text
    assert re.findall(r'<tr data-queue="([^"]+)"', last) == many[100:]
    assert "queues 101–120 of 120" in last and 'rel="next"' not in last
    small = client.get("/?page=2&per_page=10").text
    assert re.findall(r'<tr data-queue="([^"]+)"', small) == many[10:20]
    assert client.get("/?page=0").status_code == 400


def test_api_queues_and_chart_take_a_page(client, many):
    doc = client.get("/api/v1/queues?page=2&per_page=50").json()
    assert [q["queue"] for q in doc["queues"]] == many[50:100]
    assert (doc["total"], doc["page"], doc["per_page"], doc["pages"]) == (120, 2, 50, 3)
    seven = client.get("/api/v1/queues?page=1&per_page=10").json()["queues"][7]
    assert seven["queue"] == "q007" and seven["paused"] and seven["pending"] == 2
    assert seven["bands"]["high"] == 1 and seven["oldest_age"] is not None
    whole = client.get("/api/v1/queues").json()   # no page asked: every queue, as before
    assert len(whole["queues"]) == 120 and whole["total"] == 120
    assert client.get("/api/v1/queues?per_page=501").status_code == 400
    chart = client.get("/api/v1/chart?minutes=5&page=3&per_page=50").json()
    assert len(chart["minutes"]) == 5


def test_stats_many_is_what_each_queue_s_stats_say(r, settings, many):
    q = Queue("q003", r, settings=settings)
    q.enqueue("tests.jobs:add", 1, 1, priority=-5)
    q.enqueue_in(3600, "tests.jobs:add", 1, 1)
    q.set_max_active(3)
    docs = stats_many(r, settings, ["q003", "q007", "q010", "never-used"], heartbeats=[])
    three, seven, ten, unused = docs
    assert three["pending"] == 2 and three["bands"] == {"high": 0, "normal": 1, "low": 1}
    assert three["scheduled"] == 1 and three["due"] == 0 and three["max_active"] == 3
    assert three["awaiting_compute"] == 2 and three["oldest_age"] >= 0
    assert seven["paused"] and seven["pending"] == 2 and seven["bands"]["high"] == 1
    assert seven["awaiting_compute"] == 0 and not ten["paused"] and ten["pending"] == 1
    assert unused["pending"] == 0 and unused["oldest_age"] is None
    assert unused["rate_limit"] is None and unused["group_rate_limit"] is None
    for doc in docs:   # what Queue.stats() answers, field for field
        one = Queue(doc["queue"], r, settings=settings).stats(heartbeats=[])
        assert {**doc, "oldest_age": 0} == {**one, "oldest_age": 0}
    assert stats_many(r, settings, []) == []


def test_api_info_takes_a_page(client, many):
    doc = client.get("/api/v1/info?page=3&per_page=50").json()
    assert [q["queue"] for q in doc["queues"]] == many[100:]
    assert doc["queues_total"] == 120 and doc["pages"] == 3
    assert all(q["last_hour"] == {"finished": 0, "failed": 0} for q in doc["queues"])
    assert len(client.get("/api/v1/info").json()["queues"]) == 120


def test_charts_page_the_queues_and_sum_all_of_them_from_the_recorder(r, settings, client,
                                                                       many):
    flush_default_sinks()   # the queued events of the enqueues are in the stream before
    stream = Keys(settings.prefix).events
    for name in many:
        r.xadd(stream, {"event": "completed", "queue": name, "job_id": "x",
                        "duration": "0.01"})
    assert mh.record_from_stream(r, settings.prefix) >= COUNT
    summed = mh.history(r, settings.prefix, None, "hour")
    assert summed["total"]["finished"] == COUNT
    assert mh.history(r, settings.prefix, many, "hour")["total"] == summed["total"]
    page = client.get("/charts?page=2").text
    assert re.findall(r'<tr data-queue="([^"]+)"', page) == many[50:100]
    assert "page 2 of 3 (120 queues)" in page
    assert "120 finished" in page   # the chart of all queues, from the sums
    assert client.get("/api/v1/history").json()["total"]["finished"] == COUNT


@pytest.mark.slow
@pytest.mark.skipif(browser_missing() is not None, reason="no browser")
def test_the_overview_polls_its_own_page(r, settings, driver, many):
    from selenium.webdriver.common.by import By

    from tests.web_support import dashboard, login, wait

    with dashboard(r, settings, driver, TOKEN, poll_interval=0.3) as base:
        login(driver, base, TOKEN)
        driver.get(base + "/?page=2")
        Queue("q060", r, settings=settings).enqueue("tests.jobs:add", 1, 2)
        wait(driver, lambda d: d.find_element(
            By.CSS_SELECTOR, '#queues tr[data-queue="q060"] [data-k="pending"]').text == "2")
        asked = driver.execute_script(
            "return performance.getEntriesByType('resource').map(function (e) {"
            " return e.name; });")
    polls = [u for u in asked if "/api/v1/queues" in u]
    assert polls and all("page=2&per_page=50" in u for u in polls)
    assert driver.execute_script("return document.body.getAttribute('data-stale');") is None


def test_search_by_function_looks_at_every_queue(client, many):
    found = client.get("/search?q=tests.jobs:add").text
    assert "looked at: 121 jobs" in found and "the first 100 shown" in found
    shown = re.findall(r'href="/jobs/[^"?]+\?queue=(q\d+)"', found)
    assert len(shown) == 100 and len(set(shown)) == 99   # q007 has two
