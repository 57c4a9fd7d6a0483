"""The ``queue`` group: list queues, empty one."""

from __future__ import annotations

import click

from ..core.queue import Queue, forget_queue, known_queues
from .common import App, echo_json, fmt_age, on_queue, pass_app, progress, require_queue, say, table


@click.group("queue")
def queue_group() -> None:
    """Inspect and manage whole queues."""


@queue_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_app
def queue_list(app: App, as_json: bool) -> None:
    """Every known queue with its depth and state."""
    r = app.connection
    stats = [Queue(n, r, settings=app.settings).stats()
             for n in known_queues(r, app.settings.prefix)]
    if as_json:
        echo_json({"schema": 1, "queues": stats})
        return
    rows = [[s["queue"], s["pending"], s["scheduled"], s["started"], s["failed"],
             s["max_active"], fmt_age(s["oldest_age"]), "paused" if s["paused"] else "active"]
            for s in stats]
    for line in table(["QUEUE", "PENDING", "SCHED", "STARTED", "FAILED", "MAX", "OLDEST",
                       "STATE"], rows, right=range(1, 7)):
        say(line)
    say(f"{len(stats)} queue(s)")


@on_queue(queue_group.command("empty"), asks=True)
def queue_empty(app: App, queue: str, yes: bool) -> None:
    """Delete every pending and scheduled job of QUEUE (running jobs finish)."""
    q = Queue(require_queue(app, queue), app.connection, settings=app.settings)
    count = q.count + int(app.connection.zcard(q.qkeys.scheduled))
    if count == 0:
        say(f"{queue} is empty already")
        return
    if not yes:
        click.confirm(f"Delete {count} pending and scheduled job(s) of {queue}?", abort=True,
                      err=True)
    with progress(count, f"Emptying {queue}") as advance:
        removed = q.empty(progress=advance)
    say(f"Deleted {removed} job(s) from {queue}")


@on_queue(queue_group.command("delete"), asks=True)
def queue_delete(app: App, queue: str, yes: bool) -> None:
    """Forget QUEUE: its registration, jobs, registries and cron entries.

    Asks first when the queue still holds jobs (or give --yes); refuses while a
    job of it runs (pause the queue, let running jobs end, then delete).
    """
    q = Queue(require_queue(app, queue), app.connection, settings=app.settings)
    s = q.stats()
    held = s["pending"] + s["scheduled"] + s["failed"] + s["finished"]
    if held and not yes:
        click.confirm(f"Queue {queue} holds {held} job(s) (pending {s['pending']}, scheduled "
                      f"{s['scheduled']}, failed {s['failed']}, finished {s['finished']}). "
                      "Delete them and forget the queue?", abort=True, err=True)
    deleted = forget_queue(app.connection, queue, app.settings.prefix)
    say(f"Forgot queue {queue} ({deleted} key(s) deleted)")
