"""Phone width and dark mode in a real headless Chromium (Debian's chromium +
chromium-driver): no page scrolls sideways at 390 px, rows become cards with
the key cells first, and the background follows prefers-color-scheme and the
header's toggle (kept across pages)."""

from __future__ import annotations

import re
import time

import pytest

from tests.web_support import browser_missing

_missing = browser_missing()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_missing is not None, reason=f"no browser: {_missing}")]

if _missing is None:
    from selenium.webdriver.common.by import By

    from tests.web_support import dashboard, login, wait

TOKEN = "layout-token"


@pytest.fixture
def base(r, settings, driver):
    # no refresh while a test looks at a page (the live tests are in test_web_live.py)
    with dashboard(r, settings, driver, TOKEN, poll_interval=600) as url:
        yield url


def busy_state(queue, burst):
    """A queue with every kind of row: long function names, a failed job with a long
    error and traceback, a deferred job, a finished one."""
    q = queue("a-rather-long-queue-name-for-phones")
    first = q.enqueue("tests.jobs:add", 1, 2)
    failed = q.enqueue("tests.jobs:boom", "x" * 400)
    burst(q.name)
    q.enqueue("tests.jobs:add", 3, 4, depends_on=first)
    for i in range(5):
        q.enqueue("tests.jobs:add", i, 10 ** 30)
    return q, failed


def no_sideways_scroll(driver) -> tuple[int, int]:
    return (driver.execute_script("return document.documentElement.scrollWidth"),
            driver.execute_script("return window.innerWidth"))


def background(driver) -> tuple[int, ...]:
    css = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    return tuple(int(n) for n in re.findall(r"\d+", css)[:3])


def test_no_horizontal_scroll_at_390_px_and_rows_are_cards(base, driver, queue, burst):
    q, failed = busy_state(queue, burst)
    login(driver, base, TOKEN)
    driver.set_window_size(390, 844)
    try:
        width = driver.execute_script("return window.innerWidth")
        assert width <= 390
        pages = ["/", f"/queues/{q.name}", f"/queues/{q.name}?status=deferred", "/failed",
                 f"/jobs/{failed.id}", "/workers", "/scheduled", "/retries", "/batches",
                 "/charts", "/search?q=add"]
        for path in pages:
            driver.get(base + path)
            scroll, inner = no_sideways_scroll(driver)
            assert scroll <= inner, (path, scroll, inner)
        # the failed page: each row a card, the error cut to two lines
        driver.get(base + "/failed")
        row = driver.find_element(By.CSS_SELECTOR, f'#jobs tr[data-job="{failed.id}"]')
        assert driver.execute_script("return getComputedStyle(arguments[0]).display", row) == "flex"
        assert row.size["height"] < 110
        assert not driver.find_element(By.CSS_SELECTOR, "#jobs thead").is_displayed()
        # key cells first: the job link and its failure time, then the error; the
        # priority and enqueue time are left to the job page
        cells = row.find_elements(By.CSS_SELECTOR, "td")
        tops = {c.get_attribute("data-label") or c.get_attribute("class"): c.location["y"]
                for c in cells if c.is_displayed()}
        assert tops["first"] <= tops["failed"] < tops["err"]
        assert "enqueued" not in tops and "priority" not in tops
        # the charts are drawn at the phone's width: 12 px text stays 12 px
        driver.get(base + "/charts")
        chart = driver.find_element(By.CSS_SELECTOR, "#chart-failures svg")
        box = driver.find_element(By.ID, "chart-failures")
        assert chart.size["width"] <= box.size["width"] <= 390
        label = driver.find_element(By.CSS_SELECTOR, "#chart-throughput svg text")
        assert label.size["height"] >= 12
        driver.get(base + "/")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg text"))
        assert driver.find_element(By.CSS_SELECTOR, "#chart svg").size["width"] <= 390
        assert driver.find_element(By.CSS_SELECTOR, "#chart svg text").size["height"] >= 12
        card = driver.find_element(By.CSS_SELECTOR, f'#queues tr[data-queue="{q.name}"]')
        pending = card.find_element(By.CSS_SELECTOR, '[data-k="pending"]')
        label = driver.execute_script(
            "return getComputedStyle(arguments[0], '::before').content", pending)
        assert "pending" in label      # each value is labelled on a card
        assert not card.find_element(By.CSS_SELECTOR, '[data-k="high"]').is_displayed()
    finally:
        driver.set_window_size(1280, 900)
    # at desktop width the same tables are tables, and every page fits too
    driver.get(base + "/failed")
    assert driver.find_element(By.CSS_SELECTOR, "#jobs thead").is_displayed()
    for path in pages:
        driver.get(base + path)
        assert driver.find_element(By.TAG_NAME, "h1").text, path
        scroll, inner = no_sideways_scroll(driver)
        assert scroll <= inner, (path, scroll, inner)


