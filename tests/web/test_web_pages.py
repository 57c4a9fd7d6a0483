"""The cross-queue pages and the newer actions, through Starlette's TestClient on
the real Redis: failed jobs of every queue with filters and a cursor, retries
apart from delayed jobs, run-now, batches, a worker's page, rate limits and
cron entries set from the pages (CSRF, audit, read-only)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core.batch import Batch
from fusionworker.core.workflows import DependencyMiddleware
from fusionworker.events import flush_default_sinks, last_events
from fusionworker.middleware import cron
from fusionworker.web import create_app
from tests.waiting import wait_for
from tests.web_support import SAME_SITE, form_login

TOKEN = "pages-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(r, settings):
    with TestClient(create_app(settings.replace(web_token=TOKEN), r),
                    headers=SAME_SITE) as c:
        yield c


def get(client, url):
    answer = client.get(url, headers=BEARER)
    assert answer.status_code == 200, (url, answer.text[:300])
    return answer


def login(client) -> str:
    return form_login(client, TOKEN)


def admin_reasons(r, settings) -> list[str]:
    flush_default_sinks(5)
    return [e["reason"] for _, e in last_events(r, settings.prefix, count=300)
            if e["event"] == "admin"]


def test_every_page_names_its_icon_and_the_icon_is_served(client):
    """A page without an icon link makes the browser ask /favicon.ico: a 404 in the
    console on every load."""
    for path in ("/", "/login", "/failed", "/workers"):
        page = client.get(path, headers=BEARER).text
        assert '<link rel="icon" href="/static/favicon.svg"' in page, path
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")


def test_favicon_ico_leads_to_the_icon_without_credentials(client):
    """A JSON answer opened in a tab names no icon: the browser asks /favicon.ico by
    itself, and got a 404 there."""
    moved = client.get("/favicon.ico", follow_redirects=False)
    assert moved.status_code == 301 and moved.headers["location"] == "/static/favicon.svg"
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")


def test_a_huge_argument_or_result_is_shown_clipped(client, queue, burst):
    """A job of 1 MB of arguments (9 MiB in a trial) made a page twice that size: a page
    shows the first 20,000 characters of a value, the API the whole."""
    q = queue("default")
    job = q.enqueue("tests.jobs:echo", "x" * 1_000_000)
    burst("default")
    page = get(client, f"/jobs/{job.id}?queue=default").text
    assert len(page) < 100_000 and page.count("more characters: the API") == 2  # args, result
    whole = get(client, f"/api/v1/jobs/{job.id}?queue=default").json()
    assert whole["args"] == ["x" * 1_000_000]
    assert whole["result"] == {"args": ["x" * 1_000_000], "kwargs": {}}


def test_failed_across_queues_with_filters_and_cursor(client, queue, burst, r, settings):
    a, b = queue("alpha"), queue("beta")
    boom = [a.enqueue_call("tests.jobs:boom", [f"a{i}"], max_retries=0) for i in range(3)]
    other = b.enqueue_call("tests.jobs:conn_error", max_retries=0)
    burst("alpha")
    burst("beta")
    # one of alpha's failed two hours ago
    r.zadd(a.qkeys.failed, {boom[0].id: time.time() - 7200})
    doc = get(client, "/api/v1/failed").json()
    assert doc["total"] == 4 and len(doc["jobs"]) == 4
    assert doc["jobs"][-1]["id"] == boom[0].id          # oldest last
    assert {j["queue"] for j in doc["jobs"]} == {"alpha", "beta"}
    assert [j["id"] for j in get(client, "/api/v1/failed?queue=beta").json()["jobs"]] == [
        other.id]
    by_type = get(client, "/api/v1/failed?error_type=connectionerr").json()
    assert [j["id"] for j in by_type["jobs"]] == [other.id] and by_type["total"] is None
    by_func = get(client, "/api/v1/failed?function=boom").json()
    assert {j["id"] for j in by_func["jobs"]} == {j.id for j in boom}
    recent = get(client, "/api/v1/failed?since=1h").json()
    assert boom[0].id not in {j["id"] for j in recent["jobs"]} and recent["total"] == 3
    # the cursor walks every job once, with or without a filter
    for extra in ("", "&function=boom"):
        seen, before = [], ""
        for _ in range(10):
            page = get(client, f"/api/v1/failed?per_page=1{extra}{before}").json()
            seen += [j["id"] for j in page["jobs"]]
            if page["next_before"] is None:
                break
            before = f"&before={page['next_before']}"
        expected = 4 if not extra else 3
        assert len(seen) == len(set(seen)) == expected, (extra, seen)
    assert client.get("/api/v1/failed?since=2y", headers=BEARER).status_code == 400
    assert client.get("/api/v1/failed?before=x", headers=BEARER).status_code == 400
    page = get(client, "/failed?function=boom").text
    assert all(f'data-job="{j.id}"' in page for j in boom) and other.id not in page
    # requeue a selection from two queues at once
    csrf = login(client)
    answer = client.post("/action", data={
        "action": "requeue-selected", "ids": [f"alpha:{boom[1].id}", f"beta:{other.id}"],
        "csrf": csrf, "next": "/failed"})
    assert "requeue: 2 job(s)" in answer.text
    assert a.fetch_job(boom[1].id).status == "queued" and b.fetch_job(other.id).status == "queued"
    assert admin_reasons(r, settings).count("requeue") == 2


def test_retries_apart_from_delayed_jobs_and_run_now(client, queue, burst, r, settings):
    q = queue("default")
    key = f"{settings.prefix}:flaky"
    retry = q.enqueue_call("tests.jobs:flaky", [settings.redis_url, key, 1], max_retries=2,
                           retry_delay=3600)
    burst("default")
    assert q.fetch_job(retry.id).status == "scheduled"
    delayed = q.enqueue_in(3600, "tests.jobs:add", 1, 2)
    retries = get(client, "/api/v1/scheduled?kind=retries").json()
    assert [j["id"] for j in retries["queues"][0]["jobs"]] == [retry.id]
    later = get(client, "/api/v1/scheduled?kind=delayed").json()
    assert [j["id"] for j in later["queues"][0]["jobs"]] == [delayed.id]
    assert retry.id in get(client, "/retries").text and delayed.id not in get(
        client, "/retries").text
    assert delayed.id in get(client, "/scheduled").text
    # run now: the API for the retry, the page's button for the delayed job
    done = client.post(f"/api/v1/jobs/{retry.id}/run-now", headers=BEARER)
    assert done.status_code == 200, done.text
    assert r.zscore(q.qkeys.scheduled, retry.id) <= time.time() + 1
    csrf = login(client)
    page = client.post("/action", data={"action": "run-now", "queue": "default",
                                        "job_id": delayed.id, "csrf": csrf,
                                        "next": "/scheduled"})
    assert f"Job {delayed.id} runs now" in page.text
    burst("default")
    assert q.fetch_job(retry.id).status == "finished"
    assert q.fetch_job(delayed.id).status == "finished"
    again = client.post(f"/api/v1/jobs/{retry.id}/run-now", headers=BEARER)
    assert again.status_code == 409 and "finished, not scheduled" in again.json()["error"]
    assert admin_reasons(r, settings).count("run-now") == 2


def test_batches_page_and_a_batch(client, queue, burst, r):
    q = queue("reports")
    with Batch(on_complete="tests.jobs:echo", queue="reports", connection=r,
               settings=q.settings) as sealed:
        jobs = [q.enqueue("tests.jobs:add", i, 1, batch=sealed) for i in range(2)]
    still_open = Batch(queue="reports", connection=r, settings=q.settings).__enter__()
    q.enqueue("tests.jobs:add", 5, 5, batch=still_open)
    listing = get(client, "/api/v1/batches").json()
    assert listing["total"] == 2
    by_id = {b["id"]: b for b in listing["batches"]}
    assert by_id[sealed.id]["sealed"] and by_id[sealed.id]["total"] == 2
    assert not by_id[still_open.id]["sealed"]
    page = get(client, "/batches").text
    assert f'data-batch="{sealed.id}"' in page and "open" in page
    burst("reports", middleware=[DependencyMiddleware()])   # replays the batch notes
    fired = get(client, f"/api/v1/batches/{sealed.id}?queue=reports").json()
    assert fired["fired"] and fired["ended"] == 2 and fired["failed"] == 0
    assert {j["id"] for j in fired["ended_jobs"]} == {j.id for j in jobs}
    assert fired["callback_jobs"][0]["kind"] == "on_complete"
    assert fired["callback_jobs"][0]["status"] in ("queued", "finished")
    assert sealed.id not in {b["id"] for b in get(client, "/api/v1/batches").json()["batches"]}
    detail = get(client, f"/batches/{sealed.id}?queue=reports").text
    assert 'id="batch-fired"' in detail and jobs[0].id in detail
    assert client.get("/batches/nope?queue=reports", headers=BEARER).status_code == 404
    assert client.get(f"/api/v1/batches/{sealed.id}", headers=BEARER).status_code == 400


def test_a_batch_redis_refuses_to_read_costs_that_batch_not_the_listing(client, queue, r,
                                                                        settings, prefix):
    """Keys of another type, written by another program: one batch's hash, another's set
    of ended jobs, a third queue's index of batches. The listing, each batch's page, a
    job's page and ``job show`` answer; what cannot be read is said, once, where it is."""
    from click.testing import CliRunner

    from fusionworker.cli import main

    q = queue("reports")
    batches = []
    for _ in range(3):
        with Batch(queue="reports", connection=r, settings=q.settings) as batch:
            job = q.enqueue("tests.jobs:add", 1, 1, batch=batch)
        batches.append((batch.id, job.id))
    (good, _), (bad_hash, in_bad), (bad_ended, _) = batches
    r.delete(q.qkeys.batch(bad_hash))
    r.set(q.qkeys.batch(bad_hash), "written by another program")
    r.hset(q.qkeys.batch_ended(bad_ended), "not", "a set")
    other = queue("other")
    other.enqueue("tests.jobs:add", 1, 1)
    r.set(other.qkeys.batches, "not a zset")

    listing = get(client, "/api/v1/batches").json()
    by_id = {b["id"]: b for b in listing["batches"]}
    assert set(by_id) == {good, bad_hash, bad_ended}
    assert "malformed" not in by_id[good] and by_id[good]["total"] == 1
    for bad in (bad_hash, bad_ended):
        assert "WRONGTYPE" in by_id[bad]["unreadable"] and by_id[bad]["total"] == 0
    assert [u["queue"] for u in listing["unreadable"]] == ["other"]
    page = get(client, "/batches").text
    assert f'data-batch="{bad_hash}"' in page and 'data-unreadable="other"' in page
    for bad in (bad_hash, bad_ended):
        assert 'id="batch-unreadable"' in get(client, f"/batches/{bad}?queue=reports").text
    assert "cannot be read" in get(client, f"/jobs/{in_bad}?queue=reports").text
    shown = CliRunner().invoke(main, ["job", "show", in_bad], env={
        "REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": prefix,
        "FUSIONWORKER_LOG_LEVEL": "WARNING"})
    assert shown.exit_code == 0, (shown.output, shown.exception)
    assert f"batch     {bad_hash} on reports: cannot be read (WRONGTYPE" in shown.output

