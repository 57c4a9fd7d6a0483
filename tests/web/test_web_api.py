"""The JSON admin API and the form actions of the dashboard, through Starlette's
TestClient, on the real Redis (a key prefix per test)."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from fusionworker.core import admin
from fusionworker.events import flush_default_sinks, last_events
from fusionworker.middleware import cron
from fusionworker.web import create_app
from fusionworker.web.auth import hash_password, verify_password
from tests.waiting import wait_for
from tests.web_support import SAME_SITE, form_login, page_csrf

TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def alive(proc: Any) -> bool:
    """A server process still runs (a wait for its answer fails at once if it exited)."""
    assert proc.poll() is None, f"the server exited with {proc.returncode}"
    return True


@pytest.fixture
def web_settings(settings):
    return settings.replace(web_token=TOKEN)


@pytest.fixture
def client(r, web_settings):
    with TestClient(create_app(web_settings, r), headers=SAME_SITE) as c:
        yield c


def api(client: TestClient, method: str, url: str, **kw: Any):
    return client.request(method, url, headers={**BEARER, **kw.pop("headers", {})}, **kw)


def failed_job(queue, burst, name="default"):
    q = queue(name)
    job = q.enqueue("tests.jobs:boom", "kaput")
    burst(name)
    assert q.fetch_job(job.id).status == "failed"
    return job


# -- auth -----------------------------------------------------------------------------------


ENDPOINTS = [
    ("GET", "/api/v1/queues"), ("GET", "/api/v1/workers"), ("GET", "/api/v1/info"),
    ("GET", "/api/v1/openapi.json"), ("GET", "/api/v1/jobs?queue=default"),
    ("GET", "/api/v1/jobs/x"), ("PUT", "/api/v1/jobs/x/priority"),
    ("POST", "/api/v1/jobs/x/requeue"), ("POST", "/api/v1/jobs/x/cancel"),
    ("POST", "/api/v1/jobs/x/stop"),
    ("DELETE", "/api/v1/jobs/x"), ("POST", "/api/v1/queues/default/requeue-failed"),
    ("POST", "/api/v1/queues/default/pause"), ("POST", "/api/v1/queues/default/unpause"),
    ("PUT", "/api/v1/queues/default/max-active"), ("POST", "/api/v1/suspend"),
    ("POST", "/api/v1/resume"), ("POST", "/api/v1/cron/c/pause"),
    ("POST", "/api/v1/cron/c/resume"), ("DELETE", "/api/v1/cron/c"),
    ("GET", "/api/v1/chart"), ("GET", "/api/v1/cron"),
    ("POST", "/api/v1/jobs/x/run-now"), ("PUT", "/api/v1/queues/default/rate-limit"),
    ("POST", "/api/v1/cron"), ("POST", "/api/v1/cron/c/run"), ("GET", "/api/v1/failed"),
    ("GET", "/api/v1/scheduled"), ("GET", "/api/v1/batches"), ("GET", "/api/v1/batches/x"),
    ("GET", "/api/v1/workers/x"), ("GET", "/api/v1/jobs/x/live"),
    ("GET", "/api/v1/queues/default/live"), ("GET", "/api/v1/history"),
    ("POST", "/api/v1/jobs/x/hold"), ("POST", "/api/v1/jobs/x/release"),
    ("POST", "/api/v1/workers/x/shutdown"),
]


@pytest.mark.parametrize("method,url", ENDPOINTS)
def test_every_endpoint_refuses_without_or_with_a_wrong_token(client, method, url, r, settings):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
        answer = client.request(method, url, headers=headers)
        assert answer.status_code == 401, (url, headers)
        assert "authentication required" in answer.json()["error"]
    assert not admin.is_suspended(r, settings.prefix)


def test_pages_redirect_to_login_without_auth_and_show_after_login(client, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    answer = client.get("/", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
    assert client.get("/api/v1/queues").status_code == 401
    form = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text).group(1)
    bad = client.post("/login", data={"token": "nope", "next": "/", "csrf": form},
                      follow_redirects=False)
    assert bad.status_code == 401 and "wrong token" in bad.text
    good = client.post("/login", data={"token": TOKEN, "next": "/", "csrf": form},
                       follow_redirects=False)
    assert good.status_code == 303
    page = client.get("/")
    assert page.status_code == 200 and 'data-queue="default"' in page.text
    assert client.get("/api/v1/queues").json()["queues"][0]["queue"] == "default"
    client.post("/logout", data={"csrf": page_csrf(page.text)})
    assert client.get("/api/v1/queues").status_code == 401


def test_basic_auth_with_password_hash(r, settings):
    encoded = hash_password("hunter2", iterations=1000)
    assert verify_password("hunter2", encoded) and not verify_password("hunter3", encoded)
    assert not verify_password("hunter2", "garbage")
    app = create_app(settings.replace(web_user="ops", web_password_hash=encoded), r)
    with TestClient(app, headers=SAME_SITE) as c:
        good = base64.b64encode(b"ops:hunter2").decode()
        bad = base64.b64encode(b"ops:hunter3").decode()
        assert c.get("/api/v1/queues", headers={"Authorization": f"Basic {good}"}).status_code == 200
        assert c.get("/api/v1/queues", headers={"Authorization": f"Basic {bad}"}).status_code == 401
        assert c.get("/api/v1/queues", headers={"Authorization": "Bearer x"}).status_code == 401
        # basic auth is sent by the browser by itself: a state change needs the CSRF header
        refused = c.post("/api/v1/suspend", headers={"Authorization": f"Basic {good}"})
        assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
        assert not admin.is_suspended(r, settings.prefix)
        # a token of the browser's own making (the former double-submit cookie) is refused
        c.cookies.set("fw_csrf", "tok123")
        forged = c.post("/api/v1/suspend", headers={"Authorization": f"Basic {good}",
                                                    "X-CSRF-Token": "tok123"})
        assert forged.status_code == 403 and not admin.is_suspended(r, settings.prefix)
        token = page_csrf(c.get("/", headers={"Authorization": f"Basic {good}"}).text)
        done = c.post("/api/v1/suspend", headers={"Authorization": f"Basic {good}",
                                                  "X-CSRF-Token": token})
        assert done.status_code == 200 and admin.is_suspended(r, settings.prefix)


def test_no_credentials_no_app(r, settings):
    """Reads and actions both need authentication: there is no anonymous dashboard."""
    with pytest.raises(ValueError, match="FUSIONWORKER_WEB_TOKEN"):
        create_app(settings, r)


def test_every_route_is_a_module_level_function_over_the_app_state(r, web_settings):
    """The endpoints are plain functions of their modules that read the one state
    ``create_app`` builds (``request.app.state.web``), not closures over its locals."""
    from starlette.routing import Route

    app = create_app(web_settings, r, read_only=True, poll_interval=3.0)
    endpoints = [route.endpoint for route in app.routes if isinstance(route, Route)]
    assert len(endpoints) >= 40
    nested = [f"{f.__module__}.{f.__qualname__}" for f in endpoints
              if "<locals>" in f.__qualname__]
    assert nested == []
    web = app.state.web
    assert web.board is app.state.dashboard and web.authn is app.state.auth
    assert web.read_only is True and web.poll_interval == 3.0


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
def test_web_without_credentials_makes_a_one_run_token_and_requires_it(settings, queue):
    """Like Jupyter: nothing configured on loopback -> a random token printed once."""
    import re
    import subprocess
    import sys

    import httpx

    from tests.conftest import ROOT, worker_env
    from tests.web_support import free_port

    queue("default").enqueue("tests.jobs:add", 1, 2)
    port = free_port()
    env = worker_env(settings)
    for name in ("FUSIONWORKER_WEB_TOKEN", "FUSIONWORKER_WEB_USER", "FUSIONWORKER_WEB_PASSWORD_HASH"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "fusionworker.cli", "web", "--port", str(port)],
                            env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        token = re.search(r"token \(log in with it\) is (\S+)", line).group(1)
        url = f"http://127.0.0.1:{port}/api/v1/queues"
        anonymous = wait_for(lambda: alive(proc) and httpx.get(url), timeout=20,
                             ignore=(httpx.TransportError,))
        assert anonymous.status_code == 401
        refused = httpx.post(f"http://127.0.0.1:{port}/api/v1/suspend")
        assert refused.status_code == 401
        good = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        assert good.status_code == 200 and good.json()["queues"][0]["queue"] == "default"
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


# -- reads ------------------------------------------------------------------------------------


def test_queues_workers_info_and_openapi(client, queue, burst, r, settings):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2, priority=10)
    q.enqueue("tests.jobs:add", 1, 2)
    q.enqueue("tests.jobs:add", 1, 2, priority=-5)
    q.set_max_active(3)
    doc = api(client, "GET", "/api/v1/queues").json()
    (stats,) = doc["queues"]
    assert stats["pending"] == 3 and stats["bands"] == {"high": 1, "normal": 1, "low": 1}
    assert stats["max_active"] == 3 and stats["paused"] is False
    assert stats["oldest_age"] is not None
    for key in ("scheduled", "started", "failed", "finished", "busy_groups"):
        assert key in stats
    info = api(client, "GET", "/api/v1/info").json()
    assert info["schema"] == 1 and info["prefix"] == settings.prefix
    assert [x["queue"] for x in info["queues"]] == ["default"]
    assert api(client, "GET", "/api/v1/workers").json() == {"workers": []}
    spec = api(client, "GET", "/api/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.") and "/api/v1/jobs/{id}/priority" in spec["paths"]
    assert "/api/v1/queues/{q}/requeue-failed" in spec["paths"]


def test_workers_endpoint_shows_a_live_worker(client, processes, queue, settings):

    queue("default").enqueue("tests.jobs:sleep", 30)
    processes.worker("--customq", "default", "--name", "w-web")

    def running():
        ws = api(client, "GET", "/api/v1/workers").json()["workers"]
        return ws if ws and ws[0]["current_job"] else None

    (w,) = wait_for(running, timeout=20)
    assert w["name"] == "w-web" and w["state"] == "busy" and w["heartbeat_age"] is not None
    assert "throttle" in w and w["queues"] == ["default"]


@pytest.mark.slow
def test_a_worker_is_shut_down_from_the_api_and_an_unknown_one_is_404(client, processes, queue,
                                                                       r, settings):
    job = queue("default").enqueue("tests.jobs:sleep", 1.5)
    proc = processes.worker("--customq", "default", "--name", "w-down")
    wait_for(lambda: [w["current_job"] for w in api(client, "GET", "/api/v1/workers")
                      .json()["workers"]] == [job.id], timeout=30, what="the job runs")
    assert api(client, "POST", "/api/v1/workers/nobody/shutdown").status_code == 404
    assert api(client, "POST", "/api/v1/workers/w-down/shutdown?mode=now").status_code == 400
    assert alive(proc)
    done = api(client, "POST", "/api/v1/workers/w-down/shutdown")
    assert done.status_code == 200 and done.json() == {"worker": "w-down", "shutdown": "warm"}
    assert proc.wait(30) == 0 and job.get_status() == "finished"     # warm: it finished
    assert api(client, "GET", "/api/v1/workers").json()["workers"] == []


def test_redis_password_never_shown(r, settings):
    url = settings.redis_url.replace("redis://", "redis://:hidden-pw@")
    app = create_app(settings.replace(web_token=TOKEN, redis_url=url), r)
    with TestClient(app, headers=SAME_SITE) as c:
        form_login(c, TOKEN)
        for path in ("/api/v1/info", "/", "/workers", "/scheduled", "/failed"):
            text = c.get(path, headers=BEARER).text
            assert "hidden-pw" not in text, path
        assert "***" in c.get("/api/v1/info", headers=BEARER).json()["redis_url"]


def test_jobs_list_pages_filters_and_bad_input(client, queue):
    q = queue("default")
    ids = [q.enqueue("tests.jobs:add", i, 1, priority=i % 3).id for i in range(12)]
    q.enqueue("tests.jobs:echo", "x", priority=7)
    page1 = api(client, "GET", "/api/v1/jobs?queue=default&per_page=5").json()
    page3 = api(client, "GET", "/api/v1/jobs?queue=default&per_page=5&page=3").json()
    assert page1["total"] == 13 and page1["pages"] == 3 and len(page1["jobs"]) == 5
    assert page1["jobs"][0]["func"] == "tests.jobs:echo"  # best first
    assert len(page3["jobs"]) == 3
    seen = {j["id"] for p in (1, 2, 3) for j in api(
        client, "GET", f"/api/v1/jobs?queue=default&per_page=5&page={p}").json()["jobs"]}
    assert seen >= set(ids)
    two = api(client, "GET", "/api/v1/jobs?queue=default&priority=2").json()
    assert two["total"] == 4 and {j["priority"] for j in two["jobs"]} == {2}
    low = api(client, "GET", "/api/v1/jobs?queue=default&priority=normal").json()
    assert low["total"] == 13
    echo = api(client, "GET", "/api/v1/jobs?queue=default&function=echo").json()
    assert [j["func"] for j in echo["jobs"]] == ["tests.jobs:echo"] and echo["next_start"] is None
    for url, needle in (("/api/v1/jobs?queue=default&page=0", "page"),
                        ("/api/v1/jobs?queue=default&page=abc", "page"),
                        ("/api/v1/jobs?queue=default&per_page=100000", "per_page"),
                        ("/api/v1/jobs?queue=default&priority=9999", "priority"),
                        ("/api/v1/jobs?queue=default&status=bogus", "status"),
                        ("/api/v1/jobs", "queue"),
                        ("/api/v1/jobs?queue=bad%20name", "queue name")):
        answer = api(client, "GET", url)
        assert answer.status_code == 400, url
        assert needle in answer.json()["error"], (url, answer.json())
    assert api(client, "GET", "/api/v1/jobs?queue=nosuch").status_code == 404


def test_job_detail_with_traceback_and_timeline(client, queue, burst, r, settings):
    from fusionworker.events import EventsMiddleware

    q = queue("default")
    job = q.enqueue("tests.jobs:boom", "kaput")
    burst("default", middleware=[EventsMiddleware()])
    flush_default_sinks(5)
    doc = api(client, "GET", f"/api/v1/jobs/{job.id}").json()
    assert doc["status"] == "failed" and doc["args"] == ["kaput"]
    assert doc["error_type"] and "kaput" in doc["traceback"] and doc["attempts"] == 1
    assert doc["enqueued_at"] and doc["ended_at"]
    events = [e["event"] for e in doc["events"]]
    assert events[0] == "queued" and "failed" in events
    assert api(client, "GET", f"/api/v1/jobs/{job.id}?queue=default").status_code == 200
    missing = api(client, "GET", "/api/v1/jobs/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
    page = client.get(f"/jobs/{job.id}", headers=BEARER)
    assert page.status_code == 200 and "kaput" in page.text and "Timeline" in page.text
    assert client.get("/jobs/nope", headers=BEARER).status_code == 404


# -- actions ----------------------------------------------------------------------------------


def admin_events(r, settings):
    flush_default_sinks(5)
    return [e for _, e in last_events(r, settings.prefix, count=200) if e["event"] == "admin"]


def test_priority_requeue_cancel_delete(client, queue, burst, r, settings):
    q = queue("default")
    pending = q.enqueue("tests.jobs:add", 1, 2)
    answer = api(client, "PUT", f"/api/v1/jobs/{pending.id}/priority", json={"priority": 42})
    assert answer.status_code == 200 and q.fetch_job(pending.id).priority == 42
    for body, status in (({"priority": 5000}, 400), ({"priority": "x"}, 400), ({}, 400)):
        bad = api(client, "PUT", f"/api/v1/jobs/{pending.id}/priority", json=body)
        assert bad.status_code == status and "priority" in bad.json()["error"]
    notjson = api(client, "PUT", f"/api/v1/jobs/{pending.id}/priority", content=b"{nope")
    assert notjson.status_code == 400 and "JSON" in notjson.json()["error"]
    assert q.fetch_job(pending.id).priority == 42
    assert api(client, "PUT", "/api/v1/jobs/nope/priority",
               json={"priority": 1}).status_code == 404
    cancel = api(client, "POST", f"/api/v1/jobs/{pending.id}/cancel")
    assert cancel.status_code == 200 and q.fetch_job(pending.id).status == "canceled"
    again = api(client, "POST", f"/api/v1/jobs/{pending.id}/cancel")
    assert again.status_code == 409 and "canceled" in again.json()["error"]
    failed = q.enqueue("tests.jobs:boom")
    burst("default")
    not_failed = api(client, "POST", f"/api/v1/jobs/{pending.id}/requeue")
    assert not_failed.status_code == 409
    requeued = api(client, "POST", f"/api/v1/jobs/{failed.id}/requeue")
    assert requeued.status_code == 200 and q.fetch_job(failed.id).status == "queued"
    assert api(client, "DELETE", f"/api/v1/jobs/{failed.id}").status_code == 200
    assert q.fetch_job(failed.id) is None
    assert api(client, "DELETE", f"/api/v1/jobs/{failed.id}").status_code == 404
    actions = [(e["reason"], e["worker"], e["job_id"]) for e in admin_events(r, settings)]
    assert ("reprioritize", "web:token", pending.id) in actions
    assert ("cancel", "web:token", pending.id) in actions
    assert ("requeue", "web:token", failed.id) in actions
    assert ("delete", "web:token", failed.id) in actions


def test_requeue_failed_selection_and_all(client, queue, burst):
    q = queue("default")
    jobs = [q.enqueue("tests.jobs:boom") for _ in range(4)]
    burst("default")
    answer = api(client, "POST", "/api/v1/queues/default/requeue-failed",
                 json={"ids": [jobs[0].id, "nope"]})
    assert answer.json()["requeued"] == 1 and len(answer.json()["errors"]) == 1
    assert q.fetch_job(jobs[0].id).status == "queued"
    assert api(client, "POST", "/api/v1/queues/default/requeue-failed",
               json={"ids": "x"}).status_code == 400
    everything = api(client, "POST", "/api/v1/queues/default/requeue-failed")
    assert everything.json()["requeued"] == 3
    assert q.stats()["failed"] == 0 and q.count == 4
    assert api(client, "POST", "/api/v1/queues/nosuch/requeue-failed").status_code == 404


def test_queue_pause_cap_suspend_and_cron(client, queue, r, settings, caplog):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    with caplog.at_level("INFO", logger="fusionworker.web"):
        assert api(client, "POST", "/api/v1/queues/default/pause").json()["paused"] is True
    assert [m for m in caplog.messages if m.startswith("web: pause")] == [
        "web: pause default by token"]                      # the audit line, single-spaced
    assert q.is_paused
    assert api(client, "POST", "/api/v1/queues/default/unpause").status_code == 200
    assert not q.is_paused
    assert api(client, "PUT", "/api/v1/queues/default/max-active",
               json={"max_active": 4}).status_code == 200
    assert q.max_active == 4
    for body in ({"max_active": 0}, {"max_active": "many"}, {}):
        assert api(client, "PUT", "/api/v1/queues/default/max-active",
                   json=body).status_code == 400
    assert q.max_active == 4
    assert api(client, "PUT", "/api/v1/queues/default/max-active",
               json={"max_active": None}).status_code == 200
    assert q.max_active is None
    assert api(client, "POST", "/api/v1/suspend").status_code == 200
    assert admin.is_suspended(r, settings.prefix)
    assert api(client, "POST", "/api/v1/resume").status_code == 200
    assert not admin.is_suspended(r, settings.prefix)
    cron.register(r, settings, "nightly", "0 3 * * *", "tests.jobs:noop", queue="default")
    assert api(client, "GET", "/api/v1/cron").json()["cron"][0]["name"] == "nightly"
    assert api(client, "POST", "/api/v1/cron/nightly/pause").status_code == 200
    assert cron.get_entry(r, settings, "nightly").paused
    assert api(client, "POST", "/api/v1/cron/nightly/resume").status_code == 200
    assert not cron.get_entry(r, settings, "nightly").paused
    assert api(client, "DELETE", "/api/v1/cron/nightly").status_code == 200
    assert api(client, "GET", "/api/v1/cron").json()["cron"] == []
    missing = api(client, "POST", "/api/v1/cron/nightly/pause")
    assert missing.status_code == 404 and "nightly" in missing.json()["error"]
    actions = {e["reason"] for e in admin_events(r, settings)}
    assert {"pause", "unpause", "set-max-active", "suspend", "resume", "cron-pause",
            "cron-resume", "cron-remove"} <= actions


def test_read_only_refuses_and_hides_actions(r, settings, queue):
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2)
    app = create_app(settings.replace(web_token=TOKEN), r, read_only=True)
    with TestClient(app, headers=SAME_SITE) as c:
        for method, url in ENDPOINTS:
            if method == "GET":
                continue
            answer = c.request(method, url.replace("/x", f"/{job.id}"), headers=BEARER,
                               json={"priority": 1, "max_active": 2})
            assert answer.status_code == 403, url
            assert "read-only" in answer.json()["error"]
        assert not q.is_paused and q.fetch_job(job.id).priority == 0
        assert api(c, "GET", "/api/v1/queues").status_code == 200
        page = c.get("/", headers=BEARER).text
        assert "/action" not in page and "Pause" not in page
        assert "/action" not in c.get(f"/jobs/{job.id}", headers=BEARER).text


def test_unknown_route_is_json_404(client):
    answer = api(client, "GET", "/api/v1/nothing")
    assert answer.status_code == 404 and answer.json() == {"error": "not found"}


def test_minute_chart_counts_finished_and_failed(client, queue, burst):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    q.enqueue("tests.jobs:add", 1, 2)
    q.enqueue("tests.jobs:boom")
    burst("default")
    rows = api(client, "GET", "/api/v1/chart?minutes=60").json()["minutes"]
    assert len(rows) == 60
    assert sum(x["finished"] for x in rows) == 2 and sum(x["failed"] for x in rows) == 1
    # kept per queue and minute in the queue's hash tag, with a TTL of about 2 h
    key = q.qkeys.minute(int(q.connection.time()[0]) // 60)
    if not q.connection.exists(key):   # the burst ran in the previous minute
        key = q.qkeys.minute(int(q.connection.time()[0]) // 60 - 1)
    assert key.startswith(q.qkeys.base) and 7000 < q.connection.ttl(key) <= 7200
    assert api(client, "GET", "/api/v1/chart?minutes=0").status_code == 400


# -- pages and their forms (CSRF) --------------------------------------------------------------


def login(client: TestClient) -> str:
    return form_login(client, TOKEN)


def test_form_actions_need_the_csrf_token(client, queue):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    csrf = login(client)
    page = client.get("/queues/default").text
    assert re.search(r'name="csrf" value="([^"]+)"', page).group(1) == csrf
    refused = client.post("/action", data={"action": "pause", "queue": "default"})
    assert refused.status_code == 403 and "CSRF" in refused.text and not q.is_paused
    wrong = client.post("/action", data={"action": "pause", "queue": "default", "csrf": "x"})
    assert wrong.status_code == 403 and not q.is_paused
    done = client.post("/action", data={"action": "pause", "queue": "default", "csrf": csrf,
                                        "next": "/queues/default"}, follow_redirects=False)
    assert done.status_code == 303 and q.is_paused
    assert done.headers["location"].startswith("/queues/default?msg=")
    # the session cookie alone does not pass the API's CSRF check either
    assert client.post("/api/v1/queues/default/unpause").status_code == 403
    assert client.post("/api/v1/queues/default/unpause",
                       headers={"X-CSRF-Token": csrf}).status_code == 200
    # an open redirect through "next" is refused
    away = client.post("/action", data={"action": "pause", "queue": "default", "csrf": csrf,
                                        "next": "//evil.example/"}, follow_redirects=False)
    assert away.headers["location"].startswith("/?")


def test_hold_and_release_by_api_and_by_the_job_pages_buttons(client, queue, burst, r,
                                                             settings):
    """Issue 34: a held job is listed as held, survives a burst worker, and runs after its
    release; the button posts with the CSRF token; both are audited."""
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2)
    held = api(client, "POST", f"/api/v1/jobs/{job.id}/hold")
    assert held.status_code == 200 and held.json()["status"] == "held"
    listed = api(client, "GET", "/api/v1/jobs?queue=default&status=held").json()
    assert [j["id"] for j in listed["jobs"]] == [job.id]
    burst("default")
    assert q.fetch_job(job.id).status == "held"
    again = api(client, "POST", f"/api/v1/jobs/{job.id}/release")
    assert again.status_code == 200 and again.json()["status"] == "queued"
    refused = api(client, "POST", f"/api/v1/jobs/{job.id}/release")
    assert refused.status_code == 409 and "not held" in refused.json()["error"]
    csrf = login(client)
    page = client.get(f"/jobs/{job.id}?queue=default").text
    assert 'data-action="hold"' in page and 'data-action="release"' not in page
    form = {"action": "hold", "queue": "default", "job_id": job.id}
    assert client.post("/action", data=form).status_code == 403       # no CSRF token
    assert q.fetch_job(job.id).status == "queued"
    client.post("/action", data={**form, "csrf": csrf})
    assert q.fetch_job(job.id).status == "held"
    page = client.get(f"/jobs/{job.id}?queue=default").text
    assert 'data-action="release"' in page and 'data-action="hold"' not in page
    client.post("/action", data={**form, "action": "release", "csrf": csrf})
    burst("default")
    assert q.fetch_job(job.id).status == "finished"
    actions = [(e["reason"], e["job_id"]) for e in admin_events(r, settings)]
    assert actions.count(("hold", job.id)) == 2 and actions.count(("release", job.id)) == 2


def test_bulk_actions_of_a_queue_page_take_job_ids_holding_colons(client, queue, burst):
    """The queue page's checkboxes name ``queue:id``, as the failed page's do: a job id
    holding a colon (a user's ``order:42``, a callback's ``<id>:on_failure``) was split
    there and read as a queue ("no queue 'order'")."""
    q = queue("default")
    ids = ["order:42", "a:b:c"]
    for job_id in ids:
        q.enqueue("tests.jobs:boom", job_id=job_id)
    burst("default")
    csrf = login(client)
    page = client.get("/queues/default?status=failed").text
    ticked = re.findall(r'name="ids" value="([^"]+)"', page)
    assert sorted(ticked) == sorted(f"default:{job_id}" for job_id in ids)
    answer = client.post("/action", data={"action": "requeue-selected", "queue": "default",
                                          "ids": ticked, "csrf": csrf,
                                          "next": "/queues/default?status=failed"})
    assert "requeue: 2 job(s)" in answer.text
    assert [q.fetch_job(job_id).status for job_id in ids] == ["queued", "queued"]


def test_a_job_id_holding_url_characters_links_to_its_page(client, queue, burst):
    """An id holding '#', '?' or '%' (ids are free text but for whitespace and '/') was
    linked as it is: the link led to a 404 (found by an attack)."""
    q = queue("default")
    ids = ["h#frag", "x?y=1&z", "pct%41"]
    for job_id in ids:
        q.enqueue("tests.jobs:boom", job_id=job_id)
    burst("default")
    login(client)
    page = client.get("/queues/default?status=failed").text
    links = re.findall(r'<a href="(/jobs/[^"]+)"', page)
    assert sorted(links) == ["/jobs/h%23frag?queue=default", "/jobs/pct%2541?queue=default",
                             "/jobs/x%3Fy%3D1%26z?queue=default"]
    # (Starlette's test client decodes a path twice, '%2541' to 'A', where a real server,
    # uvicorn, reads 'pct%41': that link is followed by a browser test's real server)
    for link in [link for link in links if "pct" not in link]:
        answer = client.get(link)
        assert answer.status_code == 200 and "boom" in answer.text, link


def test_form_bulk_actions_and_errors_as_messages(client, queue, burst):
    q = queue("default")
    jobs = [q.enqueue("tests.jobs:boom") for _ in range(3)]
    burst("default")
    csrf = login(client)
    page = client.get("/failed")
    assert page.status_code == 200 and all(j.id in page.text for j in jobs)
    answer = client.post("/action", data={"action": "requeue-selected", "queue": "default",
                                          "ids": [jobs[0].id], "csrf": csrf, "next": "/failed"})
    assert answer.status_code == 200 and "requeue: 1 job(s)" in answer.text
    assert q.fetch_job(jobs[0].id).status == "queued"
    client.post("/action", data={"action": "delete-selected", "queue": "default",
                                 "ids": [jobs[1].id], "csrf": csrf})
    assert q.fetch_job(jobs[1].id) is None
    none = client.post("/action", data={"action": "requeue-selected", "queue": "default",
                                        "csrf": csrf, "next": "/failed"})
    assert "select at least one job" in none.text
    bad = client.post("/action", data={"action": "priority", "queue": "default",
                                       "job_id": jobs[0].id, "priority": "high!",
                                       "csrf": csrf, "next": f"/jobs/{jobs[0].id}"})
    assert bad.status_code == 200 and "priority must be an integer" in bad.text
    assert "fusionworker/web/" not in bad.text  # the job's own traceback only
    client.post("/action", data={"action": "requeue-all-failed", "queue": "default",
                                 "csrf": csrf})
    assert q.stats()["failed"] == 0
    for path in ("/queues/default?status=queued", "/queues/default?status=failed&page=2",
                 "/scheduled", "/workers", "/queues/default?function=boom"):
        assert client.get(path).status_code == 200, path
    bad_page = client.get("/queues/default?page=zero")
    assert bad_page.status_code == 200 and "page must be an integer" in bad_page.text
    assert client.get("/queues/nosuch").status_code == 404


# -- the command ------------------------------------------------------------------------------


def test_web_command_refuses_a_public_bind_without_auth_and_hashes_passwords(settings):
    from click.testing import CliRunner

    from fusionworker.cli import main

    env = {"FUSIONWORKER_WEB_TOKEN": "", "FUSIONWORKER_WEB_USER": "",
           "FUSIONWORKER_WEB_PASSWORD_HASH": "", "FUSIONWORKER_PREFIX": settings.prefix}
    out = CliRunner().invoke(main, ["--redis-url", settings.redis_url, "web", "--bind",
                                    "0.0.0.0"], env=env)
    assert out.exit_code != 0 and "refusing to listen on 0.0.0.0" in out.output
    out = CliRunner().invoke(main, ["web", "--hash-password"], input="pw1\npw1\n")
    assert out.exit_code == 0
    encoded = out.output.strip().splitlines()[-1]
    assert encoded.startswith("pbkdf2_sha256$") and verify_password("pw1", encoded)


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
def test_web_command_serves_the_api(settings, queue, tmp_path):
    import subprocess
    import sys

    import httpx

    from tests.conftest import ROOT, worker_env
    from tests.web_support import free_port

    queue("default").enqueue("tests.jobs:add", 1, 2)
    port = free_port()
    env = worker_env(settings, FUSIONWORKER_WEB_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "fusionworker.cli", "web", "--port", str(port)],
                            env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/api/v1/queues"
        answer = wait_for(lambda: alive(proc) and httpx.get(url, headers=BEARER), timeout=20,
                          ignore=(httpx.TransportError,))
        assert answer.status_code == 200
        assert answer.json()["queues"][0]["queue"] == "default"
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/queues").status_code == 401
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0].decode()
    assert f"http://127.0.0.1:{port}/" in output


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
def test_demo_web_serves_the_dashboard_beside_the_demo(settings):
    import signal
    import subprocess
    import sys

    import httpx

    from tests.conftest import ROOT, worker_env
    from tests.web_support import free_port

    port = free_port()
    env = worker_env(settings, FUSIONWORKER_WEB_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "fusionworker.cli", "demo", "--web",
                             "--web-port", str(port), "--jobs", "3", "--workers", "1"],
                            env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert f"Dashboard: http://127.0.0.1:{port}/" in line
        def names() -> list[str]:
            answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/queues", headers=BEARER)
            return [q["queue"] for q in answer.json()["queues"]]
        wait_for(lambda: names() == ["email", "sms", "webhook"], timeout=20)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            import os

            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_unreachable_redis_is_a_503_message_without_the_password(settings):
    import redis as redis_lib

    from tests.web_support import free_port

    port = free_port()   # nothing listens there
    url = f"redis://:hidden-pw@127.0.0.1:{port}/0"
    down = redis_lib.Redis.from_url(url, socket_connect_timeout=0.5, decode_responses=True)
    with TestClient(create_app(settings.replace(web_token=TOKEN, redis_url=url), down),
                    raise_server_exceptions=False) as c:
        answer = c.get("/api/v1/queues", headers=BEARER)
        assert answer.status_code == 503
        assert "cannot reach Redis" in answer.json()["error"]
        assert "hidden-pw" not in answer.text
        page = c.get("/", headers=BEARER)
        assert page.status_code == 503 and "cannot reach Redis" in page.text
        assert "hidden-pw" not in page.text and "Traceback" not in page.text
