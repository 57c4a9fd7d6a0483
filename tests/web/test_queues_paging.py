"""``GET /api/v1/queues`` at thousands of queues: every queue while there are at most
500 (the answer of before), beyond that the first page of 500 and where the next is;
following the pages lists every queue exactly once. Real Redis."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.web import create_app
from fusionworker.web.service import QUEUES_UNPAGED
from tests.web_support import SAME_SITE

TOKEN = "paging-token"


@pytest.fixture
def client(r, settings):
    app = create_app(settings.replace(web_token=TOKEN), r, history_interval=None)
    with TestClient(app, headers={**SAME_SITE, "Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def tenants(r, settings, count: int) -> list[str]:
    """``count`` known queues (a tenant's each), every 97th with a job."""
    names = [f"tenant{n:05d}" for n in range(count)]
    r.sadd(Keys(settings.prefix).queues, *names)
    for name in names[::97]:
        Queue(name, r, settings=settings, events=False).enqueue("tests.jobs:add", 1, 1)
    return sorted(names)


def walk(client, first: str) -> tuple[list[str], int]:
    """Every queue name met following ``next_page`` from ``first``; the pages read."""
    seen: list[str] = []
    url: str | None = first
    pages = 0
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        seen += [q["queue"] for q in doc["queues"]]
        pages += 1
        link = answer.headers.get("link")
        if doc["next_page"] is None:
            assert link is None
            url = None
        else:
            found = re.fullmatch(r"<([^>]+)>; rel=\"next\"", link or "")
            assert found, link
            url = found.group(1)
            assert f"page={doc['next_page']}&" in url
        assert pages <= 1000
    return seen, pages


def test_up_to_500_queues_come_whole_as_before(r, settings, client):
    names = tenants(r, settings, QUEUES_UNPAGED)
    answer = client.get("/api/v1/queues")
    doc = answer.json()
    assert set(doc) == {"queues", "suspended", "total"} and "link" not in answer.headers
    assert [q["queue"] for q in doc["queues"]] == names and doc["total"] == len(names)


def test_pages_cover_every_queue_exactly_once(r, settings, client):
    names = tenants(r, settings, QUEUES_UNPAGED * 2 + 37)
    doc = client.get("/api/v1/queues").json()   # nothing asked: the first page of 500
    assert len(doc["queues"]) == QUEUES_UNPAGED and doc["total"] == len(names)
    assert (doc["page"], doc["per_page"], doc["pages"], doc["next_page"]) == (1, 500, 3, 2)
    seen, pages = walk(client, "/api/v1/queues")
    assert seen == names and pages == 3
    seen, pages = walk(client, "/api/v1/queues?page=1&per_page=77")
    assert seen == names and pages == -(-len(names) // 77)
    busy = {q["queue"]: q["pending"] for q in client.get(
        "/api/v1/queues?page=1&per_page=500").json()["queues"]}
    assert busy["tenant00097"] == 1 and busy["tenant00098"] == 0
    last = client.get("/api/v1/queues?page=99&per_page=500").json()
    assert last["queues"] == [] and last["next_page"] is None


def test_the_overview_and_the_api_find_queues_by_a_part_of_their_name(r, settings, client):
    names = tenants(r, settings, 120)
    page = client.get("/?match=NT0004&per_page=5").text   # any case
    rows = re.findall(r'<tr data-queue="([^"]+)"', page)
    assert rows == [n for n in names if "nt0004" in n][:5]
    assert 'data-match="NT0004"' in page and "queues 1–5 of 10 (page 1 of 2)" in page
    assert '/?page=2&amp;per_page=5&amp;match=NT0004" rel="next"' in page
    doc = client.get("/api/v1/queues?match=0011").json()
    assert [q["queue"] for q in doc["queues"]] == ["tenant00011", "tenant00110", "tenant00111",
                                                   "tenant00112", "tenant00113", "tenant00114",
                                                   "tenant00115", "tenant00116", "tenant00117",
                                                   "tenant00118", "tenant00119"]
    assert doc["total"] == 11 and doc["match"] == "0011"
    seen, _ = walk(client, "/api/v1/queues?match=tenant000&per_page=4")
    assert seen == names[:100]
    nothing = client.get("/?match=nobody").text
    assert "No queue name holds “nobody”." in nothing
    assert client.get("/api/v1/queues?match=" + "x" * 201).status_code == 400


def test_the_overview_of_a_match_polls_that_match(r, settings, driver):
    from selenium.webdriver.common.by import By

    from tests.web_support import dashboard, login, wait

    tenants(r, settings, 120)
    with dashboard(r, settings, driver, TOKEN, poll_interval=0.3) as base:
        login(driver, base, TOKEN)
        driver.get(base + "/?match=tenant0006")
        Queue("tenant00061", r, settings=settings).enqueue("tests.jobs:add", 1, 2)
        wait(driver, lambda d: d.find_element(
            By.CSS_SELECTOR, '#queues tr[data-queue="tenant00061"] [data-k="pending"]'
        ).text == "1")
        rows = [e.get_attribute("data-queue")
                for e in driver.find_elements(By.CSS_SELECTOR, "#queues tr[data-queue]")]
        asked = driver.execute_script(
            "return performance.getEntriesByType('resource').map(function (e) {"
            " return e.name; });")
    assert rows == [f"tenant0006{n}" for n in range(10)]
    polls = [u for u in asked if "/api/v1/queues" in u]
    assert polls and all("match=tenant0006" in u for u in polls)