def test_worker_page_shows_slots_memory_and_recent_outcomes(client, queue, processes,
                                                            settings, r):
    q = queue("default")
    first = q.enqueue("tests.jobs:add", 1, 2)
    processes.worker("--customq", "default", "--name", "pagew")
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=30)
    sleeper = q.enqueue("tests.jobs:sleep", 30)

    def running() -> dict | None:
        doc = client.get("/api/v1/workers/pagew", headers=BEARER).json()
        return doc if doc.get("slots") and doc.get("rss_mib") else None

    doc = wait_for(running, timeout=30, what="the worker running the sleep job")
    assert doc["slots"][0]["id"] == sleeper.id and doc["slots"][0]["func"] == "tests.jobs:sleep"
    assert doc["rss_mib"] > 5 and doc["processes"] >= 2 and doc["concurrency"] == 1
    flush_default_sinks(5)
    outcomes = wait_for(lambda: client.get("/api/v1/workers/pagew", headers=BEARER).json()
                        ["outcomes"], timeout=15, what="the finished job in the stream")
    assert outcomes[0]["job_id"] == first.id and outcomes[0]["event"] == "completed"
    page = get(client, "/workers/pagew").text
    assert sleeper.id in page and "MiB" in page and first.id[:12] in page
    assert 'href="/workers/pagew"' in get(client, "/workers").text
    assert client.get("/workers/nobody", headers=BEARER).status_code == 404