def test_a_laptops_overview_shows_each_queues_state_and_pause_without_scrolling(base, driver,
                                                                             queue):
    # twelve long queue names: at 1,280 px the priority bands give way (they add up to
    # Pending) and the whole table fits its box; from 1,500 px the bands are back
    for i in range(12):
        q = queue(f"notifications-{i:02d}-transactional")
        q.set_rate_limit("100/s")
        q.enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    try:
        for width, bands in ((1280, False), (1600, True)):
            driver.set_window_size(width, 900)
            driver.get(base + "/")
            table = driver.find_element(By.ID, "queues")
            fits = driver.execute_script(
                "var t = arguments[0]; return [t.scrollWidth, t.parentElement.clientWidth]", table)
            assert fits[0] <= fits[1], (width, fits)
            inner = driver.execute_script("return window.innerWidth")
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr"):
                button = row.find_element(By.CSS_SELECTOR, "button")
                assert button.text == "Pause"
                assert button.location["x"] + button.size["width"] <= inner, (width, row.text)
            high = table.find_element(By.CSS_SELECTOR, 'thead th.band')
            assert high.is_displayed() is bands, width
    finally:
        driver.set_window_size(1280, 900)


def test_dark_mode_follows_the_system_and_the_toggle_is_kept(base, driver, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    driver.execute_script("localStorage.removeItem('fw-theme')")
    try:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        driver.get(base + "/")
        assert max(background(driver)) < 60          # dark
        driver.find_element(By.ID, "theme-toggle").click()
        wait(driver, lambda d: min(background(d)) > 200)  # light, on the user's word
        driver.get(base + "/workers")               # kept on the next page
        assert min(background(driver)) > 200
        driver.find_element(By.ID, "theme-toggle").click()
        wait(driver, lambda d: max(background(d)) < 60)
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "light"}]})
        driver.get(base + "/")
        assert max(background(driver)) < 60          # the toggle wins over the system
        driver.execute_script("localStorage.removeItem('fw-theme')")
        driver.get(base + "/")
        assert min(background(driver)) > 200
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.execute_script("localStorage.removeItem('fw-theme')")


def test_search_by_job_id_and_by_function(base, driver, queue):
    q = queue("default")
    job = q.enqueue("tests.jobs:add", 1, 2)
    q.enqueue("tests.jobs:sleep", 1)
    login(driver, base, TOKEN)
    box = driver.find_element(By.ID, "search")
    box.send_keys(job.id + "\n")
    wait(driver, lambda d: d.find_element(By.ID, "job-status").text == "queued")
    assert f"/jobs/{job.id}" in driver.current_url
    box = driver.find_element(By.ID, "search")
    box.send_keys("jobs:sle\n")
    wait(driver, lambda d: "/search" in d.current_url)
    rows = driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-job]")
    assert len(rows) == 1 and "tests.jobs:sleep" in rows[0].text


def test_actions_at_phone_width_in_dark_mode(base, driver, queue, burst, r, settings):
    """Rate limit, cron add and run now, run now of a delayed job and a requeue from
    the failed page, each by its button at 390 px with the dark scheme."""
    from fusionworker.middleware import cron

    q = queue("default")
    delayed = q.enqueue_in(3600, "tests.jobs:add", 1, 2)
    failed = q.enqueue_call("tests.jobs:boom", max_retries=0)
    burst("default")
    login(driver, base, TOKEN)
    driver.set_window_size(390, 844)
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        driver.get(base + "/queues/default")
        assert max(background(driver)) < 60
        form = driver.find_element(By.ID, "rate-form")
        form.find_element(By.NAME, "rate").send_keys("5/s")
        form.find_element(By.TAG_NAME, "button").click()
        wait(driver, lambda d: "rate limit 5/s" in d.find_element(By.ID, "flash").text)
        assert "5 per s" in driver.find_element(By.ID, "rate-queue").text
        assert q.rate_limit["limit"] == 5
        driver.get(base + "/scheduled")
        driver.find_element(By.CSS_SELECTOR, "#cron-add summary").click()
        form = driver.find_element(By.ID, "cron-form")
        for name, value in (("name", "tick"), ("schedule", "0 * * * *"),
                            ("func", "tests.jobs:add"), ("args", "[1, 1]")):
            form.find_element(By.NAME, name).send_keys(value)
        form.find_element(By.TAG_NAME, "button").click()
        wait(driver, lambda d: "tick on default added" in d.find_element(By.ID, "flash").text)
        assert cron.get_entry(r, settings, "tick").args == [1, 1]
        driver.find_element(By.CSS_SELECTOR, '#cron button[data-action="cron-run"]').click()
        wait(driver, lambda d: "job" in d.find_element(By.ID, "flash").text)
        assert q.stats()["pending"] == 1
        driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{delayed.id}"] '
                                             'button[data-action="run-now"]').click()
        wait(driver, lambda d: "runs now" in d.find_element(By.ID, "flash").text)
        assert r.zscore(q.qkeys.scheduled, delayed.id) <= time.time() + 1
        driver.get(base + "/failed")
        driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{failed.id}"] input').click()
        driver.find_element(By.CSS_SELECTOR, 'button[value="requeue-selected"]').click()
        wait(driver, lambda d: "requeue: 1 job(s)" in d.find_element(By.ID, "flash").text)
        assert q.fetch_job(failed.id).status == "queued"
        scroll, inner = no_sideways_scroll(driver)
        assert scroll <= inner
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.set_window_size(1280, 900)
