"""Reading the Redis event stream: the CLI's ``events`` command, the web UI and
the tests (:func:`read_events`, :func:`last_events`, :func:`follow_events`,
:func:`job_history`, :func:`job_timeline`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..core.connection import text, text_hash
from ..core.keys import Keys
from .schema import _FLOAT_FIELDS, _INT_FIELDS

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: ``(stream id, event document)``
Event = tuple[str, dict[str, Any]]


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """A stream reply (``XRANGE``, ``XREVRANGE``, one stream of ``XREAD``) as text."""
    return [(text(i), text_hash(f or {})) for i, f in reply or ()]


def _decode(fields: Mapping[str, str]) -> dict[str, Any]:
    doc: dict[str, Any] = dict(fields)
    for name in _INT_FIELDS.intersection(doc):
        try:
            doc[name] = int(doc[name])
        except ValueError:
            pass
    for name in _FLOAT_FIELDS.intersection(doc):
        try:
            doc[name] = float(doc[name])
        except ValueError:
            pass
    return doc


def _matches(fields: Mapping[str, str], job_id: str | None, queue: str | None) -> bool:
    return ((job_id is None or fields.get("job_id") == job_id)
            and (queue is None or fields.get("queue") == queue))


def read_events(
    connection: RedisClient,
    prefix: str,
    *,
    job_id: str | None = None,
    queue: str | None = None,
    after: str = "0-0",
    count: int = 1000,
    block_ms: int | None = None,
) -> list[Event]:
    """Events of the Redis stream after the id ``after``, optionally of one job / queue.

    Without ``block_ms``: up to ``count`` matching events (XRANGE, paging on
    past events that do not match). With ``block_ms``: waits up to that long
    (0 = for ever) for new matching events (XREAD BLOCK; ``after="$"`` = only
    events newer than now) and returns the first matching ones, or ``[]``.
    To follow the stream with a filter use :func:`follow_events`, which keeps
    its place past events that did not match.
    """
    key = Keys(prefix).events
    if block_ms is None:
        found: list[Event] = []
        page_size = count if job_id is None and queue is None else max(count, 1000)
        cursor = after
        while len(found) < count:
            page = _entries(connection.xrange(key, min=f"({cursor}", max="+", count=page_size))
            found.extend((i, _decode(f)) for i, f in page if _matches(f, job_id, queue))
            if len(page) < page_size:
                break
            cursor = page[-1][0]
        return found[:count]
    _, found = _read_new(connection, key, after, job_id, queue, count, block_ms)
    return found


def last_id(connection: RedisClient, prefix: str) -> str:
    """Id of the newest event in the Redis stream, ``"0-0"`` when it is empty."""
    last = _entries(connection.xrevrange(Keys(prefix).events, max="+", min="-", count=1))
    return last[0][0] if last else "0-0"


def last_events(
    connection: RedisClient,
    prefix: str,
    *,
    job_id: str | None = None,
    queue: str | None = None,
    count: int = 50,
    until: str = "+",
) -> list[Event]:
    """The newest ``count`` matching events with ids up to ``until`` (inclusive), oldest first."""
    key = Keys(prefix).events
    found: list[Event] = []
    page_size = count if job_id is None and queue is None else max(count, 1000)
    cursor = until
    while count > 0 and len(found) < count:
        page = _entries(connection.xrevrange(key, max=cursor, min="-", count=page_size))
        found.extend((i, _decode(f)) for i, f in page if _matches(f, job_id, queue))
        if len(page) < page_size:
            break
        cursor = f"({page[-1][0]}"
    newest = list(reversed(found[:count]))
    return in_time_order(newest) if job_id is not None else newest


#: Inside one millisecond a job's events can only have happened in this order.
_LIFECYCLE_RANK = {"queued": 0, "processing": 1}


def in_time_order(events: list[Event]) -> list[Event]:
    """One job's events ordered by when they happened, not by when they arrived.

    Each process delivers its events through its own buffered sink, so the
    stream's arrival order can put a producer's ``queued`` after the worker's
    ``completed``. The event's own ``@timestamp`` (milliseconds, taken when it
    happened) orders them; inside one millisecond ``queued`` comes before
    ``processing`` before the rest, then arrival order (the sort is stable).
    """
    def key(item: Event) -> tuple[str, int]:
        doc = item[1]
        return (str(doc.get("@timestamp") or ""), _LIFECYCLE_RANK.get(str(doc.get("event")), 2))
    return sorted(events, key=key)


def _read_new(connection: RedisClient, key: str, cursor: str, job_id: str | None, queue: str | None,
              count: int, block_ms: int) -> tuple[str, list[Event]]:
    """XREAD BLOCK until matching events arrive or ``block_ms`` passed; returns (cursor, events)."""
    deadline = time.monotonic() + block_ms / 1000.0
    while True:
        if block_ms == 0:
            wait_ms = 0
        else:
            wait_ms = int((deadline - time.monotonic()) * 1000)
            if wait_ms <= 0:
                return cursor, []
        response: Any = connection.xread({key: cursor}, count=count, block=wait_ms)
        if not response:
            return cursor, []
        entries = _entries(response[0][1])
        cursor = entries[-1][0]
        found = [(i, _decode(f)) for i, f in entries if _matches(f, job_id, queue)]
        if found:
            return cursor, found


def follow_events(
    connection: RedisClient,
    prefix: str,
    *,
    job_id: str | None = None,
    queue: str | None = None,
    after: str = "$",
    block_ms: int = 1000,
    stop: threading.Event | None = None,
) -> Iterator[Event]:
    """Yield matching events as they arrive (``events --follow``) until ``stop`` is set.

    ``after="$"`` is pinned to the stream's last id when this is called (not
    at the first ``next()``), so nothing added in between is missed.
    """
    key = Keys(prefix).events
    cursor = after
    if cursor == "$":
        last = _entries(connection.xrevrange(key, max="+", min="-", count=1))
        cursor = last[0][0] if last else "0-0"
    return _follow(connection, key, cursor, job_id, queue, block_ms, stop)


def _follow(connection: RedisClient, key: str, cursor: str, job_id: str | None, queue: str | None,
            block_ms: int, stop: threading.Event | None) -> Iterator[Event]:
    while stop is None or not stop.is_set():
        cursor, found = _read_new(connection, key, cursor, job_id, queue, 1000, block_ms)
        yield from found


def job_history(connection: RedisClient, prefix: str, queue: str, job_id: str) -> list[Event]:
    """Every event of job ``job_id`` of ``queue`` kept in its own history (the newest
    ``HISTORY_CAP``), in the order they happened; ``[]`` when it has none (events of
    a version that wrote none, or every event older than its record's TTL). An event
    written on a Cluster (no stream id in the history) gets ``h:<timestamp>:<n>``."""
    import json

    out: list[Event] = []
    for n, raw in enumerate(connection.lrange(Keys(prefix).queue(queue).job_events(job_id), 0, -1)):
        try:
            stream_id, fields = json.loads(text(raw))
            doc = _decode(text_hash(fields))
        except (ValueError, TypeError, AttributeError):
            continue         # not ours: skipped, never raised
        out.append((str(stream_id) or f"h:{doc.get('@timestamp', '')}:{n}", doc))
    return in_time_order(out)


def job_timeline(connection: RedisClient, prefix: str, job_id: str, start: float, end: float | None,
                 *, limit: int = 200, scan_limit: int = 5000) -> list[Event]:
    """Events of job ``job_id`` in the Redis stream between epoch seconds ``start`` and
    ``end`` (None: up to now), oldest first; reads at most ``scan_limit`` entries of
    that window (stream ids are millisecond times), so a page never scans the whole log."""
    key = Keys(prefix).events
    cursor = f"{max(0, int(start * 1000) - 1000)}-0"
    top = "+" if end is None else f"{int(end * 1000) + 5000}"
    found: list[Event] = []
    scanned = 0
    first = True
    while scanned < scan_limit and len(found) < limit:
        page = _entries(connection.xrange(key, min=cursor if first else f"({cursor}", max=top,
                                          count=min(1000, scan_limit - scanned)))
        first = False
        scanned += len(page)
        found.extend((i, _decode(f)) for i, f in page if f.get("job_id") == job_id)
        if len(page) < 1000:
            break
        cursor = page[-1][0]
    return found[:limit]
