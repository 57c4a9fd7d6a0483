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

Who emits what: :class:`EventsMiddleware` in the worker parent (``processing``
and the outcome: ``completed``, ``retry``, ``failed``, ``timeout``,
``requeued``), ``Queue`` through the process-wide :func:`default_sink`
(``queued``, ``canceled``, ``deleted``, ``reprioritized``, ``requeued`` with
reason ``manual``), the reaper (``abandoned``, ``requeued`` with reason
``worker died``) and the cron scheduler (``queued`` of each run) through
:func:`emit_job_event`,
and the web dashboard (``admin``: ``reason`` names the action, ``worker`` who
did it as ``web:<user>``).

The ``elasticsearch`` package is optional (``pip install fusionworker[elasticsearch]``);
it is imported only when an :class:`ElasticsearchSink` is built.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import random
import socket
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

from .keys import Keys
from .middleware import Middleware

log = logging.getLogger(__name__)

EVENTS = ("queued", "processing", "completed", "failed", "retry", "timeout", "abandoned",
          "canceled", "requeued", "deleted", "reprioritized",
          "admin")

#: Field order of an event document.
FIELDS = (
    "@timestamp", "event", "job_id", "queue", "function", "priority", "attempt",
    "worker", "host", "duration", "wait_time", "error_type", "error_message", "reason",
)

_INT_FIELDS = frozenset(("priority", "attempt"))
_FLOAT_FIELDS = frozenset(("duration", "wait_time"))

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
    }
}

_HOSTNAME = socket.gethostname()


# --------------------------------------------------------------------------- documents


def _iso_utc(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _job_field(job: Any, name: str) -> Any:
    if isinstance(job, Mapping):
        return job.get(name)
    return getattr(job, name, None)


def _int_or_none(value: Any) -> int | None:
    return None if value is None or value == "" else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)


def make_event(
    event: str,
    job: Any,
    *,
    worker: str | None = None,
    host: str | None = None,
    duration: float | None = None,
    wait_time: float | None = None,
    error_type: str | None = None,
    error_message: str | None = None,
    reason: str | None = None,
    timestamp: float | None = None,
) -> dict[str, Any]:
    """One flat event document for ``job`` (a Job, or a Mapping with the same keys).

    ``job`` provides ``id``, ``queue``, ``func``, ``priority`` and ``attempts``;
    missing ones become ``None``. ``timestamp`` is epoch seconds (default: now).
    ``reason`` is the worker's outcome reason (``exception``, ``timeout``,
    ``segfault``, ``memory``, ``shutdown``, ...) where there is one.
    """
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    func = _job_field(job, "func")
    return {
        "@timestamp": _iso_utc(time.time() if timestamp is None else timestamp),
        "event": event,
        "job_id": _job_field(job, "id"),
        "queue": _job_field(job, "queue"),
        "function": None if func is None else str(func),
        "priority": _int_or_none(_job_field(job, "priority")),
        "attempt": _int_or_none(_job_field(job, "attempts")),
        "worker": worker,
        "host": _HOSTNAME if host is None else host,
        "duration": _float_or_none(duration),
        "wait_time": _float_or_none(wait_time),
        "error_type": error_type,
        "error_message": error_message,
        "reason": reason,
    }


def _plain(value: Any) -> Any:
    """A JSON-safe scalar (documents built by hand may hold anything)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# --------------------------------------------------------------------------- base sink

#: A buffered event: (stable event id, document).
Entry = tuple[str, dict]


class Delivery(NamedTuple):
    """What a sink's ``_deliver`` reports for a batch it did not raise on."""

    retry: Sequence[Entry] = ()   # entries to send again (transient per-item errors)
    rejected: int = 0             # entries refused for good (e.g. a mapping error)


_LIVE_SINKS: weakref.WeakSet[EventSink] = weakref.WeakSet()


