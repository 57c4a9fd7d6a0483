"""What ``info`` shows: one JSON document of the queues, cron entries, busy groups
and workers (``fusionworker info --json``, the web's ``/api/info``), and the age
format both print."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

from ..core import admin
from ..core.config import Settings
from ..core.groups import describe_busy_groups
from ..core.queue import Queue, known_queues
from ..middleware import cron

__all__ = ["INFO_SCHEMA", "InfoSource", "collect_info", "fmt_age"]


class InfoSource(Protocol):
    """What :func:`collect_info` reads (the CLI's ``App``, the web's dashboard)."""

    @property
    def connection(self) -> Any: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def masked_url(self) -> str: ...


#: Version of the ``info --json`` document (see docs/operations.md). Fields may be
#: added within a version; none is renamed or removed.
INFO_SCHEMA = 1


def collect_info(app: InfoSource, queues: bool = True, workers: bool = True) -> dict[str, Any]:
    """Everything ``info`` shows, as the documented JSON document (``info --json``,
    the web's ``/api/info``)."""
    r = app.connection
    prefix = app.settings.prefix
    now = admin.server_time(r)
    remaining = admin.suspended_for(r, prefix)
    doc: dict[str, Any] = {
        "schema": INFO_SCHEMA,
        "version": _version(),
        "redis_url": app.masked_url,
        "prefix": prefix,
        "time": now,
        "suspended": remaining is not None,
        "suspended_remaining": remaining if remaining is not None and remaining >= 0 else None,
    }
    heartbeats = admin.workers(r, prefix)     # read once: each queue's awaiting_compute
    if queues:
        names = known_queues(r, prefix)
        doc["queues"] = [Queue(n, r, settings=app.settings).stats(heartbeats) for n in names]
        for q in doc["queues"]:   # the per-minute counts the workers keep (the web chart's)
            rows = admin.minute_counts(r, [q["queue"]], prefix, now=now)
            q["last_hour"] = {"finished": sum(row["finished"] for row in rows),
                              "failed": sum(row["failed"] for row in rows)}
        entries = cron.list_entries(r, prefix, names)
        doc["cron"] = [e.to_dict() for e in entries]
        for q in doc["queues"]:
            q["cron"] = sum(1 for e in entries if e.queue == q["queue"])
        doc["groups"] = [
            {"queue": n, **asdict(g)}
            for n, q in zip(names, doc["queues"]) if q.get("busy_groups")
            for g in describe_busy_groups(r, prefix, n, limit=10)
        ]
    if workers:
        doc["workers"] = [{**admin.describe_worker(w, now), **_event_sink(w)}
                          for w in heartbeats]
    return doc


#: the event sink's counters a worker writes into its heartbeat (events/middleware.py)
EVENT_SINK_FIELDS = ("events_buffered", "events_dropped", "events_errors")


def _event_sink(heartbeat: dict[str, str]) -> dict[str, int | None]:
    """The worker's event-sink counters (None: a worker that writes none)."""
    out: dict[str, int | None] = {}
    for name in EVENT_SINK_FIELDS:
        try:
            out[name] = int(heartbeat[name])
        except (KeyError, ValueError):
            out[name] = None
    return out



def fmt_age(seconds: float | None) -> str:
    """``4.2s``, ``3.5m``, ``2.1h``, ``3.0d``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"




def _version() -> str:
    from .. import __version__

    return __version__
