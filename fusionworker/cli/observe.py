"""Observability commands: ``events`` (the Redis event stream) and ``exporter`` (Prometheus)."""

from __future__ import annotations

import json
import signal
import threading
from datetime import datetime
from typing import Any

import click

from .. import events as ev
from ..core.queue import find_queue_of, known_queues
from ..core.redis_client import stored_number
from .common import App, checked_address, pass_app, say, unknown_queues

#: Width of the event column: the longest event name plus two spaces.
_EVENT_WIDTH = max(len(e) for e in ev.EVENTS) + 1


def _clock(timestamp: str | None) -> str:
    """``2024-01-15T10:30:00.123Z`` -> local ``HH:MM:SS.mmm``."""
    if not timestamp:
        return "--:--:--.---"
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone()
    except (ValueError, OverflowError):     # no time this clock can say: as it is
        return timestamp
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def format_event(doc: dict[str, Any]) -> str:
    """One readable line: ``12:00:01.234 processing job 7f3… sms tests.jobs:add worker h.1``."""
    parts = [_clock(doc.get("@timestamp")), f"{doc.get('event', '?'):<{_EVENT_WIDTH}}",
             f"job {doc.get('job_id', '?')}", str(doc.get("queue", "?")),
             str(doc.get("function") or "?")]
    if doc.get("priority") not in (None, 0):
        parts.append(f"priority {doc['priority']}")
    if doc.get("attempt"):
        parts.append(f"attempt {doc['attempt']}")
    if doc.get("worker"):
        parts.append(f"worker {doc['worker']}")
    # an event's numbers as the stream holds them: one that holds none there ("x",
    # "inf") is shown as it is, and the other events still print
    for name, said, scale, unit in (("wait_time", "waited ", 1000, " ms"),
                                    ("duration", "in ", 1000, " ms")):
        if doc.get(name) is not None:
            number = stored_number(doc[name])
            parts.append(f"{said}{number * scale:.1f}{unit}" if number is not None
                         else f"{said}{str(doc[name])[:40]!r}")
    if doc.get("progress") is not None:
        share = stored_number(doc["progress"])
        parts.append(f"{share * 100:.0f}%" if share is not None
                     else f"progress {str(doc['progress'])[:40]!r}")
        if doc.get("progress_message"):
            parts.append(str(doc["progress_message"]))
    if doc.get("reason") and doc.get("event") != doc.get("reason"):
        parts.append(f"[{doc['reason']}]")
    if doc.get("error_type"):
        parts.append(f"{doc['error_type']}: {doc.get('error_message') or ''}".rstrip(": "))
    return "  ".join(parts)


def _print(stream_id: str, doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        say(json.dumps({"id": stream_id, **doc}, default=str))
    else:
        say(format_event(doc))


def _stream_order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and (seq or "0").isdigit() else (0, 0)


def _past(r: Any, prefix: str, job_id: str | None, queue: str | None, limit: int,
          pinned: str) -> list[tuple[str, dict[str, Any]]]:
    """The newest ``limit`` events up to ``pinned``: one job's from its own history (all
    of them, however busy the stream was), else (or for a job without one) the stream's."""
    if job_id:
        where = find_queue_of(r, job_id, prefix, queue)
        kept = [(i, doc) for i, doc in ev.job_history(r, prefix, where, job_id)
                if _stream_order(i) <= _stream_order(pinned)] if where else []
        if kept:
            return kept[-limit:] if limit else []
    if pinned == "0-0":
        return []
    return ev.last_events(r, prefix, job_id=job_id, queue=queue, count=limit, until=pinned)


@click.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events until Ctrl-C.")
@click.option("--job", "job_id", metavar="ID", help="Only events of this job.")
@click.option("--queue", "-q", metavar="Q", help="Only events of this queue.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--limit", "-n", type=click.IntRange(min=0), default=50, show_default=True,
              help="How many past events to show (the newest ones).")
@pass_app
def events(app: App, follow: bool, job_id: str | None, queue: str | None, as_json: bool,
           limit: int) -> None:
    """Print job events from the Redis event stream, oldest first.

    Events are queued, processing, progress, completed, failed, retry,
    timeout, abandoned, canceled, requeued, deleted, reprioritized, held,
    released, and admin (a dashboard action); `--job ID`
    lists one job's events in the order they happened. When ELASTICSEARCH_URL
    is set, workers and producers send events to Elasticsearch (index ELASTICSEARCH_INDEX)
    instead and this stream stays empty: query the index there. With
    FUSIONWORKER_EVENTS=0 none is written at all.
    """
    settings = app.settings
    if not settings.events:
        say("note: FUSIONWORKER_EVENTS=0: producers and workers with this setting write no "
            "events", err=True)
    elif settings.elasticsearch_url:
        say("note: ELASTICSEARCH_URL is set: events go to Elasticsearch index "
                   f"{settings.elasticsearch_index!r}, not to this Redis stream", err=True)
    r = app.connection
    # pin the end first: history is <= it, following is > it; nothing shown twice or missed
    pinned = ev.last_id(r, settings.prefix)
    shown = 0
    for stream_id, doc in _past(r, settings.prefix, job_id, queue, limit, pinned):
        _print(stream_id, doc, as_json)
        shown += 1
    if job_id and not shown and limit and find_queue_of(r, job_id, settings.prefix) is None:
        message = f"no job {job_id!r}: no queue holds it and no event names it"
        if not follow:
            raise click.ClickException(message)
        say(f"note: {message} (yet); waiting for its events", err=True)
    if not follow:
        return
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for stream_id, doc in ev.follow_events(r, settings.prefix, job_id=job_id, queue=queue,
                                               after=pinned, block_ms=500, stop=stop):
            _print(stream_id, doc, as_json)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command()
@click.option("--port", "-p", type=click.IntRange(min=1, max=65535), required=True,
              help="Port of the /metrics endpoint.")
@click.option("--bind", "--addr", "addr", default="127.0.0.1", show_default=True, metavar="ADDR",
              callback=checked_address,
              help="Address to listen on (0.0.0.0 = every interface; --addr is the old name).")
@click.option("--queue", "--queues", "-q", "queues", metavar="QUEUES",
              help="Comma list of queues to report (default: every known queue).")
@pass_app
def exporter(app: App, port: int, addr: str, queues: str | None) -> None:
    """Serve deployment-wide Prometheus gauges read from Redis on each scrape.

    Queue depth by priority band, started, scheduled, failed, finished,
    paused, age of the oldest job, live workers by state. Per-worker counters
    and histograms come from `worker --metrics-port P` instead.
    """
    from prometheus_client import start_http_server

    from ..middleware.metrics import exporter_registry

    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    r = app.connection
    r.ping()
    # a misspelt name would be reported as an empty queue, for good: said, not refused
    # (a queue may be named before its first job, e.g. the exporter deployed first)
    unknown = unknown_queues(r, app.settings.prefix, names or [])
    if unknown:
        known = known_queues(r, app.settings.prefix)
        say(f"warning: no job was ever enqueued to queue {', '.join(map(repr, unknown))} and "
            f"no live worker serves it: its gauges read 0 until one does (known: "
            f"{', '.join(known) or 'none'})", err=True)
    registry = exporter_registry(r, app.settings, names)
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {addr}:{port}: {exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    say(f"Exporter serving http://{addr}:{port}/metrics "
               f"({', '.join(names) if names else 'all queues'}); Ctrl-C to stop", err=True)
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
