"""The event document: names, fields, the Elasticsearch mapping, and
:func:`make_event`, which turns a job (or a job's fields) into one flat document.

One document per job event; the list of events and who emits each is in the
package docstring (``events/__init__.py``).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Unpack

from ..core.emitting import EventFields
from ..core.job import FailureReason

if TYPE_CHECKING:  # pragma: no cover
    from ..core.hooks import Outcome

EVENTS = ("queued", "processing", "completed", "failed", "retry", "timeout", "abandoned",
          "canceled", "requeued", "deleted", "reprioritized", "held", "released",
          "admin", "progress")

#: Field order of an event document.
FIELDS = (
    "@timestamp", "event", "job_id", "queue", "function", "priority", "attempt",
    "worker", "host", "duration", "wait_time", "error_type", "error_message", "reason",
    "progress", "progress_message",
)

_INT_FIELDS = frozenset(("priority", "attempt"))
_FLOAT_FIELDS = frozenset(("duration", "wait_time", "progress"))

#: Mappings of the Elasticsearch index template.
ES_MAPPINGS: dict[str, Any] = {
    "properties": {
        "@timestamp": {"type": "date"},
        "event": {"type": "keyword"},
        "job_id": {"type": "keyword"},
        "queue": {"type": "keyword"},
        "function": {"type": "keyword"},
        "priority": {"type": "integer"},
        "attempt": {"type": "integer"},
        "worker": {"type": "keyword"},
        "host": {"type": "keyword"},
        "duration": {"type": "float"},
        "wait_time": {"type": "float"},
        "error_type": {"type": "keyword"},
        "error_message": {"type": "text"},
        "reason": {"type": "keyword"},
        "progress": {"type": "float"},
        "progress_message": {"type": "text"},
    }
}

_HOSTNAME = socket.gethostname()

#: the keywords :func:`make_event` takes
_EVENT_FIELDS = EventFields.__optional_keys__


# --------------------------------------------------------------------------- documents


#: (a whole second, its text): the last second :func:`_iso_utc` wrote (a worker writes
#: many events a second; one tuple, swapped whole, so threads never see half of it)
_second: tuple[int, str] = (-1, "")


def _iso_utc(timestamp: float) -> str:
    """``timestamp`` (epoch seconds) as ISO 8601 in UTC to the millisecond, e.g.
    ``2026-11-28T18:40:33.123Z``: what ``datetime.fromtimestamp(t, UTC).isoformat(
    timespec="milliseconds")`` writes (microseconds rounded half to even, then cut),
    the date part made once per second."""
    global _second
    whole = math.floor(timestamp)
    micros = round((timestamp - whole) * 1_000_000)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    cached = _second
    if cached[0] != whole:
        cached = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{cached[1]}.{micros // 1000:03d}Z"


def _job_values(job: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``func``, ``id``, ``queue``, ``priority``, ``attempts`` of a Job (or a Mapping
    with those keys); missing ones None."""
    if isinstance(job, Mapping):
        get = job.get
        return get("func"), get("id"), get("queue"), get("priority"), get("attempts")
    return (getattr(job, "func", None), getattr(job, "id", None), getattr(job, "queue", None),
            getattr(job, "priority", None), getattr(job, "attempts", None))


def _int_or_none(value: Any) -> int | None:
    return None if value is None or value == "" else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)


def make_event(event: str, job: Any, **fields: Unpack[EventFields]) -> dict[str, Any]:
    """One flat event document for ``job`` (a Job, or a Mapping with the same keys).

    ``job`` provides ``id``, ``queue``, ``func``, ``priority`` and ``attempts``;
    missing ones become ``None``. ``fields`` are :class:`~fusionworker.core.emitting.
    EventFields`: ``timestamp`` is epoch seconds (default: now); ``reason`` is the
    worker's outcome reason (``exception``, ``timeout``, ``segfault``, ``memory``,
    ``shutdown``, ...) where there is one; ``progress`` / ``progress_message``: what a
    running job reported (``progress``).
    """
    _check(event, fields)
    timestamp = fields.get("timestamp")
    return {"@timestamp": _iso_utc(time.time() if timestamp is None else timestamp),
            **dict(_values(event, job, fields))}


def stream_pairs(event: str, job: Any, fields: EventFields) -> list[str]:
    """The pairs of ``make_event(event, job, **fields)`` after ``@timestamp``, as a stream
    holds them (``sinks.stream_value``: text, booleans as JSON writes them; a None left
    out), without making the document: the event block each job's end sends its script
    (events/middleware.py, ``ScriptEvents``), which writes ``@timestamp`` itself."""
    _check(event, fields)
    out: list[str] = []
    for name, value in _values(event, job, fields):
        if value is not None:
            out += (name, "true" if value is True else "false" if value is False
                    else str(value))
    return out


def _check(event: str, fields: EventFields) -> None:
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    if not fields.keys() <= _EVENT_FIELDS:
        unknown = next(name for name in fields if name not in _EVENT_FIELDS)
        raise TypeError(f"make_event() got an unexpected keyword argument {unknown!r}")


def _values(event: str, job: Any, fields: EventFields) -> tuple[tuple[str, Any], ...]:
    """An event document's fields after ``@timestamp``, in order: the one spelling of
    :func:`make_event` and :func:`stream_pairs`."""
    func, job_id, queue, priority, attempts = _job_values(job)
    get = fields.get
    host = get("host")
    return (
        ("event", event),
        ("job_id", job_id),
        ("queue", queue),
        ("function", None if func is None else str(func)),
        ("priority", _int_or_none(priority)),
        ("attempt", _int_or_none(attempts)),
        ("worker", get("worker")),
        ("host", _HOSTNAME if host is None else host),
        ("duration", _float_or_none(get("duration"))),
        ("wait_time", _float_or_none(get("wait_time"))),
        ("error_type", get("error_type")),
        ("error_message", get("error_message")),
        ("reason", get("reason")),
        ("progress", _float_or_none(get("progress"))),
        ("progress_message", get("progress_message")),
    )


def _plain(value: Any) -> Any:
    """A JSON-safe scalar (documents built by hand may hold anything)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def outcome_event(status: str, reason: str | None) -> str:
    """Event name of a worker outcome (``Outcome.status`` / ``Outcome.reason``).

    ``finished`` -> completed, ``retry`` -> retry, ``requeued`` (cold shutdown:
    the job went back to its queue, attempt not counted) -> requeued;
    ``failed`` -> timeout / abandoned when that was the reason, else failed.
    """
    if status == "finished":
        return "completed"
    if status in ("retry", "requeued"):
        return status
    if reason in (FailureReason.TIMEOUT, FailureReason.ABANDONED):
        return reason
    return "failed"


def outcome_fields(outcome: Outcome) -> tuple[str, EventFields]:
    """The event of a recorded outcome and its fields: what the worker's event hook emits
    and what ``finish.lua`` writes in its place (recorder.py), one spelling for both."""
    event = outcome_event(outcome.status, outcome.reason)
    return event, {"duration": outcome.duration, "error_type": outcome.error_type,
                   "error_message": outcome.error_message,
                   "reason": None if event == "completed" else outcome.reason}
