"""The event log: one flat document per job event, delivered off the job path.

The worker calls ``sink.emit(make_event("processing", job, worker=...))`` from
its hooks. ``emit`` only appends to a bounded in-memory buffer (no I/O, no
blocking, never raises); a daemon thread delivers batches to

* Elasticsearch (index ``active-fusion-logs`` by default) when
  ``ELASTICSEARCH_URL`` is set — :class:`ElasticsearchSink`, or
* the capped Redis stream ``<prefix>:events`` otherwise — :class:`RedisStreamSink`.

Invariant 8 of the design: an outage of the sink delays events, it never
fails or slows jobs. Failed deliveries keep their batch and are retried with
exponential backoff; only when the buffer bound (``FUSIONWORKER_EVENT_BUFFER``)
is reached are new events dropped — each drop is counted in :meth:`EventSink.stats`
and logged (at most once per 10 s, with the running count).

Delivery is at-least-once: Elasticsearch documents carry a stable ``_id`` so a
re-sent batch overwrites itself; a Redis pipeline cut in the middle may repeat
some entries when re-sent.

Who emits what: :class:`EventsMiddleware` in the worker parent (``processing``,
``progress`` with each rate-limited progress write of a running job, and the
outcome: ``completed``, ``retry``, ``failed``, ``timeout``, ``requeued``; with the
plain Redis stream sink of its own prefix on its own Redis, ``claim.lua``,
``progress.lua`` and ``finish.lua`` write all but ``requeued`` themselves:
:class:`~.middleware.ScriptEvents`), ``Queue`` through the process-wide :func:`default_sink`
(``queued``, ``canceled``, ``deleted``, ``reprioritized``, ``held``, ``released``, ``requeued`` with
reason ``manual``), the reaper (``abandoned``, ``requeued`` with reason
``worker died``) and the cron scheduler (``queued`` of each run) through
:func:`emit_job_event`,
and the web dashboard (``admin``: ``reason`` names the action, ``worker`` who
did it as ``web:<user>``).

Modules: ``schema.py`` (the document, :func:`make_event`), ``sinks.py`` (the
threaded sink and its classes; process hooks installed by the first sink),
``registry.py`` (the process-wide producer sinks), ``middleware.py`` (the worker
side), ``reader.py`` (reading the Redis stream). Every public name is
importable from ``fusionworker.events``, as before the split.

The ``elasticsearch`` package is optional (``pip install fusionworker[elasticsearch]``);
it is imported only when an :class:`ElasticsearchSink` is built.
"""

from __future__ import annotations

from .middleware import EventsMiddleware, emit_job_event, sink_of
from .reader import (
    follow_events,
    in_time_order,
    job_history,
    job_timeline,
    last_events,
    last_id,
    read_events,
)
from .registry import default_sink, flush_default_sinks
from .schema import ES_MAPPINGS, EVENTS, FIELDS, make_event, outcome_event
from .sinks import (
    Delivery,
    ElasticsearchSink,
    Entry,
    EventSink,
    MemorySink,
    NullSink,
    RedisStreamSink,
    make_sink,
)

__all__ = [
    "ES_MAPPINGS", "EVENTS", "FIELDS", "Delivery", "ElasticsearchSink", "Entry", "EventSink",
    "EventsMiddleware", "MemorySink", "NullSink", "RedisStreamSink", "default_sink",
    "emit_job_event", "flush_default_sinks", "follow_events", "in_time_order", "job_history",
    "job_timeline", "last_events", "last_id", "make_event", "make_sink", "outcome_event", "read_events",
    "sink_of",
]
