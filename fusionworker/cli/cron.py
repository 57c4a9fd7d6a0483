"""The ``cron`` group: add, list, remove, pause, resume cron entries."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import click

from ..core import cron as cron_api
from ..core.keys import Keys
from .common import (
    App,
    FiniteFloat,
    echo_json,
    import_options,
    on_one,
    parse_arg,
    parse_kwargs,
    pass_app,
    say,
)
from .jobs import producer_imports


def _when(ts: float | None, tz: str) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")


@click.group()
def cron() -> None:
    """Jobs enqueued on a schedule (exactly once per due time, by any running worker).

    Workers serving an entry's queue run its schedule: no worker on the queue, no runs.
    """


@cron.command("add")
@click.argument("name")
@click.argument("schedule")
@click.argument("func")
@click.argument("args", nargs=-1)
@click.option("--queue", "-q", default="default", show_default=True)
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments as a JSON object.")
@click.option("--priority", type=click.IntRange(-1023, 1023), default=None,
              help="-1023..1023, higher first (default: the function's @job priority, "
                   "else 0).")
@click.option("--timezone", default="UTC", show_default=True,
              help="IANA zone the schedule is read in, e.g. Europe/Berlin.")
@click.option("--catch-up", type=click.Choice(cron_api.CATCH_UP_MODES), default="skip",
              show_default=True,
              help="After downtime: skip the missed runs, or run once, then keep the schedule.")
@click.option("--allow-overlap", is_flag=True,
              help="Enqueue a run even while the previous one is queued or running.")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True), help="Job time limit, s.")
@click.option("--max-retries", type=click.IntRange(min=0))
@import_options("Import MODULE first so that its @fusionworker.job functions may be "
                "named (repeatable; adds to FUSIONWORKER_IMPORTS), as with `enqueue`.")
@pass_app
def cron_add(app: App, name: str, schedule: str, func: str, args: tuple[str, ...], queue: str,
             kwargs_json: str | None, priority: int | None, timezone: str, catch_up: str,
             allow_overlap: bool, timeout: float | None, max_retries: int | None,
             imports: tuple[str, ...] = (), paths: tuple[str, ...] = ()) -> None:
    """Add (or replace) entry NAME: run FUNC (module:function) on SCHEDULE.

    SCHEDULE is a cron expression: 5 fields (minute hour day month weekday), or 6
    with seconds last ("* * * * * */10" = every 10 s), or @hourly, @daily, @weekly,
    @monthly, @yearly. Refused, with nothing stored: any other number of fields, a
    range that runs backwards ("1-0"), a date that never comes ("* * 31 2 *"). ARGS
    are parsed as JSON where they parse, else kept as strings.
    """
    kwargs = parse_kwargs(kwargs_json)
    # the function is found as worker and enqueue find it: the current directory first,
    # --path, then --import / FUSIONWORKER_IMPORTS imported (their @job functions)
    producer_imports(app, imports, paths)
    entry = cron_api.register(
        app.connection, app.settings, name, schedule, func, args=[parse_arg(a) for a in args],
        kwargs=kwargs, queue=queue, priority=priority, timezone=timezone, catch_up=catch_up,
        allow_overlap=allow_overlap, timeout=timeout, max_retries=max_retries,
    )
    state = "paused" if entry.paused else f"next run {_when(entry.next_run, entry.timezone)}"
    say(f"cron entry {entry.name} on {entry.queue}: {state}")
    if not _served(app, entry.queue):
        say(f"warning: no live worker serves queue {entry.queue!r}: the entry runs only "
                   f"while a worker does (start one with `worker -q {entry.queue}`; workers "
                   "on 'all' take it up at their next heartbeat)", err=True)


def _served(app: App, queue: str) -> bool:
    """True if a live worker (heartbeat key present) lists ``queue``."""
    r = app.connection
    keys = Keys(app.settings.prefix)
    names = sorted(r.smembers(keys.workers))
    if not names:
        return False
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.hget(keys.worker(name), "queues")
    return any(queue in (q or "").split(",") for q in pipe.execute() if q is not None)


@cron.command("list")
@click.option("--queue", "-q", help="Only this queue.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def cron_list(app: App, queue: str | None, as_json: bool) -> None:
    """Entries with schedule, next run, last run and last status."""
    entries = cron_api.list_entries(app.connection, app.settings.prefix,
                                    [queue] if queue else None)
    if as_json:
        echo_json([e.to_dict() for e in entries])
        return
    for e in entries:
        last = (f"last {_when(e.last_run, e.timezone)} {e.last_status or '-'}"
                f" (job {e.last_job} {e.last_job_status or 'gone'})" if e.last_job
                else f"last {e.last_status or '-'}")
        nxt = "paused" if e.paused else f"next {_when(e.next_run, e.timezone)}"
        say(f"{e.name} [{e.queue}] '{e.schedule}' {e.timezone} -> {e.func}  {nxt}  {last}"
                   f"  runs={e.runs} skips={e.skips} misses={e.misses}")
    say(f"{len(entries)} cron entr{'y' if len(entries) == 1 else 'ies'}")


@on_one(cron, "remove", "name", "entry")
def cron_remove(app: App, name: str, queue: str | None) -> None:
    """Delete entry NAME (a run already enqueued still runs)."""
    found = cron_api.remove(app.connection, app.settings, name, queue)
    say(f"cron entry {name} on {found} removed")


@on_one(cron, "pause", "name", "entry")
def cron_pause(app: App, name: str, queue: str | None) -> None:
    """Enqueue no runs of NAME until resumed."""
    found = cron_api.pause(app.connection, app.settings, name, queue)
    say(f"cron entry {name} on {found} paused")


@on_one(cron, "resume", "name", "entry")
def cron_resume(app: App, name: str, queue: str | None) -> None:
    """Resume NAME from its next scheduled time (runs missed while paused are not made up)."""
    entry = cron_api.resume(app.connection, app.settings, name, queue)
    say(f"cron entry {name} on {entry.queue} resumed, "
               f"next run {_when(entry.next_run, entry.timezone)}")