def test_worker_page_shows_the_governors_cpu_sample_fair_share_and_gpus(client, processes):
    """CPU_THROTTLE_THRESHOLD under 100 (issue 34): the worker's last CPU sample is in
    its API document and on its page; without it the page says the check is off."""
    processes.worker("--customq", "default", "--name", "cpuw", "--fair", "--gpus", "3",
                     env={"CPU_THROTTLE_THRESHOLD": "99.99", "CPU_RESUME_THRESHOLD": "99.99",
                          "MEMORY_CHECK_INTERVAL": "0.2"})
    processes.worker("--customq", "default", "--name", "nocpuw")
    doc = wait_for(lambda: (d := client.get("/api/v1/workers/cpuw", headers=BEARER).json())
                   .get("cpu_percent") is not None and d, timeout=30, ignore=(KeyError,))
    assert 0.0 <= doc["cpu_percent"] <= 100.0
    page = get(client, "/workers/cpuw").text
    assert 'id="worker-cpu"' in page and "% of all cores" in page
    assert doc["queue_order"] == "fair" and doc["gpus"] == ["3"]      # issue 34's settings
    assert doc["gpus_held"] == []          # no NVML here: no device over its threshold
    assert "GPUs 3" in page and ">fair<" in page
    wait_for(lambda: client.get("/api/v1/workers/nocpuw", headers=BEARER).status_code == 200)
    assert client.get("/api/v1/workers/nocpuw", headers=BEARER).json()["cpu_percent"] is None
    assert "not checked" in get(client, "/workers/nocpuw").text


