"""Screenshots of the dashboard for the docs: ``python docs/make_screenshots.py``.

Builds a demo state on the Redis at REDIS_URL (default 127.0.0.1:6379) under a
private key prefix (deleted at the end): two real worker processes run the
demo jobs (``fusionworker.ops.demo``) — some finish, some fail with a traceback,
one webhook retries — then two long jobs keep the workers busy while more
jobs wait at mixed priorities; a paused ``reports`` queue, delayed webhooks and
a cron entry. The chart's earlier minutes are simulated (written into the same
per-minute hashes ``finish.lua`` keeps), since a real hour of history would
take an hour; the current minute is real.

Also a rate limit, a batch, a deferred job and the charts' history (simulated
before the current minute, as the per-minute chart). Then Debian's headless
Chromium (tests/web_support.py) takes every page (overview, queue, job,
failed, retries, scheduled, batches, batch, workers, worker, charts) in light
and dark (``prefers-color-scheme``), at desktop (1280 px) and phone (390 px)
width: docs/img/<page>-<light|dark>-<desktop|phone>.png.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

import fusionworker.ops.demo  # noqa: E402,F401  (registers the demo job functions)
from fusionworker.core import cron  # noqa: E402
from fusionworker.core.batch import Batch  # noqa: E402
from fusionworker.core.config import load_settings  # noqa: E402
from fusionworker.core.keys import Keys  # noqa: E402
from fusionworker.core.queue import Queue  # noqa: E402
from fusionworker.events import flush_default_sinks, metrics_history  # noqa: E402
from fusionworker.web import create_app  # noqa: E402
from tests.web_support import chromium, login, serve, wait  # noqa: E402

PREFIX = "fwshots"
TOKEN = "screenshots"
OUT = ROOT / "docs" / "img"


def build_state(r: redis.Redis, url: str, workers: list[subprocess.Popen[bytes]]) -> str:
    settings = load_settings(environ={}, redis_url=url, prefix=PREFIX, max_retries=3)
    q = {n: Queue(n, r, settings=settings) for n in ("sms", "email", "webhook", "reports")}
    env = dict(os.environ, REDIS_URL=url, FUSIONWORKER_PREFIX=PREFIX,
               FUSIONWORKER_IMPORTS="fusionworker.ops.demo", FUSIONWORKER_MAX_RETRIES="3",
               PYTHONPATH=str(ROOT))
    env.pop("NOTIFY_SOCKET", None)
    for n in (1, 2):   # appended one by one: the caller stops whatever was started
        workers.append(subprocess.Popen([sys.executable, "-m", "fusionworker.cli", "worker",
                                         "--customq", "sms,email,webhook", "--name", f"demo-{n}"],
                                        env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
    jobs = []
    for i in range(40):
        jobs.append(q["sms"].enqueue("fusionworker.ops.demo:send_sms", f"+1555{i:04d}", "Your code",
                                     priority=10 if i % 4 == 0 else 0))
    for i in range(16):
        jobs.append(q["email"].enqueue("fusionworker.ops.demo:send_email", f"user{i}@example.com",
                                       "Welcome", priority=5))
    for i in range(10):
        jobs.append(q["webhook"].enqueue("fusionworker.ops.demo:call_webhook",
                                         f"https://hooks.example/{i}"))
    for name in ("welcome-v2", "invoice-de", "reset-password", "welcome-v2", "digest"):
        jobs.append(q["email"].enqueue("fusionworker.ops.demo:broken_template", name))
    jobs.append(q["webhook"].enqueue("fusionworker.ops.demo:flaky_webhook", "https://flaky.example"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        states = [q[j.queue].fetch_job(j.id) for j in jobs]
        if all(s is not None and s.status in ("finished", "failed") for s in states):
            break
        time.sleep(0.3)
    # now keep the workers busy and let work pile up
    q["sms"].enqueue("fusionworker.ops.demo:stuck_provider", 120, timeout=300)
    q["email"].enqueue("fusionworker.ops.demo:stuck_provider", 120, timeout=300)
    time.sleep(1.5)
    for i in range(180):
        q["sms"].enqueue("fusionworker.ops.demo:send_sms", f"+1666{i:04d}", "Reminder",
                         priority=random.choice((10, 0, 0, 0, -5)))
    for i in range(35):
        q["email"].enqueue("fusionworker.ops.demo:send_email", f"team{i}@example.com", "Digest")
    for i in range(6):
        q["webhook"].enqueue_in(600 + 60 * i, "fusionworker.ops.demo:call_webhook",
                                f"https://hooks.example/later/{i}")
    q["reports"].pause()
    for i in range(25):
        q["reports"].enqueue("fusionworker.ops.demo:send_email", f"boss{i}@example.com",
                             "Monthly report")
    q["sms"].set_max_active(2)
    cron.register(r, settings, "nightly-digest", "0 3 * * *", "fusionworker.ops.demo:send_email",
                  args=["all@example.com", "Nightly digest"], queue="email")
    cron.register(r, settings, "hourly-ping", "0 * * * *", "fusionworker.ops.demo:call_webhook",
                  args=["https://status.example/ping"], queue="webhook")
    # simulated history for the chart's earlier minutes (see the module docstring)
    now_minute = int(r.time()[0]) // 60
    keys = Keys(PREFIX)
    level = 30
    for back in range(59, 0, -1):
        level = max(5, min(80, level + random.randint(-8, 8)))
        for name, share in (("sms", 0.6), ("email", 0.3), ("webhook", 0.1)):
            key = keys.queue(name).minute(now_minute - back)
            r.hincrby(key, "finished", int(level * share))
            if random.random() < 0.25:
                r.hincrby(key, "failed", random.randint(1, 3))
            r.expire(key, 7200)
    q["sms"].set_rate_limit("20/s")
    with Batch(on_complete="fusionworker.ops.demo:send_email", queue=q["reports"]) as batch:
        for i in range(8):
            q["reports"].enqueue("fusionworker.ops.demo:send_email", f"row{i}@example.com",
                                 "Import", batch=batch)
    head = q["reports"].enqueue("fusionworker.ops.demo:send_email", "cfo@example.com", "Close")
    q["email"].enqueue("fusionworker.ops.demo:send_email", "board@example.com", "Summary",
                       depends_on=head)
    simulate_history(r)
    flush_default_sinks(5)
    metrics_history.record_from_stream(r, PREFIX)
    failed = next(j.id for j in jobs if j.func.endswith("broken_template"))
    return failed


def simulate_history(r: redis.Redis) -> None:
    """Earlier minutes and 10-minute spans of the charts' history (see the docstring)."""
    now = int(r.time()[0])
    for resolution, count in ((60, 60), (600, 144)):
        for back in range(count - 1, 0, -1):
            bucket = now // resolution - back
            for name, share in (("sms", 0.6), ("email", 0.3), ("webhook", 0.1)):
                key = metrics_history.bucket_key(PREFIX, name, resolution, bucket)
                scale = resolution // 60
                done = int(random.randint(15, 60) * share * scale) + 1
                r.hincrby(key, "finished", done)
                r.hincrby(key, "failed", random.randint(0, 3) * scale)
                for _ in range(12):
                    ms = random.lognormvariate(4.0 if name == "sms" else 5.0, 0.6)
                    k = metrics_history.duration_bucket(ms / 1000)
                    r.hincrby(key, f"d{k}", max(1, done // 12))
                r.expire(key, metrics_history.RESOLUTIONS[resolution])


def full_page(driver, path: Path, width: int) -> None:
    """The whole page, not only the window (Chromium's DevTools capture)."""
    import base64

    height = driver.execute_script("return document.documentElement.scrollHeight")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 2400), "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))


#: name -> path of every page shot (light and dark, desktop and phone)
def pages(failed_id: str, batch_id: str) -> dict[str, str]:
    return {
        "overview": "/", "queue": "/queues/sms?per_page=15", "job": f"/jobs/{failed_id}",
        "failed": "/failed", "retries": "/retries", "scheduled": "/scheduled",
        "batches": "/batches", "batch": f"/batches/{batch_id}?queue=reports",
        "workers": "/workers", "worker": "/workers/demo-1", "charts": "/charts",
    }


def shoot(driver, base: str, shots: dict[str, str]) -> None:
    for scheme in ("light", "dark"):
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": scheme}]})
        for device, (width, height) in (("desktop", (1280, 900)), ("phone", (390, 844))):
            driver.set_window_size(width, height)
            for name, path in shots.items():
                driver.get(base + path)
                time.sleep(0.3)
                inner = driver.execute_script("return window.innerWidth")
                full_page(driver, OUT / f"{name}-{scheme}-{device}.png", inner)


def main() -> None:
    from selenium.webdriver.common.by import By

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    r = redis.Redis.from_url(url, decode_responses=True)
    OUT.mkdir(parents=True, exist_ok=True)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        failed_id = build_state(r, url, workers)
        settings = load_settings(environ={}, redis_url=url, prefix=PREFIX, web_token=TOKEN)
        batch_id = r.zrange(f"{PREFIX}:{{reports}}:batches", 0, 0)[0]
        with serve(create_app(settings, r, poll_interval=1.0)) as base, chromium() as driver:
            login(driver, base, TOKEN)
            wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg"))
            time.sleep(2.5)   # one live refresh
            for old in OUT.glob("*.png"):
                old.unlink()
            shoot(driver, base, pages(failed_id, batch_id))
        print("wrote", len(list(OUT.glob("*.png"))), "screenshots in", OUT.relative_to(ROOT))
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
        batch = list(r.scan_iter(match=f"{PREFIX}:*", count=1000))
        for i in range(0, len(batch), 500):
            r.delete(*batch[i:i + 500])


if __name__ == "__main__":
    main()
