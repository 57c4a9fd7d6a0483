"""Operator commands: info, suspend/resume, pause/unpause, requeue."""

from __future__ import annotations

import time

import click

from .. import admin
from ..queue import Queue, known_queues
from . import main
from .common import App, echo_json, pass_app


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


@main.command()
@click.option("-W", "--only-workers", is_flag=True, help="Workers only.")
@click.option("-Q", "--only-queues", is_flag=True, help="Queues only.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_app
def info(app: App, only_workers: bool, only_queues: bool, as_json: bool) -> None:
    """Queues (depth, bands, registries) and workers (state, current job)."""
    r = app.connection
    queues = [Queue(n, r, settings=app.settings).stats()
              for n in known_queues(r, app.settings.prefix)] if not only_workers else []
    workers = admin.workers(r, app.settings.prefix) if not only_queues else []
    if as_json:
        echo_json({"queues": queues, "workers": workers,
                   "suspended": admin.is_suspended(r, app.settings.prefix)})
        return
    if not only_workers:
        click.echo(f"{'queue':<16} {'pending':>8} {'started':>8} {'sched':>6} {'failed':>7}  bands")
        for q in queues:
            bands = " ".join(f"{k}={v}" for k, v in q["bands"].items() if v)
            flag = " [paused]" if q["paused"] else ""
            click.echo(f"{q['queue']:<16} {q['pending']:>8} {q['started']:>8} {q['scheduled']:>6} "
                       f"{q['failed']:>7}  {bands}{flag}")
        click.echo(f"{len(queues)} queue(s)")
    if not only_queues:
        now = time.time()
        for w in workers:
            job = w.get("current_job") or "-"
            click.echo(f"{w.get('name')}: {w.get('state')} on {w.get('queues')} job={job} "
                       f"heartbeat {_age(now - float(w.get('last_heartbeat') or now))} ago")
        click.echo(f"{len(workers)} worker(s)")


@main.command()
@click.option("--duration", type=click.FloatRange(min=0, min_open=True),
              help="Resume by itself after this many seconds.")
@pass_app
def suspend(app: App, duration: float | None) -> None:
    """Suspend all workers: they finish the current job, then claim nothing."""
    admin.suspend(app.connection, app.settings.prefix, duration)
    click.echo("Suspended all workers" + (f" for {duration:g} s" if duration else ""))


@main.command()
@pass_app
def resume(app: App) -> None:
    """Resume suspended workers."""
    admin.resume(app.connection, app.settings.prefix)
    click.echo("Resumed all workers")


@main.command()
@click.argument("queue")
@pass_app
def pause(app: App, queue: str) -> None:
    """Pause QUEUE: no worker anywhere claims from it."""
    Queue(queue, app.connection, settings=app.settings).pause()
    click.echo(f"Paused {queue}")


@main.command()
@click.argument("queue")
@pass_app
def unpause(app: App, queue: str) -> None:
    """Let workers claim from QUEUE again."""
    Queue(queue, app.connection, settings=app.settings).unpause()
    click.echo(f"Unpaused {queue}")


@main.command()
@click.argument("job_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every failed job.")
@click.option("--queue", help="Only this queue.")
@pass_app
def requeue(app: App, job_ids: tuple[str, ...], all_: bool, queue: str | None) -> None:
    """Move failed jobs (JOB_IDS, or --all) back to their queue."""
    if not all_ and not job_ids:
        raise click.UsageError("give JOB_IDs or --all")
    r = app.connection
    names = [queue] if queue else known_queues(r, app.settings.prefix)
    total = 0
    for name in names:
        q = Queue(name, r, settings=app.settings)
        if all_:
            total += q.requeue_all_failed()
        else:
            for job_id in job_ids:
                if q.fetch_job(job_id) is not None:
                    q.requeue(job_id)
                    total += 1
    click.echo(f"Requeued {total} job(s)")