def test_rate_limits_shown_and_set_from_the_queue_page(client, queue, r, settings):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    assert 'id="rate-queue">Queue: none' in get(client, "/queues/default").text
    csrf = login(client)
    refused = client.post("/action", data={"action": "rate-limit", "queue": "default",
                                           "rate": "10/s", "next": "/queues/default"})
    assert refused.status_code == 403 and q.rate_limit is None
    page = client.post("/action", data={"action": "rate-limit", "queue": "default",
                                        "rate": "10/s", "scope": "queue", "csrf": csrf,
                                        "next": "/queues/default"})
    assert "rate limit 10/s" in page.text and "10 per s" in page.text
    assert q.rate_limit["limit"] == 10 and q.rate_limit["window"] == 1.0
    client.post("/action", data={"action": "rate-limit", "queue": "default", "rate": "3/m",
                                 "scope": "group", "group": "acme", "csrf": csrf})
    assert q.group_rate_limit["groups"] == {"acme": {"limit": 3, "window": 60.0}}
    assert 'data-group="acme"' in get(client, "/queues/default").text
    bad = client.post("/action", data={"action": "rate-limit", "queue": "default",
                                       "rate": "lots", "csrf": csrf, "next": "/queues/default"})
    assert "invalid rate" in bad.text and q.rate_limit["limit"] == 10
    api = client.put("/api/v1/queues/default/rate-limit", headers=BEARER,
                     json={"rate": None})
    assert api.status_code == 200 and q.rate_limit is None
    assert client.put("/api/v1/queues/default/rate-limit", headers=BEARER,
                      json={}).status_code == 400
    assert admin_reasons(r, settings).count("set-rate-limit") == 3


