"""The dashboard's defences in a real headless Chromium (issue #30, item 3): a page
served from another port of the same host can neither act for the logged-in user
nor frame the dashboard, and the pages run under their Content-Security-Policy
without one violation while they update live."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.web_support import browser_missing

_missing = browser_missing()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_missing is not None, reason=f"no browser: {_missing}")]

if _missing is None:
    from selenium.webdriver.common.by import By
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    from tests.web_support import dashboard, login, serve, wait

TOKEN = "browser-sec-token"

#: posts the pause form to the dashboard with whatever token it can find in the cookies
#: the browser shares between the ports of one host
ATTACK = """<!doctype html><title>attacker</title>
<form id="f" method="post" action="{dash}/action">
<input name="action" value="pause"><input name="queue" value="default">
<input name="next" value="/"><input name="csrf" id="c"></form>
<script>
var m = document.cookie.match(/(?:^|; )fw_csrf=([^;]+)/);
document.getElementById("c").value = m ? decodeURIComponent(m[1]) : "";
document.getElementById("f").submit();
</script>"""
FRAME = """<!doctype html><title>framer</title>
<iframe id="f" name="f" src="{dash}/" width="900" height="600"></iframe>
<script>document.getElementById("f").addEventListener("load", function () {{
  window.frameLoaded = true; }});</script>"""
#: collects every CSP violation of a page, installed before any of its scripts runs
WATCH = ("window.__csp = []; document.addEventListener('securitypolicyviolation', "
         "function (e) { window.__csp.push(e.violatedDirective + ' ' + e.blockedURI); });")

#: the page loaded and, when it updates itself, asked the server once since
POLLED = ("return document.readyState === 'complete' && (!document.querySelector("
          "'[data-live], #queues, #workers, #refresh') || performance.getEntriesByType("
          "'resource').some(function (e) { return e.initiatorType === 'fetch'; }));")


@pytest.fixture
def base(r, settings, driver) -> Iterator[str]:
    with dashboard(r, settings, driver, TOKEN, poll_interval=0.3) as url:
        yield url


def attacker(html: str, dash: str) -> Starlette:
    async def page(request: object) -> HTMLResponse:
        return HTMLResponse(html.format(dash=dash))
    return Starlette(routes=[Route("/", page)])


def test_a_page_of_another_port_cannot_pause_a_queue(base, driver, queue):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    driver.get(base + "/queues/default")   # the pages the user saw (any cookie set)
    with serve(attacker(ATTACK, base)) as evil:
        assert evil.split(":")[-1] != base.split(":")[-1]
        driver.get(evil + "/")
        wait(driver, lambda d: d.current_url.startswith(base))
        wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").text)
        text = driver.find_element(By.TAG_NAME, "body").text
    assert not q.is_paused, text
    assert "cross-site" in text or "CSRF" in text
    driver.get(base + "/")   # still logged in, nothing done
    assert driver.find_elements(By.ID, "queues")


def test_the_dashboard_cannot_be_framed(base, driver, queue):
    queue("default").enqueue("tests.jobs:add", 1, 2)
    login(driver, base, TOKEN)
    with serve(attacker(FRAME, base)) as evil:
        driver.get(evil + "/")
        wait(driver, lambda d: d.execute_script("return window.frameLoaded === true;"))
        driver.switch_to.frame("f")
        try:
            shown = driver.find_elements(By.ID, "queues")
        finally:
            driver.switch_to.default_content()
    assert shown == []


def test_pages_run_under_their_policy_and_stay_live(base, driver, queue, burst):
    q = queue("default")
    job = q.enqueue("tests.jobs:boom")
    burst("default")
    queue("other").enqueue("tests.jobs:add", 1, 2)
    watch = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    try:
        login(driver, base, TOKEN)
        # the policy is enforced: a script written into the page does not run
        driver.execute_script("var s = document.createElement('script');"
                              "s.textContent = 'window.__inline = 1;';"
                              "document.body.appendChild(s);")
        wait(driver, lambda d: d.execute_script("return window.__csp.length;") == 1)
        assert driver.execute_script("return window.__inline;") is None
        assert "script-src" in driver.execute_script("return window.__csp[0];")
        # the overview still updates live, under the policy
        driver.execute_script("window.__notReloaded = true;")
        q.enqueue("tests.jobs:add", 1, 2)
        wait(driver, lambda d: d.find_element(
            By.CSS_SELECTOR, '#queues tr[data-queue="default"] [data-k="pending"]').text == "1")
        assert driver.execute_script("return window.__notReloaded === true;")
        for path in ("/queues/default", "/queues/default?status=failed", f"/jobs/{job.id}",
                     "/failed", "/scheduled", "/retries", "/batches", "/workers", "/charts"):
            driver.get(base + path)
            wait(driver, lambda d: d.execute_script(POLLED))
            assert driver.execute_script("return window.__csp;") == [], path
        # the failed page's queue picker (its handler lives in app.js now) still submits
        driver.get(base + "/failed")
        pickers = driver.find_elements(By.CSS_SELECTOR, "select[data-submit-on-change]")
        for picker in pickers:
            picker.find_element(By.CSS_SELECTOR, 'option[value="default"], option').click()
        assert driver.execute_script("return window.__csp;") == []
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                               {"identifier": watch["identifier"]})
