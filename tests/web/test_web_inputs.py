"""Bad input to the dashboard and its API is answered in one clear line naming what
is wrong (issue #30, item 4), never a 500 nor a redirect loop; ids and names holding
a "/" stay reachable. Starlette's TestClient on the real Redis."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core.keys import Keys
from fusionworker.middleware import cron
from fusionworker.web import create_app
from tests.web_support import SAME_SITE

TOKEN = "inputs-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(r, settings):
    app = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=False) as c:
        yield c


def one_line_400(answer, field: str) -> None:
    assert answer.status_code == 400, (answer.status_code, answer.text[:200])
    error = answer.json()["error"]
    assert field in error and "\n" not in error and len(error) < 200, error


def test_a_deep_json_body_is_refused_with_400(client, queue):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    for raw in (b"[" * 100_000, b'{"max_active": ' + b"[" * 40 + b"]" * 40 + b"}"):
        answer = client.put("/api/v1/queues/default/max-active", content=raw,
                            headers={"Content-Type": "application/json"})
        one_line_400(answer, "nests deeper than 32")
    # brackets inside strings do not count
    fine = client.put("/api/v1/queues/default/max-active",
                      json={"max_active": 3, "note": "[" * 100})
    assert fine.status_code == 200 and q.max_active == 3


@pytest.mark.parametrize("url,field", [
    ("/api/v1/jobs?queue=default&page=1e23", "page"),
    ("/api/v1/jobs?queue=default&page=100000000000000000000000", "page"),
    ("/api/v1/jobs?queue=default&status=failed&function=x&start=99999999999999999999999",
     "start"),
    ("/api/v1/failed?before=nan", "before"), ("/api/v1/failed?before=inf", "before"),
    ("/api/v1/failed?before=-1e308", "before"), ("/api/v1/batches?before=nan", "before"),
])
def test_query_values_out_of_range_are_400(client, queue, url, field):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    one_line_400(client.get(url), field)


def test_pages_answer_bad_values_with_their_error_page(client, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    assert client.get("/failed?before=nan").status_code == 400
    answer = client.get("/queues/default?page=100000000000000000000000", follow_redirects=False)
    assert answer.status_code == 303     # the page again, with the message and no filter
    assert "page+must+be" in answer.headers["location"]
    assert client.get(answer.headers["location"]).status_code == 200


@pytest.mark.parametrize("name", ["all", "a b", "x" * 300, "<b>"])
def test_an_invalid_queue_name_is_an_error_page_not_a_redirect_loop(client, name):
    answer = client.get(f"/queues/{name}", follow_redirects=False)
    assert answer.status_code == 400 and "invalid queue name" in answer.text


@pytest.mark.parametrize("body,field", [
    ({"name": "c", "schedule": "* * * * *", "func": 5}, "func"),
    ({"name": 5, "schedule": "* * * * *", "func": "tests.jobs:add"}, "name"),
    ({"name": "c", "schedule": ["* * * * *"], "func": "tests.jobs:add"}, "schedule"),
    ({"name": "c", "schedule": "* * * * *", "func": "tests.jobs:add", "queue": 7}, "queue"),
    ({"name": "c", "schedule": "* * * * *", "func": "tests.jobs:add", "timezone": {}},
     "timezone"),
    ({"name": "c", "schedule": "* * * * *", "func": "not a function"}, "function"),
    ({"name": "c/d", "schedule": "* * * * *", "func": "tests.jobs:add"}, "name"),
    ({"name": "c", "schedule": "* * * * *", "func": "tests.jobs:add", "priority": 1e30},
     "priority"),
])
def test_cron_bodies_of_the_wrong_type_are_400(client, r, settings, body, field):
    one_line_400(client.post("/api/v1/cron", json=body), field)
    assert cron.list_entries(r, settings.prefix, ["default"]) == []


def test_a_long_bad_value_is_cut_in_the_error(client, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    answer = client.put("/api/v1/queues/default/max-active",
                        json={"max_active": "9" * 5000 + "x"})
    one_line_400(answer, "max_active")


def test_a_job_id_with_a_slash_is_reachable(client, queue, r):
    """Such ids are refused at creation now; one made before (by an older version: the
    same record under the id, written here as that version wrote it) stays reachable."""
    q = queue("default")
    with pytest.raises(ValueError, match="cannot be addressed by URL"):
        q.enqueue_call("tests.jobs:add", [1, 2], job_id="made/before")
    q.enqueue_call("tests.jobs:add", [1, 2], job_id="made-before")
    record, pending = q.qkeys.job("made-before"), q.qkeys.pending
    r.rename(record, q.qkeys.job("made/before"))
    r.hset(q.qkeys.job("made/before"), "id", "made/before")
    r.zadd(pending, {"made/before": r.zscore(pending, "made-before")})
    r.zrem(pending, "made-before")
    assert q.fetch_job("made/before").id == "made/before"
    page = client.get("/queues/default")
    assert page.status_code == 200 and 'href="/jobs/made/before?queue=default"' in page.text
    assert client.get("/jobs/made/before?queue=default").status_code == 200
    assert client.get("/api/v1/jobs/made/before").json()["id"] == "made/before"
    live = client.get("/api/v1/jobs/made/before/live?queue=default")
    assert live.status_code == 200 and live.json()["changed"]
    assert client.put("/api/v1/jobs/made/before/priority?queue=default",
                      json={"priority": 9}).json()["priority"] == 9
    assert client.post("/api/v1/jobs/made/before/cancel").json()["status"] == "canceled"
    assert client.delete("/api/v1/jobs/made/before").json()["deleted"] == "made/before"
    assert client.get("/api/v1/jobs/made/before").status_code == 404


def test_a_cron_name_with_a_slash_is_reachable(client, r, settings):
    """Such names are refused at creation now; one an older version stored (the same
    entry under that name, moved here as that version wrote it) stays reachable."""
    with pytest.raises(ValueError, match="cannot be addressed by URL"):
        cron.register(r, settings, "made/before", "0 3 * * *", "tests.jobs:add", [1, 2])
    entry = cron.register(r, settings, "made-before", "0 3 * * *", "tests.jobs:add", [1, 2])
    k = Keys(settings.prefix).queue(entry.queue)
    r.rename(k.cron_entry("made-before"), k.cron_entry("made/before"))
    r.hset(k.cron_entry("made/before"), "name", "made/before")
    r.zadd(k.cron, {"made/before": r.zscore(k.cron, "made-before")})
    r.zrem(k.cron, "made-before")
    assert cron.get_entry(r, settings, "made/before").name == "made/before"
    assert client.post("/api/v1/cron/made/before/pause").json()["action"] == "pause"
    assert cron.get_entry(r, settings, "made/before").paused
    assert client.post("/api/v1/cron/made/before/resume").json()["action"] == "resume"
    assert client.delete("/api/v1/cron/made/before").status_code == 200
    assert client.post("/api/v1/cron/made/before/pause").status_code == 404