def test_cron_add_and_run_now(client, queue, r, settings):
    queue("default").enqueue("tests.jobs:add", 1, 1)
    csrf = login(client)
    page = client.post("/action", data={
        "action": "cron-add", "name": "tick", "queue": "default", "schedule": "*/5 * * * *",
        "func": "tests.jobs:add", "args": "[2, 3]", "kwargs": "", "timezone": "UTC",
        "priority": "4", "csrf": csrf, "next": "/scheduled"})
    assert "Cron entry tick on default added" in page.text
    entry = cron.get_entry(r, settings, "tick")
    assert entry.args == [2, 3] and entry.priority == 4 and entry.runs == 0
    for bad, needle in (({"schedule": "every tuesday"}, "schedule"),
                        ({"func": "os:system"}, "nor in an allowed module"),
                        ({"args": "{oops"}, "args must be JSON")):
        data = {"action": "cron-add", "name": "bad", "queue": "default",
                "schedule": "* * * * *", "func": "tests.jobs:add", "csrf": csrf,
                "next": "/scheduled", **bad}
        answer = client.post("/action", data=data)
        assert needle in answer.text, (bad, answer.text[-500:])
    assert [e["name"] for e in client.get("/api/v1/cron", headers=BEARER).json()["cron"]] == [
        "tick"]
    run = client.post("/action", data={"action": "cron-run", "name": "tick",
                                       "queue": "default", "csrf": csrf})
    assert "Cron entry tick: job" in run.text
    made = client.post("/api/v1/cron/tick/run", headers=BEARER).json()
    job = queue("default").fetch_job(made["job_id"])
    assert job.func == "tests.jobs:add" and job.args == [2, 3] and job.priority == 4
    added = client.post("/api/v1/cron", headers=BEARER, json={
        "name": "other", "schedule": "0 * * * *", "func": "tests.jobs:noop",
        "queue": "default"})
    assert added.status_code == 201 and added.json()["name"] == "other"
    assert client.post("/api/v1/cron", headers=BEARER, json={
        "name": "x", "schedule": "0 * * * *", "func": "tests.jobs:noop",
        "args": {"a": 1}}).status_code == 400
    assert client.post("/api/v1/cron/nope/run", headers=BEARER).status_code == 404
    reasons = admin_reasons(r, settings)
    assert reasons.count("cron-add") == 2 and reasons.count("cron-run") == 2


def test_read_only_hides_the_new_actions(r, settings, queue, burst):
    q = queue("default")
    q.enqueue("tests.jobs:boom")
    q.enqueue_in(3600, "tests.jobs:add", 1, 2)
    burst("default")
    with TestClient(create_app(settings.replace(web_token=TOKEN), r, read_only=True),
                    headers=SAME_SITE) as c:
        for url in ("/failed", "/scheduled", "/retries", "/queues/default", "/batches"):
            page = c.get(url, headers=BEARER)
            assert page.status_code == 200 and "/action" not in page.text, url
        csrf = form_login(c, TOKEN)
        refused = c.post("/action", data={"action": "rate-limit", "queue": "default",
                                          "rate": "1/s", "csrf": csrf})
        assert refused.status_code == 403 and q.rate_limit is None


def test_every_api_route_is_in_the_openapi_description(client):
    from starlette.routing import Route

    spec = client.get("/api/v1/openapi.json", headers=BEARER).json()["paths"]
    generic = {"/api/v1/openapi.json", "/api/v1/jobs/{id}/{action}",
               "/api/v1/queues/{q}/{action}", "/api/v1/cron/{name}/{action}"}  # one path each
    checked = 0
    for route in client.app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/v1/") and (
                route.path not in generic) and ":path}" not in route.path:  # "/" in an id
            for method in (route.methods or set()) - {"HEAD"}:
                assert method.lower() in spec.get(route.path, {}), (route.path, method)
                checked += 1
    assert checked >= 24