class EventSink:
    """Buffers events and delivers them in batches from a daemon thread.

    Subclasses implement :meth:`_deliver`. Everything on the caller's side
    (:meth:`emit`) is an append under a lock held for microseconds.
    """

    name = "event sink"

    def __init__(
        self,
        *,
        buffer_size: int = 10000,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        log_interval: float = 10.0,
    ) -> None:
        if buffer_size < 1 or batch_size < 1:
            raise ValueError("buffer_size and batch_size must be at least 1")
        self.buffer_size = buffer_size
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.log_interval = log_interval
        self._reset_state()
        _LIVE_SINKS.add(self)

    def _reset_state(self) -> None:
        """Fresh buffer, lock and counters (construction, and in a forked child)."""
        self._cond = threading.Condition(threading.Lock())
        self._buffer: deque[Entry] = deque()
        self._ids = itertools.count()
        self._id_prefix = uuid.uuid4().hex[:16]
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stopping = False
        self._kick = False            # flush/close: skip the current wait once
        self._flushing = 0            # flush() callers waiting: send partial batches now
        self._batch_started = 0.0     # monotonic time the oldest waiting event arrived
        self._retry_at = 0.0          # monotonic time of the next attempt after a failure
        self._failures = 0            # consecutive failed attempts
        self._delivered = 0
        self._dropped = 0
        self._rejected = 0
        self._errors = 0
        self._last_error: str | None = None
        self._drop_log_due = False
        self._drops_logged_at = -1e18
        self._failure_logged_at = -1e18

    # -- caller side ---------------------------------------------------------------

    def emit(self, doc: dict) -> None:
        """Queue ``doc`` for delivery. Never blocks on I/O, never raises."""
        with self._cond:
            if self._closed or len(self._buffer) >= self.buffer_size:
                self._dropped += 1
                if not self._drop_log_due and time.monotonic() - self._drops_logged_at >= self.log_interval:
                    self._drop_log_due = True
                    self._cond.notify()
                return
            self._buffer.append((f"{self._id_prefix}-{next(self._ids)}", doc))
            size = len(self._buffer)
            if size == 1:
                self._batch_started = time.monotonic()
                if self._thread is None:
                    self._start_thread()
                self._cond.notify()
            elif size == self.batch_size:
                self._cond.notify()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything buffered was delivered; False if ``timeout`` ran out first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if not self._buffer:
                return True
            if self._thread is None or not self._thread.is_alive():
                return False
            self._flushing += 1
            self._kick = True
            self._cond.notify_all()
            try:
                while self._buffer:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                return True
            finally:
                self._flushing -= 1

    def close(self, timeout: float = 5.0) -> None:
        """Flush for up to ``timeout`` seconds, then stop the thread. Idempotent.

        Events still undelivered at the end are counted as dropped and logged.
        Called at interpreter exit for every live sink.
        """
        with self._cond:
            if self._closed:
                return
        deadline = time.monotonic() + timeout
        delivered_all = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.05, deadline - time.monotonic()))
        with self._cond:
            lost = len(self._buffer)
            self._buffer.clear()
            self._dropped += lost
            last_error = self._last_error
        if not delivered_all and lost:
            log.warning("Event log (%s): %d events not delivered at close (last error: %s)",
                        self.name, lost, last_error)

    def stats(self) -> dict[str, Any]:
        """Counters: ``buffered``, ``delivered``, ``dropped``, ``rejected``, ``errors``, ``last_error``."""
        with self._cond:
            return {
                "buffered": len(self._buffer),
                "delivered": self._delivered,
                "dropped": self._dropped,
                "rejected": self._rejected,
                "errors": self._errors,
                "last_error": self._last_error,
            }

    # -- delivery thread -----------------------------------------------------------

    def _deliver(self, entries: list[Entry]) -> Delivery:
        """Send ``entries``; raise to have the whole batch retried later."""
        raise NotImplementedError

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._run, name=f"fusionworker-events-{id(self):x}",
                                  daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # interpreter shutting down: the events stay buffered
            self._last_error = f"cannot start delivery thread: {exc}"
            return
        self._thread = thread

    def _run(self) -> None:
        while True:
            with self._cond:
                batch, message = self._next_batch()
            if message:
                log.warning(message)
                continue
            if batch is None:
                return
            try:
                result = self._deliver(batch)
            except Exception as exc:  # any failure: keep the batch, back off, retry
                self._on_failure(exc)
                continue
            self._on_success(batch, result)

    def _next_batch(self) -> tuple[list[Entry] | None, str | None]:
        """Wait (lock held) for a batch to send, a message to log, or the stop."""
        while True:
            if self._stopping:
                return None, None
            if self._drop_log_due:
                self._drop_log_due = False
                self._drops_logged_at = time.monotonic()
                return None, (f"Event log ({self.name}) buffer full ({self.buffer_size} events): "
                              f"{self._dropped} events dropped so far")
            if not self._buffer:
                self._cond.wait()
                continue
            now = time.monotonic()
            if self._retry_at > now and not self._kick:
                self._cond.wait(self._retry_at - now)
                continue
            due = self._batch_started + self.flush_interval
            if len(self._buffer) >= self.batch_size or self._kick or self._flushing or now >= due:
                self._kick = False
                return list(itertools.islice(self._buffer, self.batch_size)), None
            self._cond.wait(due - now)

    def _on_failure(self, exc: BaseException) -> None:
        with self._cond:
            self._failures += 1
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"[:500]
            delay = min(self.backoff_max, self.backoff_initial * 2 ** (self._failures - 1))
            delay *= random.uniform(0.9, 1.1)
            self._retry_at = time.monotonic() + delay
            failures, buffered, last_error = self._failures, len(self._buffer), self._last_error
            now = time.monotonic()
            should_log = failures == 1 or now - self._failure_logged_at >= self.log_interval
            if should_log:
                self._failure_logged_at = now
        if should_log:
            log.warning("Event log (%s) delivery failed (%s attempt%s): %s; %d events buffered, "
                        "retrying in %.1f s", self.name, failures, "" if failures == 1 else "s",
                        last_error, buffered, delay)

    def _on_success(self, batch: list[Entry], result: Delivery) -> None:
        with self._cond:
            for _ in range(min(len(batch), len(self._buffer))):
                self._buffer.popleft()
            self._buffer.extendleft(reversed(result.retry))
            self._delivered += len(batch) - len(result.retry) - result.rejected
            self._rejected += result.rejected
            recovered_after = self._failures if not result.retry else 0
            if result.retry:
                self._failures += 1
                self._errors += 1
                self._last_error = f"{len(result.retry)} documents to retry (429/5xx)"
                self._retry_at = time.monotonic() + min(
                    self.backoff_max, self.backoff_initial * 2 ** (self._failures - 1))
            else:
                self._failures = 0
                self._retry_at = 0.0
            if self._buffer:
                self._batch_started = time.monotonic()
            buffered = len(self._buffer)
            self._cond.notify_all()
        if recovered_after:
            log.info("Event log (%s) delivering again after %d failed attempts; %d events buffered",
                     self.name, recovered_after, buffered)


