"""``worker``: run a worker (or, with ``--processes N``, a supervised pool)."""

from __future__ import annotations

import sys

import click

from ..worker import Worker, parse_queue_spec
from . import main
from .common import App, pass_app


@main.command()
@click.option("--customq", "-q", "queues", default="all", show_default=True, metavar="QUEUES",
              help="Comma list of queues, optionally weighted (sms:3,email:1); 'all' = every "
                   "known queue.")
@click.option("--burst", is_flag=True, help="Exit 0 once the queues are empty.")
@click.option("--name", help="Worker name (default HOST.PID).")
@click.option("--worker-ttl", type=click.IntRange(min=10), help="Heartbeat TTL, seconds.")
@click.option("--max-horse-memory", type=click.IntRange(min=0), metavar="MIB",
              help="Kill and fail a job whose horse exceeds this RSS (0 = off).")
@pass_app
def worker(app: App, queues: str, burst: bool, name: str | None, worker_ttl: int | None,
           max_horse_memory: int | None) -> None:
    """Run a worker serving QUEUES until SIGTERM (twice: cold shutdown)."""
    try:
        parse_queue_spec(queues)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--customq") from None
    app.settings = app.settings.replace(worker_ttl=worker_ttl, max_horse_memory=max_horse_memory)
    connection = app.connect(embedded=True)
    w = Worker(queues, connection, settings=app.settings, name=name, burst=burst)
    try:
        code = w.work()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)
