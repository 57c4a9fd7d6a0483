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