def _close_all_sinks() -> None:
    for sink in list(_LIVE_SINKS):
        sink.close()


def _reset_sinks_in_child() -> None:
    # The parent keeps delivering what it buffered; the child starts empty,
    # with a fresh lock (the parent's may have been held at fork time).
    for sink in list(_LIVE_SINKS):
        sink._reset_state()


atexit.register(_close_all_sinks)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_sinks_in_child)


# --------------------------------------------------------------------------- sinks


class NullSink(EventSink):
    """Discards every event (tests, benchmarks)."""

    name = "null"

    def emit(self, doc: dict) -> None:
        return None

    def _deliver(self, entries: list[Entry]) -> Delivery:  # pragma: no cover - never called
        return Delivery()


class MemorySink(EventSink):
    """Keeps every event in :attr:`docs` synchronously (tests of the worker's hooks)."""

    name = "memory"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.docs: list[dict] = []

    def emit(self, doc: dict) -> None:
        with self._cond:
            self.docs.append(doc)
            self._delivered += 1

    def _deliver(self, entries: list[Entry]) -> Delivery:  # pragma: no cover - never called
        return Delivery()


class RedisStreamSink(EventSink):
    """``XADD <prefix>:events MAXLEN ~ <maxlen>`` per event, one pipeline per batch.

    ``connection`` is a redis-py client (thread-safe: the delivery thread takes
    its own connection from the client's pool, never the worker's).
    """

    def __init__(self, connection: Any, prefix: str = "fw", *, maxlen: int = 100000,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connection = connection
        self.key = Keys(prefix).events
        self.maxlen = maxlen
        self.name = f"Redis stream {self.key}"

    def _deliver(self, entries: list[Entry]) -> Delivery:
        pipe = self.connection.pipeline(transaction=False)
        for _event_id, doc in entries:
            fields = {k: _stream_value(v) for k, v in doc.items() if v is not None}
            pipe.xadd(self.key, fields, maxlen=self.maxlen, approximate=True)
        pipe.execute()
        return Delivery()


def _stream_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ElasticsearchSink(EventSink):
    """Bulk-indexes events into ``index`` with the official client.

    The client makes a single attempt per request (short timeout, no retries
    of its own); this sink retries whole batches with backoff on connection
    errors, 429 and 5xx, and re-sends only the items a bulk answered with
    429/5xx. Other per-item errors (e.g. a mapping conflict) are counted in
    ``stats()["rejected"]`` and logged once per batch.

    Before the first bulk it puts the index template ``<index>-template``
    (patterns ``<index>*``, explicit mappings); a refusal (4xx, e.g. missing
    privilege) is logged once and delivery goes on with dynamic mappings.
    Existing indices keep their mappings.
    """

    def __init__(
        self,
        client: Any,
        index: str = "active-fusion-logs",
        *,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        request_timeout: float = 5.0,
        **kwargs: Any,
    ) -> None:
        try:
            import elasticsearch  # optional dependency
        except ImportError as exc:
            raise RuntimeError(
                "ELASTICSEARCH_URL is set but the elasticsearch client is not installed: "
                "pip install 'fusionworker[elasticsearch]'"
            ) from exc
        super().__init__(**kwargs)
        self._api_error = elasticsearch.ApiError
        if isinstance(client, str):
            options: dict[str, Any] = {
                "request_timeout": request_timeout, "retry_on_timeout": False, "max_retries": 0,
            }
            if api_key:
                options["api_key"] = api_key
            elif username:
                options["basic_auth"] = (username, password or "")
            hosts = [url.strip() for url in client.split(",") if url.strip()]
            client = elasticsearch.Elasticsearch(hosts, **options)
        self.client = client
        # The transport logs every request at INFO: one line per batch is noise in a worker's log.
        transport_log = logging.getLogger("elastic_transport.transport")
        if transport_log.level == logging.NOTSET:
            transport_log.setLevel(logging.WARNING)
        self.index = index
        self.template_name = f"{index}-template"
        self._template_done = False
        self.name = f"Elasticsearch {index}"

    def _put_template(self) -> None:
        try:
            self.client.indices.put_index_template(
                name=self.template_name,
                index_patterns=[f"{self.index}*"],
                priority=200,
                template={"mappings": ES_MAPPINGS},
                meta={"managed_by": "fusionworker"},
            )
        except self._api_error as exc:
            if exc.status_code == 429 or exc.status_code >= 500:
                raise
            log.warning("Event log (%s): cannot put index template %s (%s); events are indexed "
                        "with the index's own mappings", self.name, self.template_name, exc)
        self._template_done = True

    def _deliver(self, entries: list[Entry]) -> Delivery:
        if not self._template_done:
            self._put_template()
        operations: list[dict] = []
        for event_id, doc in entries:
            operations.append({"index": {"_index": self.index, "_id": event_id}})
            operations.append({k: _plain(v) for k, v in doc.items()})
        response = self.client.bulk(operations=operations)
        if not response.get("errors"):
            return Delivery()
        retry: list[Entry] = []
        rejected = 0
        first_error: Any = None
        for entry, item in zip(entries, response.get("items", ()), strict=False):
            result = next(iter(item.values()), {}) if item else {}
            status = result.get("status", 200)
            if status < 300:
                continue
            if status == 429 or status >= 500:
                retry.append(entry)
            else:
                rejected += 1
                first_error = first_error or result.get("error")
        if rejected:
            with self._cond:
                self._errors += 1
                self._last_error = f"{rejected} documents rejected: {first_error}"[:500]
            log.warning("Event log (%s): %d of %d documents rejected, first error: %s",
                        self.name, rejected, len(entries), first_error)
        return Delivery(retry=retry, rejected=rejected)


def make_sink(settings: Any, connection: Any, **kwargs: Any) -> EventSink:
    """Elasticsearch when ``elasticsearch_url`` is set, else the Redis stream.

    ``kwargs`` go to the sink (batch size, backoff, ...).
    """
    kwargs.setdefault("buffer_size", settings.event_buffer)
    if settings.elasticsearch_url:
        return ElasticsearchSink(
            settings.elasticsearch_url,
            settings.elasticsearch_index,
            api_key=settings.elasticsearch_api_key or None,
            username=settings.elasticsearch_username or None,
            password=settings.elasticsearch_password or None,
            **kwargs,
        )
    return RedisStreamSink(connection, settings.prefix, maxlen=settings.event_stream_maxlen,
                           **kwargs)


# --------------------------------------------------------------------------- shared producer sink

_DEFAULT_SINKS: dict[tuple, EventSink] = {}
_DEFAULT_LOCK = threading.Lock()


def _sink_key(settings: Any) -> tuple:
    return (os.getpid(), settings.prefix, settings.redis_url, settings.elasticsearch_url,
            settings.elasticsearch_index, settings.elasticsearch_api_key,
            settings.elasticsearch_username, settings.elasticsearch_password,
            settings.event_buffer, settings.event_stream_maxlen)


def default_sink(settings: Any, connection: Any) -> EventSink:
    """The process-wide sink of producers (``Queue``), one per process and sink settings.

    Made on first use with :func:`make_sink`; ``connection`` is used only by
    the call that makes it. A forked child (a horse) gets its own on first
    use; note that a horse ends with ``os._exit``, so events it emits are
    delivered only if it calls :func:`flush_default_sinks` first.
    """
    key = _sink_key(settings)
    with _DEFAULT_LOCK:
        sink = _DEFAULT_SINKS.get(key)
        if sink is None:
            sink = make_sink(settings, connection)
            _DEFAULT_SINKS[key] = sink
        return sink


def flush_default_sinks(timeout: float = 5.0) -> bool:
    """Deliver what this process's shared sinks hold; False if ``timeout`` ran out."""
    pid = os.getpid()
    deadline = time.monotonic() + timeout
    with _DEFAULT_LOCK:
        sinks = [sink for key, sink in _DEFAULT_SINKS.items() if key[0] == pid]
    return all([sink.flush(max(0.0, deadline - time.monotonic())) for sink in sinks])


# --------------------------------------------------------------------------- worker side


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
    if reason in ("timeout", "abandoned"):
        return reason
    return "failed"


class EventsMiddleware(Middleware):
    """Emits ``processing`` and the outcome of every job from the worker parent.

    The sink is made in ``on_start`` (:func:`make_sink`) unless one is given,
    and closed in ``on_stop`` (flushing for up to ``close_timeout`` seconds).
    Hooks only append to the sink's buffer: nothing here touches the network
    on the job path, and nothing runs in the horse. An outcome the worker
    could not record (``Outcome.recorded`` False: the attempt was taken back
    by the reaper meanwhile) emits nothing; the reaper reports that job.
    """

    def __init__(self, sink: EventSink | None = None, *, close_timeout: float = 5.0) -> None:
        self.sink = sink
        self.close_timeout = close_timeout

    def on_start(self, worker: Any) -> None:
        if self.sink is None:
            try:
                self.sink = make_sink(worker.settings, worker.connection)
            except RuntimeError as exc:  # elasticsearch client missing: keep the events
                log.error("Event log: %s; writing events to the Redis stream instead", exc)
                self.sink = RedisStreamSink(worker.connection, worker.settings.prefix,
                                            maxlen=worker.settings.event_stream_maxlen,
                                            buffer_size=worker.settings.event_buffer)
            log.info("Worker %s: event log to %s", worker.name, self.sink.name)

    def after_claim(self, worker: Any, job: Any) -> None:
        if self.sink is not None:
            self.sink.emit(make_event("processing", job, worker=worker.name, host=worker.host,
                                      wait_time=job.wait_time))

    def after_finish(self, worker: Any, job: Any, outcome: Any) -> None:
        if self.sink is None or not outcome.recorded:
            return
        event = outcome_event(outcome.status, outcome.reason)
        self.sink.emit(make_event(
            event, job, worker=worker.name, host=worker.host, duration=outcome.duration,
            error_type=outcome.error_type, error_message=outcome.error_message,
            reason=None if event == "completed" else outcome.reason,
        ))

    def on_stop(self, worker: Any) -> None:
        if self.sink is not None:
            self.sink.close(self.close_timeout)

    def describe(self) -> dict[str, Any]:
        """``events_buffered``, ``events_dropped``, ``events_errors`` for the heartbeat hash."""
        if self.sink is None:
            return {}
        stats = self.sink.stats()
        return {"events_buffered": stats["buffered"], "events_dropped": stats["dropped"],
                "events_errors": stats["errors"]}


def sink_of(source: Any, connection: Any = None) -> EventSink:
    """The sink to use for ``source``: an :class:`EventSink` itself; a worker's
    :class:`EventsMiddleware` sink (else the process default sink of its
    settings); or ``Settings`` (with ``connection``): the process default sink.
    """
    if isinstance(source, EventSink):
        return source
    middleware = getattr(source, "middleware", None)
    if middleware is not None:
        for mw in middleware:
            if isinstance(mw, EventsMiddleware) and mw.sink is not None:
                return mw.sink
        return default_sink(source.settings, connection or source.connection)
    if connection is None:
        raise ValueError("emit_job_event with Settings needs the Redis connection")
    return default_sink(source, connection)


def emit_job_event(source: Any, event: str, job: Any, *, connection: Any = None,
                   **fields: Any) -> None:
    """Emit one event from outside a worker's hooks (the reaper, admin tools).

    ``source`` is a Worker, an :class:`EventSink` or ``Settings`` (then pass
    ``connection``); ``fields`` go to :func:`make_event` (``worker``,
    ``duration``, ``error_type``, ``error_message``, ``reason``, ...). E.g.
    the reaper: ``emit_job_event(worker, "abandoned", job, reason="abandoned",
    error_type="Abandoned", error_message="worker w.1 died")`` or ``"requeued"``
    with ``reason="worker died"``. Never blocks; raises only on an unknown event.
    """
    sink_of(source, connection).emit(make_event(event, job, **fields))


# --------------------------------------------------------------------------- reading


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
    connection: Any,
    prefix: str,
    *,
    job_id: str | None = None,
    queue: str | None = None,
    after: str = "0-0",
    count: int = 1000,
    block_ms: int | None = None,
) -> list[tuple[str, dict]]:
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
        found: list[tuple[str, dict]] = []
        page_size = count if job_id is None and queue is None else max(count, 1000)
        cursor = after
        while len(found) < count:
            page = connection.xrange(key, min=f"({cursor}", max="+", count=page_size)
            found.extend((i, _decode(f)) for i, f in page if _matches(f, job_id, queue))
            if len(page) < page_size:
                break
            cursor = page[-1][0]
        return found[:count]
    _, found = _read_new(connection, key, after, job_id, queue, count, block_ms)
    return found


