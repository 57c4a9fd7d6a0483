"""Live pages: the job page and the queue pages follow Redis without a reload, by
polling their live endpoints (which answer nothing new while nothing changed),
and ask nothing while the tab is hidden. API through Starlette's TestClient,
pages in a real headless Chromium; the real Redis and real worker processes."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.web import create_app
from tests.waiting import wait_for
from tests.web_support import SAME_SITE, browser_missing

TOKEN = "live-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
_missing = browser_missing()
needs_browser = pytest.mark.skipif(_missing is not None, reason=f"no browser: {_missing}")


@pytest.fixture
def client(r, settings):
    with TestClient(create_app(settings.replace(web_token=TOKEN), r),
                    headers=SAME_SITE) as c:
        yield c


def test_job_live_answers_nothing_new_until_the_record_changes(client, queue, r):
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2, priority=3)
    page = client.get(f"/jobs/{job.id}", headers=BEARER).text
    seen = page.split('data-seen="', 1)[1].split('"', 1)[0]
    url = f"/api/v1/jobs/{job.id}/live?queue=default"
    same = client.get(f"{url}&seen={seen}", headers=BEARER).json()
    assert same == {"changed": False, "seen": seen}
    q.reprioritize(job.id, 9)
    moved = client.get(f"{url}&seen={seen}", headers=BEARER).json()
    assert moved["changed"] and moved["seen"] != seen and moved["status"] == "queued"
    assert 'id="job-priority">9<' in moved["html"]
    assert '<html' not in moved["html"]          # the body only, not a whole page
    missing = client.get("/api/v1/jobs/nope/live?queue=default", headers=BEARER)
    assert missing.status_code == 404
    assert client.get(f"{url}&seen={seen}").status_code == 401


def test_queue_live_sends_rows_only_when_the_page_changed(client, queue):
    q = queue("default")
    jobs = [q.enqueue("tests.jobs:add", i, 0) for i in range(3)]
    url = "/api/v1/queues/default/live?status=queued"
    first = client.get(url, headers=BEARER).json()
    assert first["counts"]["queued"] == 3 and "pending 3" in first["stats"]
    assert all(f'data-job="{j.id}"' in first["rows"] for j in jobs)
    again = client.get(f"{url}&seen={first['seen']}", headers=BEARER).json()
    assert "rows" not in again and again["seen"] == first["seen"]
    new = q.enqueue("tests.jobs:add", 9, 9)
    after = client.get(f"{url}&seen={first['seen']}", headers=BEARER).json()
    assert after["counts"]["queued"] == 4 and f'data-job="{new.id}"' in after["rows"]
    assert "4 jobs" in after["pager"]
    # a filter on the records keeps its rows: no rescan per poll
    filtered = client.get(url + "&function=add", headers=BEARER).json()
    assert "rows" not in filtered and filtered["counts"]["queued"] == 4
    assert client.get("/api/v1/queues/nosuch/live", headers=BEARER).status_code == 404


@pytest.fixture
def base(r, settings, driver):
    from tests.web_support import dashboard, login

    with dashboard(r, settings, driver, TOKEN, poll_interval=0.3) as url:
        login(driver, url, TOKEN)
        yield url


def text_of(driver, element_id):
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.ID, element_id)
    return found[0].text if found else ""


@needs_browser
@pytest.mark.slow
def test_job_page_follows_status_progress_and_meta_without_reload(base, driver, queue,
                                                                    processes, settings, r):
    from tests.web_support import wait

    q = queue("default")
    key = f"{settings.prefix}:go"
    job = q.enqueue("tests.progress_jobs:report_then_wait", settings.redis_url, key, 0.4,
                    "step one")
    driver.get(f"{base}/jobs/{job.id}?queue=default")
    assert text_of(driver, "job-status") == "queued"
    driver.execute_script("window.__notReloaded = true;")
    processes.worker("--customq", "default")
    wait(driver, lambda d: text_of(d, "job-status") == "started", timeout=30)
    wait(driver, lambda d: "40 %" in text_of(d, "job-progress") and "step one" in
         text_of(d, "job-progress"))
    wait(driver, lambda d: '"stage": "running"' in text_of(d, "job-meta"))
    r.rpush(key, "go")
    wait(driver, lambda d: text_of(d, "job-status") == "finished", timeout=30)
    assert "100 %" in text_of(driver, "job-progress")
    assert '"stage": "done"' in text_of(driver, "job-meta")
    assert driver.execute_script("return window.__notReloaded === true;")


@needs_browser
@pytest.mark.slow
def test_queue_page_follows_counts_and_rows_and_pauses_while_hidden(base, driver, queue):
    from selenium.webdriver.common.by import By

    from tests.web_support import wait

    q = queue("default")
    for i in range(2):
        q.enqueue("tests.jobs:add", i, 0)
    driver.get(f"{base}/queues/default")
    driver.execute_script("window.__notReloaded = true;")

    def count(d, status="queued"):
        return d.find_element(By.CSS_SELECTOR, f'#tabs [data-k="{status}"]').text

    def rows(d):
        return len(d.find_elements(By.CSS_SELECTOR, "#job-rows tr[data-job]"))

    assert count(driver) == "2" and rows(driver) == 2
    later = q.enqueue("tests.jobs:add", 5, 5)
    wait(driver, lambda d: count(d) == "3" and rows(d) == 3)
    assert driver.find_elements(By.CSS_SELECTOR, f'#job-rows tr[data-job="{later.id}"]')
    # a hidden tab asks nothing
    driver.execute_script("""
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
        document.dispatchEvent(new Event('visibilitychange'));""")
    time.sleep(0.8)   # let a poll in flight land
    stamp = driver.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed")
    q.enqueue("tests.jobs:add", 6, 6)
    time.sleep(1.5)   # five poll intervals
    assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed") == stamp
    assert count(driver) == "3"
    driver.execute_script("""
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
        document.dispatchEvent(new Event('visibilitychange'));""")
    wait(driver, lambda d: count(d) == "4" and rows(d) == 4)
    assert driver.execute_script("return window.__notReloaded === true;")


@needs_browser
@pytest.mark.slow
def test_failed_and_worker_pages_follow_without_reload(base, driver, queue, processes,
                                                       settings):
    from selenium.webdriver.common.by import By

    from fusionworker.events import flush_default_sinks
    from tests.web_support import wait

    q = queue("default")
    processes.worker("--customq", "default", "--name", "livew")
    first = q.enqueue_call("tests.jobs:boom", ["one"], max_retries=0)
    driver.get(f"{base}/failed")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{first.id}"]'),
         timeout=30)
    driver.execute_script("window.__notReloaded = true;")
    later = q.enqueue_call("tests.jobs:boom", ["two"], max_retries=0)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{later.id}"]'),
         timeout=30)
    # a ticked box holds the rows still (the selection is not lost)
    driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{later.id}"] input').click()
    third = q.enqueue_call("tests.jobs:boom", ["three"], max_retries=0)
    wait_for(lambda: q.fetch_job(third.id).status == "failed", timeout=30)
    time.sleep(1.0)
    assert not driver.find_elements(By.CSS_SELECTOR, f'tr[data-job="{third.id}"]')
    assert driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{later.id}"] input').is_selected()
    assert driver.execute_script("return window.__notReloaded === true;")
    # the worker's page: its next outcome appears
    driver.get(f"{base}/workers/livew")
    driver.execute_script("window.__notReloaded = true;")
    done = q.enqueue("tests.jobs:add", 2, 2)
    wait_for(lambda: q.fetch_job(done.id).status == "finished", timeout=30)
    flush_default_sinks(5)
    wait(driver, lambda d: done.id[:12] in d.find_element(By.ID, "outcomes").text, timeout=30)
    assert driver.execute_script("return window.__notReloaded === true;")


@needs_browser
@pytest.mark.slow
def test_the_overviews_refresh_writes_a_rate_cell_as_the_page_did(base, driver, queue, r):
    # 1.25 s held: Python's "{:.1f}" writes 1.2 (an exact half goes to the even digit),
    # a bare toFixed(1) 1.3; the cell must not change at the first refresh
    from selenium.webdriver.common.by import By

    from tests.web_support import wait

    q = queue("limited")
    q.set_rate_limit("10/s")
    q.enqueue("tests.jobs:add", 1, 2)
    r.hset(q.qkeys.rate, "held_seconds", "1.25")
    driver.get(base + "/")

    def cell(d, key):
        return d.find_element(By.CSS_SELECTOR, f'#queues tr[data-queue="limited"] [data-k="{key}"]').text

    assert cell(driver, "rate") == "10/s (held 1.2 s)"
    q.enqueue("tests.jobs:add", 3, 4)              # a refresh has come once this shows
    wait(driver, lambda d: cell(d, "pending") == "2")
    assert cell(driver, "rate") == "10/s (held 1.2 s)"
