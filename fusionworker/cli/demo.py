"""``demo``: a real worker pool on real (or embedded) Redis, processing sample jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from ..core.job import LIVE_STATUSES, Job, JobStatus
from ..core.queue import Queue
from .common import WEB_EXTRA, App, pass_app, say

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

QUEUES = ("sms", "email", "webhook")


@click.command()
@click.option("--workers", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option("--jobs", "count", type=click.IntRange(1, 10000), default=30, show_default=True)
@click.option("--web", "with_web", is_flag=True,
              help="Also serve the web dashboard on 127.0.0.1:--web-port (needs the web "
                   "extra) and keep it running after the demo until Ctrl-C.")
@click.option("--web-port", type=click.IntRange(1, 65535), default=9181, show_default=True)
@click.pass_context
@pass_app
def demo(app: App, ctx: click.Context, workers: int, count: int, with_web: bool,
         web_port: int) -> None:
    """Start WORKERS worker processes, enqueue sample jobs, show progress, end with info.

    Uses the Redis at REDIS_URL; with REDIS_URL unset and none answering at the default
    URL, starts an embedded one (an explicit URL that does not answer is an error). Under its
    own key prefix (PREFIX:demo, emptied first: earlier runs do not mix in; look at it
    later with `--prefix PREFIX:demo info`). Includes a job that fails, one that times
    out and one that retries.
    """
    r = app.connect(embedded=True)
    from ..ops import demo as demo_jobs  # also registers the demo's job functions

    # its own key prefix, emptied first: an earlier run's jobs never mix into this one's
    app.settings = app.settings.replace(prefix=demo_jobs.demo_prefix(app.settings.prefix))
    demo_jobs.clear(r, app.settings.prefix)
    server = _start_web(app, r, web_port) if with_web else None

    settings = app.settings.replace(max_retries=3)
    queues = {name: Queue(name, r, settings=settings) for name in QUEUES}
    ids = _enqueue_samples(queues, count)
    say(f"Enqueued {len(ids)} jobs on {', '.join(QUEUES)} at {app.masked_url} "
               f"(key prefix {settings.prefix}, emptied first)")
    procs = _start_workers(app, settings.prefix, workers)
    try:
        _watch(queues, ids)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    from .admin import info

    ctx.invoke(info)
    if server is not None:
        _keep_serving(server, web_port)


def _enqueue_samples(queues: dict[str, Queue], count: int) -> list[Job[Any]]:
    """``count`` jobs over the three queues, then one that fails, one that times out and
    one that retries."""
    ids = []
    for i in range(count):
        name = QUEUES[i % 3]
        if name == "sms":
            job = queues[name].enqueue("fusionworker.ops.demo:send_sms", f"+1555{i:04d}", "hello",
                                       priority=10 if i % 2 else 0)
        elif name == "email":
            job = queues[name].enqueue("fusionworker.ops.demo:send_email", f"user{i}@example.com",
                                       "Welcome", priority=5)
        else:
            job = queues[name].enqueue("fusionworker.ops.demo:call_webhook", f"https://hooks.example/{i}")
        ids.append(job)
    ids.append(queues["email"].enqueue("fusionworker.ops.demo:broken_template", "welcome-v2"))
    ids.append(queues["sms"].enqueue("fusionworker.ops.demo:stuck_provider", 60, timeout=2))
    ids.append(queues["webhook"].enqueue("fusionworker.ops.demo:flaky_webhook", "https://flaky.example"))
    return ids


def _start_workers(app: App, prefix: str, workers: int) -> list[subprocess.Popen[bytes]]:
    """``workers`` worker processes on the demo's queues and key prefix."""
    env = dict(os.environ, REDIS_URL=app.url, FUSIONWORKER_PREFIX=prefix,
               FUSIONWORKER_IMPORTS="fusionworker.ops.demo", FUSIONWORKER_ALLOWED_MODULES="",
               FUSIONWORKER_MAX_RETRIES="3")
    env.pop("NOTIFY_SOCKET", None)
    return [subprocess.Popen([sys.executable, "-m", "fusionworker.cli", "worker", "--queue",
                              ",".join(QUEUES), "--name", f"demo-{n + 1}"], env=env)
            for n in range(workers)]


def _watch(queues: dict[str, Queue], ids: list[Job[Any]]) -> None:
    """A line of counts per state, redrawn until no job is live."""
    while True:
        jobs = [queues[j.queue].fetch_job(j.id) for j in ids]
        states = {s: sum(1 for j in jobs if j and j.status == s)
                  for s in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.STARTED,
                            JobStatus.FINISHED, JobStatus.FAILED)}
        line = "  ".join(f"{k} {v}" for k, v in states.items())
        click.echo(f"\r{line}   ", nl=not sys.stdout.isatty())
        if sum(states[s] for s in LIVE_STATUSES) == 0:
            break
        time.sleep(0.5)
    say("")


def _keep_serving(server: Any, port: int) -> None:
    """The dashboard stays up after the demo until Ctrl-C."""
    say(f"\nDashboard still on http://127.0.0.1:{port}/ ; Ctrl-C to stop")
    try:
        while server.thread.is_alive():
            server.thread.join(0.5)
    except KeyboardInterrupt:
        pass
    server.should_exit = True
    server.thread.join(10)


def _start_web(app: App, connection: RedisClient, port: int) -> Any:
    """The dashboard on loopback in a thread of the demo (token login if one is set)."""
    try:
        from ..web.app import create_app, serve_in_thread
    except ImportError as exc:
        raise click.ClickException(f"demo --web needs the web extra ({WEB_EXTRA}): "
                                   f"{exc}") from None
    from ..web.auth import ephemeral_token

    settings = app.settings
    configured = bool(settings.web_token or (settings.web_user and settings.web_password_hash))
    if not configured:
        settings = settings.replace(web_token=ephemeral_token())
    try:
        server = serve_in_thread(create_app(settings, connection), "127.0.0.1", port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve the dashboard: {exc} (try --web-port)") from None
    say(f"Dashboard: http://127.0.0.1:{port}/  (log in with "
               + ("your FUSIONWORKER_WEB_TOKEN or user)" if configured
                  else f"this run's token {settings.web_token})"))
    return server
