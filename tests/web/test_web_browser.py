"""The dashboard in a real headless Chromium (Debian's chromium + chromium-driver),
driven by Selenium, served by uvicorn on a free loopback port, on the real Redis."""

from __future__ import annotations

import pytest

from tests.web_support import browser_missing

_missing = browser_missing()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_missing is not None, reason=f"no browser: {_missing}")]

if _missing is None:
    from selenium.webdriver.common.by import By

    from tests.web_support import dashboard, login, wait

TOKEN = "browser-token"


@pytest.fixture
def base(r, settings, driver):
    with dashboard(r, settings, driver, TOKEN, poll_interval=0.3) as url:
        yield url


def cell(driver, queue, key):
    return driver.find_element(
        By.CSS_SELECTOR, f'#queues tr[data-queue="{queue}"] [data-k="{key}"]').text


def test_refused_without_a_token(base, driver, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    driver.get(base + "/")
    assert "/login" in driver.current_url
    assert not driver.find_elements(By.ID, "queues")
    driver.get(base + "/api/v1/queues")
    assert "authentication required" in driver.find_element(By.TAG_NAME, "body").text
    driver.get(base + "/login")
    driver.find_element(By.ID, "token").send_keys("wrong")
    driver.find_element(By.ID, "login").click()
    wait(driver, lambda d: "wrong token" in d.find_element(By.ID, "login-error").text)
    assert not driver.find_elements(By.ID, "queues")


def test_overview_counts_change_live_without_reload(base, driver, queue, processes):
    q = queue("default")
    for i in range(5):
        q.enqueue("tests.jobs:add", i, 1)
    login(driver, base, TOKEN)
    assert cell(driver, "default", "pending") == "5"
    assert cell(driver, "default", "finished") == "0"
    driver.execute_script("window.__notReloaded = true;")
    processes.worker("--customq", "default", "--burst")
    wait(driver, lambda d: cell(d, "default", "finished") == "5", timeout=30)
    assert cell(driver, "default", "pending") == "0"
    assert driver.execute_script("return window.__notReloaded === true;")
    # the chart was redrawn from the API with the new counts
    wait(driver, lambda d: "finished (green) 5" in d.find_element(By.ID, "chart").text)


def test_requeue_a_failed_job_with_the_button_and_see_it_finish(base, driver, queue, burst,
                                                                 settings):
    q = queue("default")
    job = q.enqueue("tests.jobs:flaky", settings.redis_url, f"{settings.prefix}:flaky", 1)
    burst("default")
    assert q.fetch_job(job.id).status == "failed"
    login(driver, base, TOKEN)
    driver.get(f"{base}/failed")
    assert job.id in driver.find_element(By.ID, "jobs").get_attribute("innerHTML")
    driver.get(f"{base}/jobs/{job.id}")
    assert driver.find_element(By.ID, "job-status").text == "failed"
    assert "transient failure 1" in driver.find_element(By.CSS_SELECTOR, "pre.traceback").text
    driver.find_element(By.CSS_SELECTOR, 'button[data-action="requeue"]').click()
    wait(driver, lambda d: "requeue done" in d.find_element(By.ID, "flash").text)
    assert driver.find_element(By.ID, "job-status").text == "queued"
    burst("default")
    driver.refresh()
    assert driver.find_element(By.ID, "job-status").text == "finished"
    assert q.fetch_job(job.id).status == "finished"


def test_shut_down_a_worker_from_its_page(base, driver, processes, r, settings):
    """The worker page's Shut down button: a confirmation, then the worker (a real
    process) stops warm and leaves the list, where the message is shown (its own page
    is gone once it stops: an idle worker can stop before the redirect is followed)."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from fusionworker.core.keys import Keys
    from tests.waiting import wait_for

    proc = processes.worker("-q", "default", "--name", "w-page")
    wait_for(lambda: r.exists(Keys(settings.prefix).worker("w-page")) or proc.poll() is not None,
             timeout=60, what="the worker registered")
    login(driver, base, TOKEN)
    driver.get(f"{base}/workers/w-page")
    # outside the live region: the page's refresh (its heartbeat age changes every
    # poll) never replaces the buttons under a click
    region = driver.find_element(By.ID, "refresh")
    assert not region.find_elements(By.CSS_SELECTOR, "#worker-actions")
    warm, cold = driver.find_elements(By.CSS_SELECTOR, "#worker-actions button")
    assert (warm.text, cold.text) == ("Shut down", "Shut down cold")
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed"))
    warm.click()                                   # the same element, after a refresh
    WebDriverWait(driver, 5).until(expected_conditions.alert_is_present()).accept()
    wait(driver, lambda d: "warm shutdown asked" in d.find_element(By.ID, "flash").text)
    assert driver.current_url.split("?")[0] == f"{base}/workers"
    assert proc.wait(30) == 0
    assert not r.exists(Keys(settings.prefix).worker("w-page"))
    driver.get(f"{base}/workers")
    assert "w-page" not in driver.find_element(By.TAG_NAME, "main").text


def test_change_a_priority(base, driver, queue):
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2, priority=3)
    login(driver, base, TOKEN)
    driver.get(f"{base}/jobs/{job.id}")
    box = driver.find_element(By.CSS_SELECTOR, '#priority-form input[name="priority"]')
    box.clear()
    box.send_keys("77")
    driver.find_element(By.CSS_SELECTOR, "#priority-form button").click()
    wait(driver, lambda d: d.find_element(By.ID, "job-priority").text == "77")
    assert "set to 77" in driver.find_element(By.ID, "flash").text
    assert q.fetch_job(job.id).priority == 77
    # bad input: a message, nothing written
    box = driver.find_element(By.CSS_SELECTOR, '#priority-form input[name="priority"]')
    box.clear()
    box.send_keys("5000")
    driver.find_element(By.CSS_SELECTOR, "#priority-form button").click()
    wait(driver, lambda d: d.find_elements(By.ID, "flash-error"))
    assert "between -1023 and 1023" in driver.find_element(By.ID, "flash-error").text
    assert q.fetch_job(job.id).priority == 77


def test_pause_a_queue(base, driver, queue):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    driver.find_element(
        By.CSS_SELECTOR, '#queues tr[data-queue="default"] button[data-action="pause"]').click()
    wait(driver, lambda d: "paused" in d.find_element(By.ID, "flash").text)
    assert q.is_paused
    assert cell(driver, "default", "state") == "paused"
    driver.find_element(
        By.CSS_SELECTOR, '#queues tr[data-queue="default"] button[data-action="unpause"]').click()
    wait(driver, lambda d: "unpaused" in d.find_element(By.ID, "flash").text)
    assert not q.is_paused


def test_phone_width_layout(base, driver, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    driver.set_window_size(390, 844)
    try:
        driver.get(base + "/")
        width = driver.execute_script("return document.documentElement.scrollWidth")
        inner = driver.execute_script("return window.innerWidth")
        assert width <= inner   # the page itself does not scroll sideways; tables do
        assert driver.find_element(By.ID, "queues").is_displayed()
    finally:
        driver.set_window_size(1280, 900)
