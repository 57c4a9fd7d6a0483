"""The dashboard's Stop: the API call and the job page's button (CSRF-checked, audited,
refused read-only: the last in test_web_api.py's ENDPOINTS), on a real worker."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core.job import JobStatus
from fusionworker.web import create_app
from tests.waiting import wait_for
from tests.web.test_web_api import TOKEN, admin_events, api, login
from tests.web_support import SAME_SITE


@pytest.fixture
def client(r, settings):
    with TestClient(create_app(settings.replace(web_token=TOKEN), r)) as c:
        yield c


def test_the_api_and_the_button_stop_a_running_job(client, queue, processes, redis_url, r,
                                                   settings):
    q = queue("default")
    key = f"{settings.prefix}:pids"
    processes.worker("-q", "default", "--concurrency", "2")
    first = q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600)
    second = q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600)
    wait_for(lambda: r.llen(key) == 2, what="both jobs running")
    answer = api(client, "POST", f"/api/v1/jobs/{first.id}/stop")
    assert answer.status_code == 200 and answer.json()["status"] in ("started", "stopped")
    wait_for(lambda: first.get_status() == JobStatus.STOPPED, what="stopped through the API")
    csrf = login(client)
    page = client.get(f"/jobs/{second.id}?queue=default").text
    assert 'value="stop"' in page
    form = {"action": "stop", "queue": "default", "job_id": second.id}
    refused = client.post("/action", data=form, headers=SAME_SITE)
    assert refused.status_code == 403 and second.get_status() == JobStatus.STARTED
    done = client.post("/action", data={**form, "csrf": csrf}, headers=SAME_SITE,
                       follow_redirects=False)
    assert done.status_code == 303 and "stop" in done.headers["location"]
    wait_for(lambda: second.get_status() == JobStatus.STOPPED, what="stopped by the button")
    assert 'value="stop"' not in client.get(f"/jobs/{second.id}?queue=default").text
    again = api(client, "POST", f"/api/v1/jobs/{first.id}/stop")
    assert again.status_code == 409 and "ended already" in again.json()["error"]
    # listed as stopped (kept in the failed registry, as RQ's): the API, Python, the CLI
    failed = q.job_ids("failed")
    other = q.enqueue("tests.jobs:boom", "no luck", max_retries=0)   # failed, not stopped
    wait_for(lambda: other.get_status() == JobStatus.FAILED, what="a plain failure")
    listed = api(client, "GET", "/api/v1/jobs?queue=default&status=stopped").json()
    assert sorted(j["id"] for j in listed["jobs"]) == sorted([first.id, second.id])
    assert sorted(q.job_ids("stopped")) == sorted([first.id, second.id]) == sorted(failed)
    assert other.id in q.job_ids("failed") and other.id not in q.job_ids("stopped")
    # the queue page's 2 s poll keeps a scanned listing's rows (they follow its `start`)
    live = api(client, "GET", "/api/v1/queues/default/live?status=stopped").json()
    assert "rows" not in live and live["counts"]["failed"] == 3
    audited = [(e["reason"], e["job_id"]) for e in admin_events(r, settings)]
    assert ("stop", first.id) in audited and ("stop", second.id) in audited
