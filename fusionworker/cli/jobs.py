"""``enqueue`` and the ``job`` group."""

from __future__ import annotations

import json

import click

from ..exceptions import NoSuchJob
from ..queue import Queue, find_queue_of
from . import main
from .common import App, echo_json, parse_arg, pass_app


def _queue(app: App, name: str) -> Queue:
    return Queue(name, app.connection, settings=app.settings)


def _find(app: App, job_id: str, queue: str | None) -> Queue:
    name = find_queue_of(app.connection, job_id, app.settings.prefix, queue)
    if name is None:
        where = f"queue {queue!r}" if queue else "any queue"
        raise NoSuchJob(f"no job {job_id!r} in {where}")
    return _queue(app, name)


@main.command()
@click.argument("queue")
@click.argument("func")
@click.argument("args", nargs=-1)
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments as a JSON object.")
@click.option("--priority", type=click.IntRange(-1023, 1023), default=0, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds.")
@click.option("--max-retries", type=click.IntRange(min=0))
@click.option("--retry-delay", type=click.FloatRange(min=0), help="First retry delay, seconds.")
@click.option("--job-id")
@click.option("--unique-key", help="Skip if a live job with this key exists.")
@click.option("--group", help="Jobs of one group run one at a time, in order.")
@click.option("--in", "delay", type=click.FloatRange(min=0), help="Run after this many seconds.")
@pass_app
def enqueue(app: App, queue: str, func: str, args: tuple[str, ...], kwargs_json: str | None,
            priority: int, timeout: float | None, max_retries: int | None,
            retry_delay: float | None, job_id: str | None, unique_key: str | None,
            group: str | None, delay: float | None) -> None:
    """Enqueue FUNC (module:function) on QUEUE; prints the job id.

    ARGS are parsed as JSON where they parse, else kept as strings.
    """
    try:
        kwargs = json.loads(kwargs_json) if kwargs_json else {}
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--kwargs") from None
    if not isinstance(kwargs, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--kwargs")
    q = _queue(app, queue)
    options = dict(priority=priority, timeout=timeout, max_retries=max_retries,
                   retry_delay=retry_delay, job_id=job_id, unique_key=unique_key, group=group)
    arguments = [parse_arg(a) for a in args]
    if delay:
        job = q.enqueue_call(func, arguments, kwargs, _when=("in", delay), **options)
    else:
        job = q.enqueue_call(func, arguments, kwargs, **options)
    if job.deduplicated:
        click.echo(f"{job.id} (duplicate: existing job is {job.status})")
    else:
        click.echo(job.id)


@main.group()
def job() -> None:
    """Inspect and manage single jobs."""


@job.command("show")
@click.argument("job_id")
@click.option("--queue", help="Queue of the job (default: search every queue).")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def job_show(app: App, job_id: str, queue: str | None, as_json: bool) -> None:
    """Status, result or error of JOB_ID."""
    found = _find(app, job_id, queue).fetch_job(job_id)
    if found is None:
        raise NoSuchJob(f"no job {job_id!r}")
    if as_json:
        echo_json(found.to_dict())
        return
    click.echo(f"job       {found.id}")
    click.echo(f"queue     {found.queue}    priority {found.priority}")
    click.echo(f"function  {found.func}")
    click.echo(f"status    {found.status}    attempts {found.attempts}/{found.max_retries + 1}")
    if found.worker_name:
        click.echo(f"worker    {found.worker_name}")
    if found.status == "finished":
        click.echo(f"result    {json.dumps(found.result)}")
    if found.error:
        click.echo(f"error     {found.error}  [{found.failure_reason}]")
    if found.traceback:
        click.echo(found.traceback.rstrip())
