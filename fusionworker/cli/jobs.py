"""``enqueue`` and the ``job`` group: list, show, retry, delete, cancel, priority."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable
from typing import Any

import click

from ..core.admin import server_time
from ..core.job import PRIORITY_MAX, PRIORITY_MIN, STATUSES, Job, JobStatus
from ..core.keys import InvalidQueueName
from ..core.queue import BULK_CHUNK, OPTIONS, PreparedJob, Queue, known_queues
from ..core.queue_names import ambiguous, queues_of
from ..core.registry import import_configured, registered
from ..exceptions import FunctionNotAllowed, FusionWorkerError, NoSuchJob, PartialEnqueue
from .common import (
    App,
    FiniteFloat,
    echo_json,
    fmt_age,
    import_options,
    on_one,
    parse_arg,
    parse_kwargs,
    pass_app,
    progress,
    require_queue,
    say,
    search_queue_option,
    table,
)

#: Version of the ``job list --json`` document (see docs/operations.md).
JOB_LIST_SCHEMA = 1


def _queue(app: App, name: str) -> Queue:
    return Queue(name, app.connection, settings=app.settings)


def _find(app: App, job_id: str, queue: str | None) -> Queue:
    if queue is not None:
        require_queue(app, queue)
    names = queues_of(app.connection, job_id, app.settings.prefix, queue)
    if not names:
        where = f"queue {queue!r}" if queue else "any queue"
        raise NoSuchJob(f"no job {job_id!r} in {where} (an ended job is kept "
                        f"FUSIONWORKER_RESULT_TTL / _FAILED_TTL seconds; its events stay: "
                        f"`events --job {job_id}`)")
    if len(names) > 1:     # one id given to jobs of two queues: never act on a guess
        raise click.UsageError(ambiguous(job_id, names))
    return _queue(app, names[0])


@click.command()
@click.argument("queue", required=False)
@click.argument("func", required=False)
@click.argument("args", nargs=-1)
@click.option("--queue", "-q", "queue_opt", metavar="QUEUE",
              help="The queue, as an option (RQ's `rq enqueue -q QUEUE FUNC ARGS`): then "
                   "the first argument is FUNC.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments as a JSON object.")
@click.option("--priority", type=click.IntRange(-1023, 1023),
              help="-1023..1023, higher runs first. Default: the function's @job priority, "
                   "else 0.")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True),
              help="Seconds. Default: the function's @job timeout, else "
                   "FUSIONWORKER_JOB_TIMEOUT.")
@click.option("--max-retries", type=click.IntRange(min=0),
              help="Default: the function's @job max_retries, else FUSIONWORKER_MAX_RETRIES.")
@click.option("--retry-delay", type=FiniteFloat(min=0), help="First retry delay, seconds.")
@click.option("--job-id")
@click.option("--unique-key", help="Skip if a live job with this key exists.")
@click.option("--group", help="Jobs of one group run one at a time, in order.")
@click.option("--in", "delay", type=FiniteFloat(min=0), help="Run after this many seconds.")
@click.option("--from-file", "from_file", type=click.File("r", encoding="utf-8"), metavar="JSONL",
              help="Enqueue one job per line of this file ('-' = stdin): a JSON object with "
                   "func, and optionally args, kwargs, options. Every line is checked before "
                   "anything is written.")
@import_options("Import MODULE first so that its @fusionworker.job functions may be "
                "enqueued by name (repeatable; adds to FUSIONWORKER_IMPORTS).")
@pass_app
def enqueue(app: App, queue: str, func: str | None, args: tuple[str, ...],
            kwargs_json: str | None, priority: int | None, timeout: float | None,
            max_retries: int | None, retry_delay: float | None, job_id: str | None,
            unique_key: str | None, group: str | None, delay: float | None,
            from_file: Any, imports: tuple[str, ...] = (), paths: tuple[str, ...] = (),
            queue_opt: str | None = None) -> None:
    """Enqueue FUNC (module:function) on QUEUE; prints the job id.

    ARGS are parsed as JSON where they parse, else kept as strings; NAME=VALUE
    is a keyword argument (as with `rq enqueue`; VALUE parsed the same way).
    A string holding '=' is given as JSON ('"a=b"').
    With --from-file, enqueue every job of a JSON-lines file in bulk instead.

    FUNC must be allowed, as for any producer: a @job function of a module
    named with --import (or FUSIONWORKER_IMPORTS), or a function of
    FUSIONWORKER_ALLOWED_MODULES. The current directory (and --path) is on
    the import path, as for `worker`; an allowed module is imported when it
    can be and a function it does not have is refused before anything is
    written. A module this machine cannot import is checked by name only (a
    warning says so). Options not given are the function's @job options
    (then the settings').
    """
    queue, func, args = _queue_first(queue_opt, queue, func, args)
    producer_imports(app, imports, paths)
    if from_file is not None:
        ctx = click.get_current_context()
        given = ["func"] * (func is not None) + [   # (with -q, FUNC came as QUEUE)
            name for name in ("args", "kwargs_json", "priority", "timeout", "max_retries",
                              "retry_delay", "job_id", "unique_key", "group", "delay")
            if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError("--from-file takes the jobs and their options from the "
                                   f"file; drop {', '.join(given).replace('_json', '')}")
        _enqueue_file(app, queue, from_file)
        return
    if func is None:
        raise click.UsageError("Missing argument 'FUNC' (or give --from-file).")
    kwargs = parse_kwargs(kwargs_json)
    arguments = []
    for a in args:
        name, eq, value = a.partition("=")
        if not eq or not name.isidentifier():
            arguments.append(parse_arg(a))
        elif name in kwargs:
            raise click.BadParameter(f"{name} is given twice", param_hint="ARGS")
        else:
            kwargs[name] = parse_arg(value)
    _warn_unimportable(func)
    q = _queue(app, queue)
    try:
        job = q.enqueue_call(func, arguments, kwargs, priority=priority, timeout=timeout,
                             max_retries=max_retries, retry_delay=retry_delay, job_id=job_id,
                             unique_key=unique_key, group=group,
                             _when=("in", delay) if delay else None)
    except FunctionNotAllowed as exc:
        raise click.ClickException(f"{exc}{_import_hint(func, app)}") from None
    if job.deduplicated:
        say(f"{job.id} (duplicate: existing job is {job.status})")
    else:
        say(job.id)


def producer_imports(app: App, imports: tuple[str, ...], paths: tuple[str, ...]) -> None:
    """The worker's import path and ``--import`` for a producer: the current directory,
    ``--path`` and FUSIONWORKER_PATH on ``sys.path``; FUSIONWORKER_IMPORTS and
    ``--import`` imported (their @job functions may be enqueued by name)."""
    from .worker_cmd import extend_sys_path

    extend_sys_path((*paths, *app.settings.path))
    if imports:
        app.settings = app.settings.replace(imports=(*app.settings.imports, *imports))
    import_configured(app.settings)


def _import_hint(func: str, app: App) -> str:
    """What to add when FUNC was refused and its module, importable here, was not named
    with --import: its @job functions are allowed once it is (nothing is imported
    unless named: a producer runs no code the command line did not ask for)."""
    module = func.partition(":")[0]
    if not module or ":" not in func:
        return ""
    if module in app.settings.imports:    # imported: FUNC is not one of its @job functions
        jobs = [ref.partition(":")[2] for ref in registered() if ref.startswith(module + ":")]
        return (f" (module {module} has no @job function {func.partition(':')[2]!r}; "
                f"its @job functions: {', '.join(jobs) or 'none'})")
    if not _importable(module):
        return ""
    return (f" (here: add --import {module} if {func.partition(':')[2]!r} is one of its "
            f"@job functions; else allow the module: FUSIONWORKER_ALLOWED_MODULES="
            f"{module.partition('.')[0]})")


def _importable(module: str) -> bool:
    """Python finds ``module`` here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _warn_unimportable(func: str) -> None:
    """One stderr line when FUNC's module cannot be found here: only its name is checked."""
    module = func.partition(":")[0]
    if not module or ":" not in func:
        return                          # the queue's own check says what is wrong
    if not _importable(module):
        say(f"warning: module {module!r} cannot be imported here (current directory: "
                   f"{os.getcwd()}); only the name {func!r} was checked, the worker checks "
                   "the rest", err=True)


#: Keys of one ``--from-file`` line, and the options it may give (enqueue's, plus ``in``).
FILE_FIELDS = ("func", "args", "kwargs", "options")
FILE_OPTIONS = tuple(sorted(OPTIONS)) + ("in",)


def _prepare_line(q: Queue, number: int, line: str) -> PreparedJob:
    """One line of a --from-file file, validated and encoded; UsageError naming the line."""
    def bad(message: str) -> click.UsageError:
        return click.UsageError(f"line {number}: {message}")

    doc = _read_line(line, bad)
    options = dict(doc.get("options", {}))
    delay = options.pop("in", None)
    try:
        return q.prepare_call(doc["func"], doc.get("args", []), doc.get("kwargs", {}),
                              _when=_delay(delay), **options)
    except (FusionWorkerError, ValueError, TypeError) as exc:
        raise bad(str(exc)) from None


def _read_line(line: str, bad: Callable[[str], click.UsageError]) -> dict[str, Any]:
    """A --from-file line's JSON object, its fields and options checked by name and type."""
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise bad(f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise bad("expected a JSON object with func, args, kwargs, options")
    for name in doc:
        if name not in FILE_FIELDS:
            raise bad(f"unknown field {name!r} (expected {', '.join(FILE_FIELDS)})")
    if "func" not in doc:
        raise bad("'func' is required")
    if not isinstance(doc.get("args", []), list):
        raise bad("'args' must be a JSON list")
    if not isinstance(doc.get("kwargs", {}), dict):
        raise bad("'kwargs' must be a JSON object")
    if not isinstance(doc.get("options", {}), dict):
        raise bad("'options' must be a JSON object")
    for name in doc.get("options", {}):
        if name not in FILE_OPTIONS:
            raise bad(f"unknown option {name!r} (expected {', '.join(FILE_OPTIONS)})")
    return doc


def _delay(delay: Any) -> tuple[str, float] | None:
    """A line's ``in`` option as the ``when`` of ``prepare_call``; ValueError unless
    seconds >= 0."""
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise ValueError(f"'in' must be a number of seconds >= 0, got {delay!r}")
    return ("in", float(delay))


def _queue_first(queue_opt: str | None, queue: str | None, func: str | None,
                 args: tuple[str, ...]) -> tuple[str, str | None, tuple[str, ...]]:
    """(QUEUE, FUNC, ARGS) of the command line: with -q, every argument moves one place
    on (the first is FUNC); RQ's order without it (`FUNC ARGS`, the queue forgotten) is
    refused naming ours."""
    if queue_opt is not None:
        return queue_opt, queue, (func, *args) if func is not None else args
    if queue is None:
        raise click.UsageError("Missing argument 'QUEUE' (or give -q QUEUE).")
    order = "the queue comes first, `enqueue QUEUE FUNC [ARGS]...` (or -q QUEUE FUNC [ARGS]...)"
    if func is not None and ":" in queue:           # RQ's order: `rq enqueue FUNC ARGS`
        raise click.UsageError(f"{queue!r} looks like a function: {order}")
    is_ref = func is None or ":" in func or (
        "." in func and all(part.isidentifier() for part in func.split(".")))
    if not is_ref and "." in queue:                 # a queue name may hold dots too
        raise click.UsageError(f"{func!r} is no function reference (module:function); if "
                               f"{queue!r} is the function, {order}")
    return queue, func, args


def _enqueue_file(app: App, queue: str, source: Any) -> None:
    q = _queue(app, queue)
    name = getattr(source, "name", "-")
    prepared = []
    for number, line in enumerate(source, 1):
        if line.strip():
            try:
                prepared.append(_prepare_line(q, number, line))
            except click.UsageError as exc:
                raise click.UsageError(f"{name} {exc.message}; nothing was enqueued") from None
    with progress(len(prepared) if len(prepared) > BULK_CHUNK else 0, "Enqueueing") as advance:
        try:
            jobs = q.enqueue_many(prepared, progress=advance)
        except PartialEnqueue as exc:
            raise click.ClickException(
                f"{exc}: the jobs of the first {len(exc.jobs)} lines were enqueued; the next "
                f"{BULK_CHUNK} may have been") from None
    dups = sum(1 for j in jobs if j.deduplicated)
    tail = f", {dups} duplicate{'s' if dups != 1 else ''} skipped" if dups else ""
    say(f"{len(jobs) - dups} jobs enqueued on {queue}{tail}")


@click.group()
def job() -> None:
    """Inspect and manage single jobs."""


@job.command("show")
@click.argument("job_id")
@search_queue_option("job")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def job_show(app: App, job_id: str, queue: str | None, as_json: bool) -> None:
    """Status, progress and meta, result or error of JOB_ID."""
    found = _find(app, job_id, queue).fetch_job(job_id)
    if found is None:
        raise NoSuchJob(f"no job {job_id!r}")
    if as_json:
        doc = found.to_dict()
        if found.batch:  # additive: the batch's counts and progress
            doc["batch_status"] = _batch_of(app, found.batch)[2]
        echo_json(doc)
        return
    say(f"job       {found.id}")
    say(f"queue     {found.queue}    priority {found.priority}")
    say(f"function  {found.func}")
    say(f"status    {found.status}    attempts {found.attempts}/{found.max_retries + 1}")
    say(f"times     {_times(found)}")
    if found.depends_on:
        extra = " (runs even if one fails)" if found.allow_dependency_failure else ""
        say(f"after     {', '.join(found.depends_on)}{extra}")
    if found.batch:
        bq, bid, st = _batch_of(app, found.batch)
        if st.get("exists") and "unreadable" in st:     # a key of another type
            say(f"batch     {bid} on {bq}: cannot be read ({st['unreadable']})")
        elif st.get("exists"):
            say(f"batch     {bid} on {bq}: {st['ended']}/{st['total']} ended, "
                f"{st['failed']} failed{'' if st['sealed'] else ' (open)'}")
        elif st.get("unreadable"):
            say(f"batch     {st['unreadable']!r} (names no queue: no counts)")
    _show_outcome(found)


def _batch_of(app: App, batch: str) -> tuple[str, str, dict[str, Any]]:
    """``(queue, batch id, batch_status)`` of a job's ``queue:id`` batch."""
    from ..core.batch import batch_status

    bq, _, bid = batch.partition(":")
    try:
        where = _queue(app, bq).qkeys.base
    except InvalidQueueName:    # a reference Redis holds that names no queue: no counts
        return bq, bid, {"exists": False, "unreadable": batch[:200]}
    return bq, bid, batch_status(app.connection, where, bid)


#: the characters of a value ``job show`` prints (``--json``: all of it)
SHOWN_CHARS = 2000


def _clipped(text: str) -> str:
    """``text`` whole, or its start and how much more there is (a 9 MiB result filled
    the terminal)."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text) - SHOWN_CHARS:,} more characters: --json)"


def _show_outcome(found: Job[Any]) -> None:
    """``job show``'s lines after the batch: worker, progress, meta, result, error."""
    if found.worker_name:
        say(f"worker    {found.worker_name}")
    if found.progress is not None:    # what the job reported (current_job().set_progress)
        message = f"  {found.progress_message}" if found.progress_message else ""
        say(f"progress  {found.progress * 100:.0f}%{message}")
    if found.meta:
        say(f"meta      {_clipped(json.dumps(found.to_dict()['meta']))}")
    if found.status == JobStatus.FINISHED:
        say(f"result    {_clipped(json.dumps(found.to_dict()['result']))}")
    if found.error:      # a job waiting again shows its last attempt's error as such
        label = "last error" if found.status in (JobStatus.QUEUED, JobStatus.SCHEDULED) else (
            "error    ")
        say(f"{label} {found.error}  [{found.failure_reason}]")
    if found.not_retried and found.status in (JobStatus.FAILED, JobStatus.STOPPED):
        say(f"why       {found.not_retried}")
    if found.traceback:
        say(found.traceback.rstrip())


def _times(found: Job[Any]) -> str:
    """``job show``'s times: enqueued, due, started, ended (UTC), how long it ran
    against its timeout."""
    def at(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + "Z"

    # a job waiting again (given back by the reaper, requeued) has not started since:
    # the times of the attempt before are not shown as its own
    waiting = found.status in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED,
                               JobStatus.HELD)
    parts = [f"{name} {at(t)}" for name, t in (
        ("enqueued", found.enqueued_at), ("due", found.scheduled_for),
        ("started", None if waiting else found.started_at),
        ("ended", None if waiting else found.ended_at)) if t]
    if found.status == JobStatus.STARTED and found.started_at:
        parts.append(f"running {max(0.0, time.time() - found.started_at):.1f} s of its "
                     f"{found.timeout:g} s timeout")
    elif found.duration is not None and not waiting:
        parts.append(f"ran {found.duration:.3f} s (timeout {found.timeout:g} s)")
    else:
        parts.append(f"timeout {found.timeout:g} s")
    return ", ".join(parts)


@job.command("list")
@click.option("--queue", "-q", help="Only this queue (default: every queue).")
@click.option("--status", "-s", "statuses", multiple=True, type=click.Choice([s.value for s in STATUSES]),
              help="Only jobs in this registry (repeatable; default: all).")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many jobs.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_app
def job_list(app: App, queue: str | None, statuses: tuple[str, ...], limit: int,
             as_json: bool) -> None:
    """Jobs by registry: queued (best first), scheduled (soonest), started, then
    finished, failed and canceled (newest first), stopped, deferred and held."""
    r = app.connection
    names = [require_queue(app, queue)] if queue else known_queues(r, app.settings.prefix)
    found, truncated = _listed_jobs(app, names, statuses or STATUSES, limit)
    if as_json:
        echo_json({"schema": JOB_LIST_SCHEMA, "jobs": [j.to_dict() for j in found],
                   "count": len(found), "truncated": truncated})
        return
    now = server_time(r)
    rows = [[j.id, j.queue, j.status, j.priority, j.func, j.attempts, _when(j, now),
             _short(j.error)] for j in found]
    for line in table(["ID", "QUEUE", "STATUS", "PRIO", "FUNCTION", "TRIES", "WHEN", "ERROR"],
                      rows, right=(3, 5)):
        say(line)
    more = f" (more not shown: the --limit is {limit})" if truncated else ""
    say(f"{len(found)} job(s){more}")


def _listed_jobs(app: App, names: list[str], wanted: tuple[str, ...] | Any,
                 limit: int) -> tuple[list[Job[Any]], bool]:
    """Up to ``limit`` jobs of the ``wanted`` registries of queues ``names``, registry
    by registry in lifecycle order, and whether more were left out."""
    found: list[Job[Any]] = []
    truncated = False
    for status in STATUSES:  # lifecycle order, whatever order the flags came in
        if status not in wanted or (status == JobStatus.STOPPED and JobStatus.FAILED in wanted):
            continue             # (stopped jobs are kept, and listed, with the failed ones)
        for name in names:
            room = limit - len(found)
            if room <= 0 and truncated:
                return found, truncated
            # with no room left, one job is read: whether any was left out
            batch = Queue(name, app.connection, settings=app.settings).jobs(status, room + 1)
            if len(batch) > room:
                truncated = True
            found += batch[:room]
    return found, truncated


def _when(j: Job[Any], now: float) -> str | None:
    """``job list``'s WHEN: how soon a scheduled job is due, else how long ago it last
    moved (ended, started or enqueued)."""
    if j.status == JobStatus.SCHEDULED and j.scheduled_for:
        return "in " + fmt_age(max(0.0, j.scheduled_for - now))
    since = j.ended_at or j.started_at or j.enqueued_at
    return fmt_age(now - since) + " ago" if since else None


def _short(text: str | None, width: int = 60) -> str | None:
    if not text:
        return None
    line = text.splitlines()[0]
    return line if len(line) <= width else line[:width - 1] + "\u2026"


@on_one(job, "stop", "job_id", "job")
def job_stop(app: App, job_id: str, queue: str | None) -> None:
    """Stop JOB_ID: a running job is killed by its worker, on whatever host, and ends
    stopped (no retry; its on_stopped callback runs); a queued one is canceled."""
    q = _find(app, job_id, queue)
    found = q.stop(job_id)
    if found.status == JobStatus.CANCELED:
        say(f"Canceled {job_id} on {q.name} (it had not started)")
    else:
        say(f"Stopping {job_id} on {q.name} (worker {found.worker_name or '?'})")


def _job_change(name: str, method: str, said: str, help_text: str) -> click.Command:
    """``job NAME JOB_ID``: the job's queue's ``method`` on it, then ``said`` (``{id}``,
    ``{queue}``)."""
    def change(app: App, job_id: str, queue: str | None) -> None:
        q = _find(app, job_id, queue)
        getattr(q, method)(job_id)
        say(said.format(id=job_id, queue=q.name))
    change.__doc__ = help_text
    return on_one(job, name, "job_id", "job")(change)


job_retry = _job_change("retry", "requeue", "Requeued {id} on {queue}",
                        "Move failed JOB_ID back to its queue (attempts start over).")
job_delete = _job_change(
    "delete", "delete", "Deleted {id} from {queue}",
    "Delete JOB_ID and every reference to it (a running job finishes unrecorded).")
job_cancel = _job_change("cancel", "cancel", "Canceled {id} on {queue}",
                         "Cancel a queued, scheduled, deferred or held JOB_ID (it stays visible as "
                         "canceled).")
job_hold = _job_change(
    "hold", "hold", "Held {id} on {queue}",
    "Set queued or scheduled JOB_ID aside: no worker claims it until `job release`.\n\n"
    "It keeps its place (priority and order, or its due time) and is listed as held.")


@on_one(job, "release", "job_id", "job")
def job_release(app: App, job_id: str, queue: str | None) -> None:
    """Give held JOB_ID back its place in its queue: workers claim it again."""
    q = _find(app, job_id, queue)
    found = q.release(job_id)
    say(f"Released {job_id} on {q.name} ({found.status})")


@job.command("priority")
@click.argument("job_id")
@click.argument("priority", type=click.IntRange(PRIORITY_MIN, PRIORITY_MAX))
@search_queue_option("job")
@pass_app
def job_priority(app: App, job_id: str, priority: int, queue: str | None) -> None:
    """Re-score pending JOB_ID to PRIORITY (higher runs first); refused unless pending.

    Negative priorities need `--`: job priority -- ID -5.
    """
    q = _find(app, job_id, queue)
    found = q.reprioritize(job_id, priority)
    say(f"{job_id} on {q.name}: priority {found.priority}")
