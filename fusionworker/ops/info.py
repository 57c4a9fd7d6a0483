"""What ``info`` shows: one JSON document of the queues, cron entries, busy groups
and workers (``fusionworker info --json``, the web's ``/api/info``), and the age
format both print."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Protocol

from ..core import admin, cron
from ..core.groups import describe_busy_groups
from ..core.hooks import Connected
from ..core.keys import Keys
from ..core.queue import known_queues
from ..core.queue_read import stats_many
from ..core.redis_client import stored_count

__all__ = ["INFO_SCHEMA", "InfoSource", "collect_info", "fmt_age"]


class InfoSource(Connected, Protocol):
    """What :func:`collect_info` reads (the CLI's ``App``, the web's dashboard)."""

    @property
    def masked_url(self) -> str: ...


#: Version of the ``info --json`` document (see docs/operations.md). Fields may be
#: added within a version; none is renamed or removed.
INFO_SCHEMA = 1


def collect_info(app: InfoSource, queues: bool = True, workers: bool = True,
                 page: int | None = None, per_page: int = 50,
                 only: Sequence[str] = ()) -> dict[str, Any]:
    """Everything ``info`` shows, as the documented JSON document (``info --json``,
    the web's ``/api/info``). With ``page``, the queues of that page only (by name,
    ``per_page`` each; their cron entries and busy groups): ``queues_total``,
    ``page``, ``per_page`` and ``pages`` say where it is. ``only`` (RQ's ``rq info
    Q1 Q2``): those queues, and the workers serving one of them."""
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
        names = sorted(set(only)) if only else known_queues(r, prefix)
        doc["queues_total"] = len(names)
        if page is not None:
            doc.update(page=page, per_page=per_page, pages=max(1, -(-len(names) // per_page)))
            names = names[(page - 1) * per_page:page * per_page]
        _queues(app, doc, names, now, heartbeats)
    if workers:
        doc["workers"] = [{**admin.describe_worker(w, now), **_event_sink(w)}
                          for w in heartbeats if not only
                          or set(only) & set((w.get("queues") or "").split(","))]
    return doc


def _queues(app: InfoSource, doc: dict[str, Any], names: list[str], now: float,
            heartbeats: list[dict[str, str]]) -> None:
    """The stats, last hour, cron entries and busy groups of the queues ``names``, read
    in a few pipelines whatever their number."""
    r = app.connection
    prefix = app.settings.prefix
    doc["queues"] = stats_many(r, app.settings, names, heartbeats)
    for q, counts in zip(doc["queues"], last_hours(r, prefix, names, now), strict=True):
        q["last_hour"] = counts   # the per-minute counts the workers keep (the web chart's)
    entries = cron.list_entries(r, prefix, names)
    doc["cron"] = [e.to_dict() for e in entries]
    per_queue: dict[str, int] = {}
    for e in entries:
        per_queue[e.queue] = per_queue.get(e.queue, 0) + 1
    for q in doc["queues"]:
        q["cron"] = per_queue.get(q["queue"], 0)
    doc["groups"] = [
        {"queue": n, **asdict(g)}
        for n, q in zip(names, doc["queues"]) if q.get("busy_groups")
        for g in describe_busy_groups(r, prefix, n, limit=10)
    ]


def last_hours(r: Any, prefix: str, names: list[str], now: float,
               chunk: int = 20_000) -> list[dict[str, int]]:
    """Jobs finished and failed in the last hour of each queue of ``names``, from the
    per-minute hashes the workers keep. First one ``EXISTS`` of a queue's 60 minute keys
    (they share its hash tag: one slot) for every queue; then the ``HMGET``s of the
    queues that have any. Plain reads in pipelines of ``chunk`` commands: a Redis user
    limited to reads can run ``info``; a queue idle for the hour costs one command,
    not 60."""
    last = int(now // 60)
    minutes = list(range(last - 59, last + 1))
    keys = Keys(prefix)
    # QueueKeys.minute(m) for each queue and minute, the text built once per queue (at
    # 10,000 queues, 600,000 calls of it took most of a second)
    stems = [keys.queue(name).minute(0)[:-1] for name in names]
    suffixes = [str(m) for m in minutes]
    minute_keys = [[stem + suffix for suffix in suffixes] for stem in stems]
    present = []
    for start in range(0, len(names), chunk):
        pipe = r.pipeline(transaction=False)
        for row in minute_keys[start:start + chunk]:
            pipe.exists(*row)
        present += pipe.execute()
    active = [n for n, count in enumerate(present) if count]
    out = [{"finished": 0, "failed": 0} for _ in names]
    step = max(1, chunk // len(minutes))
    for start in range(0, len(active), step):
        part = active[start:start + step]
        for n, counts in zip(part, _summed_hours(r, [minute_keys[n] for n in part]),
                             strict=True):
            out[n] = counts
    return out


def _summed_hours(r: Any, key_rows: list[list[str]]) -> list[dict[str, int]]:
    """One pipeline: the finished and failed counts of each row of minute keys, summed."""
    pipe = r.pipeline(transaction=False)
    for row in key_rows:
        for key in row:
            pipe.hmget(key, ["finished", "failed"])
    replies = iter(pipe.execute())
    out = []
    for row in key_rows:
        pairs = [next(replies) for _ in row]
        out.append({"finished": sum(stored_count(f) for f, _ in pairs),
                    "failed": sum(stored_count(x) for _, x in pairs)})
    return out


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