def last_id(connection: Any, prefix: str) -> str:
    """Id of the newest event in the Redis stream, ``"0-0"`` when it is empty."""
    last = connection.xrevrange(Keys(prefix).events, max="+", min="-", count=1)
    return last[0][0] if last else "0-0"


def last_events(
    connection: Any,
    prefix: str,
    *,
    job_id: str | None = None,
    queue: str | None = None,
    count: int = 50,
    until: str = "+",
) -> list[tuple[str, dict]]:
    """The newest ``count`` matching events with ids up to ``until`` (inclusive), oldest first."""
    key = Keys(prefix).events
    found: list[tuple[str, dict]] = []
    page_size = count if job_id is None and queue is None else max(count, 1000)
    cursor = until
    while count > 0 and len(found) < count:
        page = connection.xrevrange(key, max=cursor, min="-", count=page_size)
        found.extend((i, _decode(f)) for i, f in page if _matches(f, job_id, queue))
        if len(page) < page_size:
            break
        cursor = f"({page[-1][0]}"
    newest = list(reversed(found[:count]))
    return in_time_order(newest) if job_id is not None else newest


#: Inside one millisecond a job's events can only have happened in this order.
_LIFECYCLE_RANK = {"queued": 0, "processing": 1}


def in_time_order(events: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """One job's events ordered by when they happened, not by when they arrived.

    Each process delivers its events through its own buffered sink, so the
    stream's arrival order can put a producer's ``queued`` after the worker's
    ``completed``. The event's own ``@timestamp`` (milliseconds, taken when it
    happened) orders them; inside one millisecond ``queued`` comes before
    ``processing`` before the rest, then arrival order (the sort is stable).
    """
    def key(item: tuple[str, dict]) -> tuple[str, int]:
        doc = item[1]
        return (str(doc.get("@timestamp") or ""), _LIFECYCLE_RANK.get(doc.get("event"), 2))
    return sorted(events, key=key)


def _read_new(connection: Any, key: str, cursor: str, job_id: str | None, queue: str | None,
              count: int, block_ms: int) -> tuple[str, list[tuple[str, dict]]]:
    """XREAD BLOCK until matching events arrive or ``block_ms`` passed; returns (cursor, events)."""
    deadline = time.monotonic() + block_ms / 1000.0
    while True:
        if block_ms == 0:
            wait_ms = 0
        else:
            wait_ms = int((deadline - time.monotonic()) * 1000)
            if wait_ms <= 0:
                return cursor, []
        response = connection.xread({key: cursor}, count=count, block=wait_ms)
        if not response:
            return cursor, []
        entries = response[0][1]
        cursor = entries[-1][0]
        found = [(i, _decode(f)) for i, f in entries if _matches(f, job_id, queue)]
        if found:
            return cursor, found


def follow_events(
    connection: Any,
    prefix: str,
    *,
    job_id: str | None = None,
    queue: str | None = None,
    after: str = "$",
    block_ms: int = 1000,
    stop: threading.Event | None = None,
) -> Iterator[tuple[str, dict]]:
    """Yield matching events as they arrive (``events --follow``) until ``stop`` is set.

    ``after="$"`` is pinned to the stream's last id when this is called (not
    at the first ``next()``), so nothing added in between is missed.
    """
    key = Keys(prefix).events
    cursor = after
    if cursor == "$":
        last = connection.xrevrange(key, max="+", min="-", count=1)
        cursor = last[0][0] if last else "0-0"
    return _follow(connection, key, cursor, job_id, queue, block_ms, stop)


def _follow(connection: Any, key: str, cursor: str, job_id: str | None, queue: str | None,
            block_ms: int, stop: threading.Event | None) -> Iterator[tuple[str, dict]]:
    while stop is None or not stop.is_set():
        cursor, found = _read_new(connection, key, cursor, job_id, queue, 1000, block_ms)
        yield from found


def job_timeline(connection: Any, prefix: str, job_id: str, start: float, end: float | None,
                 *, limit: int = 200, scan_limit: int = 5000) -> list[tuple[str, dict]]:
    """Events of job ``job_id`` in the Redis stream between epoch seconds ``start`` and
    ``end`` (None: up to now), oldest first; reads at most ``scan_limit`` entries of
    that window (stream ids are millisecond times), so a page never scans the whole log."""
    key = Keys(prefix).events
    cursor = f"{max(0, int(start * 1000) - 1000)}-0"
    top = "+" if end is None else f"{int(end * 1000) + 5000}"
    found: list[tuple[str, dict]] = []
    scanned = 0
    first = True
    while scanned < scan_limit and len(found) < limit:
        page = connection.xrange(key, min=cursor if first else f"({cursor}", max=top,
                                 count=min(1000, scan_limit - scanned))
        first = False
        scanned += len(page)
        found.extend((i, _decode(f)) for i, f in page if f.get("job_id") == job_id)
        if len(page) < 1000:
            break
        cursor = page[-1][0]
    return found[:limit]
