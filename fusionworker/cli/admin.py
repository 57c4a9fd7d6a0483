"""Operator commands: info, suspend/resume, pause/unpause, set-max-active, requeue, health."""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
import redis
from redis.exceptions import RedisClusterException

from ..core import admin
from ..core.keys import check_queue_name
from ..core.queue import BANDS, Queue, known_queues, parse_rate
from ..core.queue_names import ambiguous, queues_of
from ..exceptions import InvalidOperation, NoSuchJob
from ..ops.embedded import RedisUnavailable
from ..ops.health import check
from ..ops.info import collect_info
from .common import (
    App,
    FiniteFloat,
    echo_json,
    fmt_age,
    on_queue,
    pass_app,
    progress,
    require_queue,
    say,
    table,
    unknown_queues,
)


def _queue_lines(queues: list[dict[str, Any]]) -> list[str]:
    band_names = [b[0] for b in BANDS]
    headers = ["QUEUE", "PENDING", *(b.upper() for b in band_names), "AWAIT", "SCHED", "HELD",
               "STARTED", "FAILED", "FINISHED", "MAX", "GROUPS", "OLDEST", "STATE"]
    cron = any("cron" in q for q in queues)
    if cron:  # cron entries (per queue), when the cron feature reports them
        headers.insert(-1, "CRON")
    rated = any(q.get("rate_limit") or q.get("group_rate_limit") for q in queues)
    if rated:  # rate limits and how long they held their queue
        headers.insert(-1, "RATE")
    deferred = any(q.get("deferred") for q in queues)   # jobs waiting on dependencies
    at = headers.index("SCHED") + 1
    if deferred:
        headers.insert(at, "DEFERRED")
    rows = [_queue_row(q, band_names, cron, rated, at if deferred else None) for q in queues]
    lines = table(headers, rows, right=range(1, len(headers) - 1))
    lines.append(_queues_summary(queues))
    return lines


def _queue_row(q: dict[str, Any], band_names: list[str], cron: bool, rated: bool,
               deferred_at: int | None) -> list[Any]:
    """One queue's row of ``info``; ``cron``/``rated``: those columns are shown,
    ``deferred_at``: where the DEFERRED column is (None: not shown)."""
    row = [q["queue"], q["pending"], *(q["bands"].get(b, 0) for b in band_names),
           q.get("awaiting_compute", 0), q["scheduled"], q.get("held", 0), q["started"], q["failed"], q.get("finished", 0),
           q["max_active"], q.get("busy_groups", 0), fmt_age(q["oldest_age"]),
           "cannot be read" if q.get("unreadable") else "paused" if q["paused"] else "active"]
    if cron:
        value = q.get("cron")
        row.insert(-1, len(value) if isinstance(value, (list, dict)) else value)
    if rated:
        row.insert(-1, "; ".join(filter(None, (fmt_rate(q.get("rate_limit")),
                                                fmt_group_rate(q.get("group_rate_limit")))))
                   or None)
    if deferred_at is not None:
        row.insert(deferred_at, q.get("deferred", 0))
    return row


def _queues_summary(queues: list[dict[str, Any]]) -> str:
    """``info``'s line under the queues: their totals (and the last hour's, when known)."""
    total = {k: sum(q[k] for q in queues) for k in ("pending", "started", "failed")}
    summary = (f"{len(queues)} queue(s): {total['pending']} pending, {total['started']} "
               f"started, {total['failed']} failed")
    if all("last_hour" in q for q in queues):
        hour = {k: sum(q["last_hour"][k] for q in queues) for k in ("finished", "failed")}
        summary += f"; last hour {hour['finished']} finished, {hour['failed']} failed"
    return summary


def fmt_rate(rate: dict[str, Any] | None) -> str | None:
    """``10/s (held 3.2 s)`` for ``info``; None without a limit."""
    if not rate:
        return None
    unit = {1.0: "s", 60.0: "m", 3600.0: "h"}.get(rate["window"])
    text = f"{rate['limit']}/{unit}" if unit else f"{rate['limit']}/{rate['window']:g}s"
    return f"{text} (held {rate['held_seconds']:.1f} s)" if rate["held_seconds"] else text


