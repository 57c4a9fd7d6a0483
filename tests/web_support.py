"""Serving the dashboard on a free loopback port and driving Debian's Chromium.

Used by tests/web/test_web_browser.py and docs/make_screenshots.py. Nothing is
downloaded: Selenium is given /usr/bin/chromedriver and /usr/bin/chromium, so
Selenium Manager never runs.
"""

from __future__ import annotations

import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not shutil.which(path):
            return f"{path} missing (apt-get install {package})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium missing (pip install selenium)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    def started() -> bool:
        assert thread.is_alive(), "the dashboard's server thread died"
        return server.started
    wait_for(started, timeout=10, what="the dashboard to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium WebDriver with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="fw-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                 f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def fresh_state(driver: Any, width: int = 1280, height: int = 900) -> None:
    """Put a Chromium that served earlier tests back to how :func:`chromium` started it:
    a blank page, no cookies, no storage of any origin, the window size, no emulated
    media, no open window but one."""
    for handle in driver.window_handles[1:]:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(driver.window_handles[0])
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": "*", "storageTypes": "all"})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "", "features": []})
    driver.set_window_size(width, height)


def login(driver: Any, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    wait(driver, lambda d: d.current_url.rstrip("/") == base)


#: what Chromium answers for an element of the page a navigation is replacing
_LEFT_THE_DOCUMENT = "does not belong to the document"


def wait(driver: Any, predicate: Any, timeout: float = 15.0) -> Any:
    """``predicate(driver)`` once it is true. A form post redirects: an element found
    just before the new page is stale, or missing, or (Chromium, mid-navigation) "does
    not belong to the document"; each of these is asked again, any other error raises."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    def asked(d: Any) -> Any:
        try:
            return predicate(d)
        except (NoSuchElementException, StaleElementReferenceException):
            return False
        except WebDriverException as exc:
            if _LEFT_THE_DOCUMENT in str(exc):
                return False
            raise

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(asked)


@contextmanager
def dashboard(r: Any, settings: Any, driver: Any, token: str,
              poll_interval: float) -> Iterator[str]:
    """A dashboard (token auth, pages refreshing every ``poll_interval`` s) served on a
    free loopback port, with the browser's cookies cleared: its base URL."""
    from fusionworker.web import create_app

    app = create_app(settings.replace(web_token=token), r, poll_interval=poll_interval)
    with serve(app) as url:
        driver.delete_all_cookies()
        yield url



#: what a browser sends with every state change of the dashboard's own pages, as
#: Starlette's TestClient (base URL http://testserver) names its site
SAME_SITE = {"Origin": "http://testserver"}
_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')
_FORM_TOKEN = re.compile(r'name="csrf" value="([^"]+)"')


def page_csrf(html: str) -> str:
    """The CSRF token a page carries (its ``csrf-token`` meta tag)."""
    found = _CSRF_META.search(html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def form_login(client: Any, token: str) -> str:
    """Log ``client`` (a TestClient) in through the login form as a browser does (the
    form's token, the site named); returns the CSRF token of the new session."""
    form = client.get("/login").text
    found = _FORM_TOKEN.search(form)
    assert found, "the login form carries no token"
    done = client.post("/login", data={"token": token, "csrf": found.group(1)},
                       headers=SAME_SITE, follow_redirects=False)
    assert done.status_code == 303, done.text[:300]
    return page_csrf(client.get("/").text)
