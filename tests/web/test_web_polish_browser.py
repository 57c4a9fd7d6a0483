"""The dashboard's operator polish in a real headless Chromium, after the pages' own
script has polled at least once: the overview's Rate column, every job of a 2-slot
worker, a cron entry's next run in its own zone, a job page with many progress updates
of bounded height, and the duration chart with one minute of data."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from fusionworker.core.keys import Keys
from fusionworker.events import flush_default_sinks
from fusionworker.events import metrics_history as mh
from fusionworker.events.middleware import emit_job_event
from fusionworker.middleware import cron
from tests.waiting import wait_for
from tests.web_support import browser_missing

_missing = browser_missing()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_missing is not None, reason=f"no browser: {_missing}")]

if _missing is None:
    from selenium.webdriver.common.by import By

    from tests.web_support import dashboard, login, wait

TOKEN = "polish-token"


@pytest.fixture
def base(r, settings, driver):
    with dashboard(r, settings, driver, TOKEN, poll_interval=0.3) as url:
        yield url


def polled(driver):
    """Wait until the page's script has refreshed what it shows (at least one poll)."""
    driver.execute_script("document.body.removeAttribute('data-refreshed');")
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed"))


def test_the_overview_shows_a_rate_limited_queues_rate(base, driver, queue):
    limited, free = queue("limited"), queue("free")
    limited.set_rate_limit("10/s")
    limited.enqueue("tests.jobs:add", 1, 2)
    free.enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    polled(driver)
    # each read asked again when the page's script redrew the table under it
    wait(driver, lambda d: "Rate" in [th.text for th in d.find_elements(
        By.CSS_SELECTOR, "#queues thead th")])

    def rate(name):
        return driver.find_element(
            By.CSS_SELECTOR, f'#queues tr[data-queue="{name}"] [data-label="rate"]').text

    wait(driver, lambda d: rate("limited") == "10/s" and rate("free") == "-")
    free.set_rate_limit("5/m")              # set while the page is open: shown live
    driver.execute_script("window.__notReloaded = true;")
    wait(driver, lambda d: rate("free") == "5/m")
    assert driver.execute_script("return window.__notReloaded === true;")
    # a limit per group says what it is, as info does (it said "per group" only)
    free.set_rate_limit("1/s", per_group=True)
    free.set_rate_limit("3/m", group="acme")
    both = "5/m · 1/s per group, 1 group own"
    wait(driver, lambda d: rate("free") == both)          # redrawn by the page's script
    driver.get(base + "/")
    assert rate("free") == both                             # as the server writes it


def test_a_job_id_holding_a_percent_sign_links_to_its_page(base, driver, queue):
    """The queue page's link of a job ``pct%41`` (an id is free text) leads to that job
    on a real server (it was not encoded: a 404; found by an attack)."""
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2, job_id="pct%41")
    login(driver, base, TOKEN)
    driver.get(base + "/queues/default")
    link = wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, 'tr[data-job="pct%41"] a'))
    assert link.get_attribute("href").endswith("/jobs/pct%2541?queue=default")
    link.click()
    wait(driver, lambda d: "pct%41" in d.find_element(By.TAG_NAME, "h1").text)


def test_a_two_slot_worker_shows_both_running_job_ids(base, driver, processes, queue,
                                                      redis_url, r, settings):
    q = queue("default")
    key = f"{settings.prefix}:pids"
    processes.worker("-q", "default", "--concurrency", "2")
    jobs = [q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600) for _ in range(2)]
    wait_for(lambda: r.llen(key) == 2, what="both jobs running")
    login(driver, base, TOKEN)
    driver.get(base + "/workers")
    polled(driver)            # the table as the page's script redraws it
    ids = {j.id for j in jobs}
    # read again when a redraw replaced a link between finding it and reading its text
    wait(driver, lambda d: {a.text for a in d.find_elements(
        By.CSS_SELECTOR, '#workers [data-label="job"] a')} == ids)


def test_cron_next_run_in_its_own_zone_with_a_label(base, driver, r, settings):
    entry = cron.register(r, settings, "berlin", "0 3 * * *", "tests.jobs:noop",
                          timezone="Europe/Berlin")
    login(driver, base, TOKEN)
    driver.get(base + "/scheduled")
    shown = datetime.fromtimestamp(entry.next_run, ZoneInfo("Europe/Berlin"))
    cell = driver.find_element(By.CSS_SELECTOR, '[data-label="next"]').text
    assert cell == f"{shown:%Y-%m-%d} 03:00:00 Europe/Berlin"


def test_a_running_jobs_page_with_many_progress_updates_stays_short(
        base, driver, processes, queue, redis_url, r, settings):
    q = queue("default")
    key = f"{settings.prefix}:pids"
    processes.worker("-q", "default")
    job = q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600)
    wait_for(lambda: r.llen(key) == 1, what="the job running")

    for n in range(200):      # the events a job reporting progress writes
        emit_job_event(settings, "progress", job, connection=r, progress=n / 200,
                       progress_message=f"step {n}")
    flush_default_sinks(5)
    login(driver, base, TOKEN)
    driver.get(f"{base}/jobs/{job.id}?queue=default")
    # the latest five, in the stream's order (events of one millisecond were shuffled)
    wait(driver, lambda d: "step 199" in d.find_element(By.ID, "timeline").text)
    assert driver.find_element(By.ID, "job-status").text == "started"
    rows = driver.find_element(By.ID, "timeline").text
    assert [f"step {n}" in rows for n in (194, 195, 199)] == [False, True, True]
    height = driver.execute_script("return document.body.scrollHeight")
    assert height < 3000, height   # 1,066 px here; the 200 rows unbounded were 7,850 px


def test_the_duration_chart_with_one_minute_of_data(base, driver, queue, r, settings):
    queue("default").enqueue("tests.jobs:add", 1, 2)     # a known queue
    login(driver, base, TOKEN)
    driver.get(base + "/charts")            # nothing yet: said, not empty axes
    box = driver.find_element(By.ID, "chart-durations")
    assert "Not enough data yet" in box.text and not box.find_elements(By.TAG_NAME, "svg")
    stream = Keys(settings.prefix).events
    for d in [0.010] * 9 + [0.200]:
        r.xadd(stream, {"event": "completed", "queue": "default", "job_id": "x",
                        "duration": repr(d)})

    def counted():             # by this call or by the dashboard's own recorder
        mh.record_from_stream(r, settings.prefix)
        return mh.history(r, settings.prefix, ["default"], "hour")["total"]["finished"] == 10

    wait_for(counted, what="the ten outcomes counted")
    driver.get(base + "/charts")
    box = driver.find_element(By.ID, "chart-durations")
    dots = box.find_elements(By.CSS_SELECTOR, "svg circle")
    assert len(dots) == 3                   # one minute: a dot per percentile, no line
    assert all(dot.is_displayed() and dot.size["width"] > 0 for dot in dots)
    legend = box.find_element(By.CSS_SELECTOR, ".legend").text
    assert "one minute of data so far" in legend
    total = mh.history(r, settings.prefix, ["default"], "hour")["total"]
    assert f"p50 {total['p50']:g}" in legend and f"p99 {total['p99']:g}" in legend