def fmt_group_rate(rate: dict[str, Any] | None) -> str | None:
    """``5/s per group, 2 groups own (held 3.2 s)`` for ``info``; None without any."""
    if not rate:
        return None
    parts = []
    if rate["every"]:
        parts.append(f"{fmt_rate({**rate['every'], 'held_seconds': 0})} per group")
    if rate["groups"]:
        n = len(rate["groups"])
        parts.append(f"{n} group{'s' if n > 1 else ''} own")
    text = ", ".join(parts)
    return f"{text} (held {rate['held_seconds']:.1f} s)" if rate["held_seconds"] else text


def _worker_lines(workers: list[dict[str, Any]]) -> list[str]:
    rows = []
    for w in workers:
        state = w["state"] + (f" ({w['throttle']})" if w["throttle"] else "")
        job = (f"{w['current_job']} ({w['current_queue']})" if w["current_job"] else None)
        if job and len(w.get("current_jobs") or ()) > 1:   # --concurrency N: N jobs at once
            job += f" +{len(w['current_jobs']) - 1} more"
        rows.append([w["name"], w["host"], w["pid"], state, ",".join(w["queues"]) or None, job,
                     fmt_age(w["current_job_age"]) if job else None, fmt_age(w["heartbeat_age"]),
                     w["successful"], w["failed"]])
    lines = table(["WORKER", "HOST", "PID", "STATE", "QUEUES", "JOB", "RUNNING", "BEAT", "OK",
                   "FAILED"], rows, right=(2, 6, 7, 8, 9))
    states: dict[str, int] = {}
    for w in workers:
        states[w["state"]] = states.get(w["state"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    lines.append(f"{len(workers)} worker(s)" + (f": {summary}" if summary else ""))
    return lines


def _cron_lines(entries: list[dict[str, Any]], now: float) -> list[str]:
    rows = []
    for e in entries:
        nxt = "paused" if e["paused"] else None if e["next_run"] is None else (
            f"in {fmt_age(e['next_run'] - now)}" if e["next_run"] > now else "due now")
        last = (f"{fmt_age(now - e['last_run'])} ago" if e["last_run"] is not None else None)
        rows.append([e["name"], e["queue"], e["schedule"], e["timezone"], nxt, last,
                     e["last_status"], e["last_job_status"], e["runs"], e["skips"]])
    return table(["CRON", "QUEUE", "SCHEDULE", "TZ", "NEXT", "LAST RUN", "LAST", "JOB", "RUNS",
                  "SKIPS"], rows, right=(8, 9))


def _group_lines(groups: list[dict[str, Any]]) -> list[str]:
    rows = [[g["group"], g["queue"], g["job_id"], g["job_status"], g["waiting"]] for g in groups]
    return table(["BUSY GROUP", "QUEUE", "HELD BY", "STATUS", "WAITING"], rows, right=(4,))


def render_info(doc: dict[str, Any], first_page: bool = False) -> str:
    """The text screen of ``info`` from its JSON document (``first_page``: the page
    shown by default, when there are more queues than one page: says how to see the
    rest)."""
    stamp = datetime.fromtimestamp(doc["time"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"fusionworker {doc['version']} on {doc['redis_url']} (prefix {doc['prefix']}) "
             f"at {stamp}"]
    if doc["suspended"]:
        until = (f" (resume in {fmt_age(doc['suspended_remaining'])})"
                 if doc["suspended_remaining"] is not None else " (until `resume`)")
        lines.append(f"*** all workers SUSPENDED{until} ***")
    if "queues" in doc:
        lines += ["", *_queue_lines(doc["queues"])]
        if first_page:
            lines.append(f"(the first {len(doc['queues'])} of {doc['queues_total']} queues, "
                         f"page 1 of {doc['pages']}: --page N for another, --all for every "
                         f"queue)")
        elif "page" in doc:
            lines.append(f"page {doc['page']} of {doc['pages']} ({doc['queues_total']} "
                         f"queue(s) in all; --page N for another)")
    if doc.get("cron"):
        lines += ["", *_cron_lines(doc["cron"], doc["time"])]
    if doc.get("groups"):
        lines += ["", *_group_lines(doc["groups"])]
    if "workers" in doc:
        lines += ["", *_worker_lines(doc["workers"])]
    return "\n".join(lines)


@click.command()
@click.argument("queue_names", metavar="[QUEUE]...", nargs=-1)
@click.option("-W", "--only-workers", is_flag=True, help="Workers only.")
@click.option("-Q", "--only-queues", is_flag=True, help="Queues only.")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output (schema in docs/operations.md).")
@click.option("--interval", "-i", type=FiniteFloat(min=0.1), metavar="SECONDS",
              help="Refresh every SECONDS until Ctrl-C (with --json: one JSON line each).")
@click.option("--page", type=click.IntRange(min=1), metavar="N",
              help="Only the queues of page N (by name; see --per-page).")
@click.option("--per-page", type=click.IntRange(1, 500), default=50, show_default=True,
              metavar="N", help="Queues per page (with --page, and of the text's first "
              "page when there are more queues).")
@click.option("--all", "every", is_flag=True,
              help="Every queue in the text output, however many (the JSON always has "
              "every queue unless --page is given).")
@pass_app
def info(app: App, queue_names: tuple[str, ...], only_workers: bool, only_queues: bool,
         as_json: bool, interval: float | None, page: int | None, per_page: int,
         every: bool) -> None:
    """Queues (depth, bands, registries) and workers (state, current job); with QUEUE
    names (RQ's ``rq info Q1 Q2``), those queues and the workers serving them.

    With more queues than --per-page (50), the text shows the first page and a last
    line saying how many there are: --page N for another page, --all for every queue.
    --json lists every queue (or only page N with --page)."""
    if only_workers and only_queues:
        raise click.UsageError("-W/--only-workers and -Q/--only-queues exclude each other")
    if every and page is not None:
        raise click.UsageError("--all and --page exclude each other")
    first_page = page is None and not every and not as_json
    only = [require_queue(app, q) for q in queue_names]
    try:
        while True:
            doc = collect_info(app, queues=not only_workers, workers=not only_queues,
                               page=1 if first_page else page, per_page=per_page,
                               only=only)
            if first_page and doc.get("queues_total", 0) <= per_page:
                for name in ("page", "per_page", "pages"):
                    doc.pop(name, None)   # one page holds them all: today's screen
            _show_info(doc, as_json, interval, first_page)
            if not interval:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def _show_info(doc: dict[str, Any], as_json: bool, interval: float | None,
               first_page: bool) -> None:
    """One screen of ``info`` (with ``--interval``: one line of JSON, or the screen
    cleared first and the refresh said under it)."""
    if as_json:
        if interval:
            say(json.dumps(doc, sort_keys=True, default=str))
        else:
            echo_json(doc)
        return
    if interval and sys.stdout.isatty():
        click.clear()
    say(render_info(doc, first_page=first_page and "page" in doc))
    if interval:
        say(f"\n(refreshing every {interval:g} s; Ctrl-C to stop)")


@click.command()
@click.option("--duration", type=FiniteFloat(min=0, min_open=True, max=1e9), metavar="SECONDS",
              help="Resume by itself after this many seconds.")
@pass_app
def suspend(app: App, duration: float | None) -> None:
    """Suspend all workers: they finish the current job, then claim nothing."""
    admin.suspend(app.connection, app.settings.prefix, duration)
    say("Suspended all workers" + (f" for {duration:g} s" if duration else
                                          " (until `resume`)"))


@click.command()
@pass_app
def resume(app: App) -> None:
    """Resume suspended workers."""
    admin.resume(app.connection, app.settings.prefix)
    say("Resumed all workers")


@click.command()
@click.argument("name")
@click.option("--cold", is_flag=True,
              help="Cold: its running jobs go back to their queues (attempt not counted).")
@pass_app
def shutdown(app: App, name: str, cold: bool) -> None:
    """Stop worker NAME (from `info`), on whatever host, as SIGTERM would: warm, its
    running jobs finish (--cold: they go back). It hears it at once, or at its next
    heartbeat at the latest."""
    try:
        admin.request_shutdown(app.connection, name, app.settings.prefix,
                               "cold" if cold else "warm")
    except InvalidOperation as exc:
        raise click.ClickException(str(exc)) from None
    say(f"Asked worker {name} for a {'cold' if cold else 'warm'} shutdown")


def _warn_unknown(app: App, queue: str) -> Queue:
    q = Queue(queue, app.connection, settings=app.settings)
    if queue not in known_queues(app.connection, app.settings.prefix):
        say(f"Note: no job was ever enqueued to {queue!r} (typo?); "
                   "the setting applies when one is", err=True)
    return q


@on_queue(click.command())
def pause(app: App, queue: str) -> None:
    """Pause QUEUE: no worker anywhere claims from it (running jobs finish)."""
    _warn_unknown(app, queue).pause()
    say(f"Paused {queue}")


@on_queue(click.command())
def unpause(app: App, queue: str) -> None:
    """Let workers claim from QUEUE again."""
    _warn_unknown(app, queue).unpause()
    say(f"Unpaused {queue}")


@click.command("set-max-active")
@click.argument("queue")
@click.argument("limit", metavar="N", type=click.IntRange(min=1), required=False)
@click.option("--none", "no_cap", is_flag=True, help="Remove the cap.")
@pass_app
def set_max_active(app: App, queue: str, limit: int | None, no_cap: bool) -> None:
    """Run at most N jobs of QUEUE at once, over all workers (--none: no cap).

    N must be at least 1; to stop a queue use `pause`.
    """
    if (limit is None) == (not no_cap):
        raise click.UsageError("give N (at least 1) or --none")
    _warn_unknown(app, queue).set_max_active(None if no_cap else limit)
    say(f"{queue}: no cap on running jobs" if no_cap
               else f"{queue}: at most {limit} job(s) running at once")


@click.command("set-rate-limit")
@click.argument("queue")
@click.argument("rate", metavar="N/s|N/m|N/h", required=False)
@click.option("--none", "no_limit", is_flag=True,
              help="Remove the rate limit (with --per-group or --group: that one).")
@click.option("--per-group", is_flag=True,
              help="A limit for every group of QUEUE, each in its own window.")
@click.option("--group", "group", metavar="G", default=None,
              help="A limit for group G only (in place of the --per-group one).")
@pass_app
def set_rate_limit(app: App, queue: str, rate: str | None, no_limit: bool, per_group: bool,
                   group: str | None) -> None:
    """Start at most N jobs of QUEUE per second, minute or hour, over all workers
    and hosts (--none: no limit).

    Enforced in the claim script by the Redis server's clock: in no window of
    that length do more than N jobs of QUEUE start. Other queues are not held.

    With --per-group, every group of QUEUE (jobs enqueued with group=...) gets
    its own window of N; with --group G, group G alone. A job whose group's
    window is full waits (scheduled) for its group's next slot; the queue's
    other groups and jobs go on. The queue's own limit, if any, applies too.
    """
    if (rate is None) == (not no_limit):
        raise click.UsageError("give a rate such as 10/s, 600/m, 1000/h, or --none")
    if per_group and group is not None:
        raise click.UsageError("give --per-group or --group G, not both")
    if group is not None and not group:
        raise click.BadParameter("the group name is empty", param_hint="--group")
    if rate is not None:
        try:
            parse_rate(rate)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="RATE") from None
    _warn_unknown(app, queue).set_rate_limit(None if no_limit else rate, per_group=per_group,
                                             group=group)
    scope = (f"{queue}, every group" if per_group
             else f"{queue}, group {group}" if group is not None else queue)
    if no_limit and group is not None:
        say(f"{scope}: no rate limit of its own (the per-group one applies, if any)")
    else:
        say(f"{scope}: no rate limit" if no_limit
                   else f"{scope}: at most {rate} job starts")


@click.command()
@click.argument("job_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every failed job.")
@click.option("--queue", "-q", help="Only this queue.")
@pass_app
def requeue(app: App, job_ids: tuple[str, ...], all_: bool, queue: str | None) -> None:
    """Move failed jobs (JOB_IDS, or --all) back to their queue; prints how many."""
    if all_ == bool(job_ids):
        raise click.UsageError("give JOB_IDs or --all (not both)")
    r = app.connection
    prefix = app.settings.prefix
    if queue is not None:
        require_queue(app, queue)
    if all_:
        names = [queue] if queue else known_queues(r, prefix)
        queues = [Queue(n, r, settings=app.settings) for n in names]
        count = sum(int(r.zcard(q.qkeys.failed)) for q in queues)
        with progress(count, "Requeueing") as advance:
            total = sum(q.requeue_all_failed(progress=advance) for q in queues)
        say(f"Requeued {total} job(s)")
        return
    total, errors = _requeue_each(app, job_ids, queue)
    if total or not errors:     # a lone unknown id prints its error only
        say(f"Requeued {total} job(s)")
    if errors:
        for line in errors:
            say(f"Error: {line}", err=True)
        sys.exit(1)


def _requeue_each(app: App, job_ids: tuple[str, ...], queue: str | None,
                  ) -> tuple[int, list[str]]:
    """Requeue each failed job of ``job_ids`` (of ``queue``, if given): how many were,
    and the error of each that was not."""
    total = 0
    errors = []
    with progress(len(job_ids) if len(job_ids) > 1 else 0, "Requeueing") as advance:
        for job_id in job_ids:
            names = queues_of(app.connection, job_id, app.settings.prefix, queue)
            try:
                if not names:
                    raise NoSuchJob(f"no job {job_id!r}" + (f" in queue {queue!r}" if queue
                                                             else ""))
                if len(names) > 1:
                    raise InvalidOperation(ambiguous(job_id, names))
                Queue(names[0], app.connection, settings=app.settings).requeue(job_id)
                total += 1
            except (NoSuchJob, InvalidOperation) as exc:
                errors.append(str(exc))
            advance(1)
    return total, errors


@click.command()
@click.option("--queue", "-q", "queues", multiple=True, metavar="QUEUE",
              help="Also require a live worker on QUEUE and no job of it stuck past its "
                   "deadline (repeatable).")
@click.option("--timeout", type=FiniteFloat(min=0.1, max=86400), default=5.0, show_default=True,
              help="Seconds to wait for Redis.")
@click.option("--local", is_flag=True,
              help="Also require this host's own workers to be live: one at least, none "
                   "silent (frozen, hung); a Kubernetes liveness probe of the pod.")
@pass_app
def health(app: App, queues: tuple[str, ...], timeout: float, local: bool) -> None:
    """Exit 0 when healthy; else exit 1 with one line saying why (systemd, Docker, k8s)."""
    app.socket_timeout = timeout
    for name in queues:
        check_queue_name(name)
    try:
        unknown = unknown_queues(app.connection, app.settings.prefix, queues)
        result = check(app.connection, app.settings.prefix, queues,
                       host=socket.gethostname() if local else None)
    except (RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:
        message = str(exc)
        if app.masked_url not in message:
            message = f"cannot reach Redis at {app.masked_url}: {message}"
        say(f"unhealthy: {message}", err=True)
        sys.exit(1)
    except (redis.RedisError, RedisClusterException) as exc:   # no Redis answering there
        say(f"unhealthy: Redis at {app.masked_url} answered {type(exc).__name__}: {exc}",
            err=True)
        sys.exit(1)
    if unknown:
        known = known_queues(app.connection, app.settings.prefix)
        say(f"unhealthy: unknown queue {', '.join(map(repr, unknown))} (known: "
                   f"{', '.join(known) or 'none'})", err=True)
        sys.exit(1)
    if not result.ok:
        say(result.message, err=True)
        sys.exit(1)
    say(result.message)
