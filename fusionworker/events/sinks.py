"""Event sinks: :class:`EventSink` buffers events and delivers them in batches
from a daemon thread; :class:`RedisStreamSink`, :class:`ElasticsearchSink`,
:class:`MemorySink` (tests) and :class:`NullSink` deliver them; :func:`make_sink`
picks one from the settings. Subclass :class:`EventSink` (implement ``_deliver``)
for another destination.

The first sink set up in a process installs two process hooks (not the import
of this module): at exit every live sink is closed (what it holds is delivered,
bounded by its close timeout); in a forked child every live sink starts empty
with fresh locks (the parent keeps delivering what it buffered).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import random
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.keys import Keys, QueueKeys
from .history import HISTORY_COPY_TTL, HistoryRun, queue_keys
from .schema import ES_MAPPINGS, _plain

if TYPE_CHECKING:  # pragma: no cover
    from redis.typing import EncodableT

    from ..core.config import Settings
    from ..core.connection import RedisClient

log = logging.getLogger("fusionworker.events")


# --------------------------------------------------------------------------- base sink

#: A buffered event: (stable event id, document).
Entry = tuple[str, dict[str, Any]]


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
        self.reset_state()
        _LIVE_SINKS.add(self)
        _install_process_hooks()

    def reset_state(self) -> None:
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

    def emit(self, doc: dict[str, Any]) -> None:
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

    def written_by_script(self, lost: bool = False) -> None:
        """Count an event a script wrote in this sink's place (the worker's job events on
        the plain stream sink, events/middleware.py) as delivered, or as dropped when the
        script says it could not write it (``lost``)."""
        with self._cond:
            if lost:
                self._dropped += 1
            else:
                self._delivered += 1

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
            except Exception as exc:  # noqa: BLE001 - any failure: keep the batch, back off, retry
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
            self._last_error = f"{type(exc).__name__}: {str(exc).rstrip('.')}"[:500]
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
        sink.reset_state()


_hooks_installed = False
_hooks_lock = threading.Lock()


def _install_process_hooks() -> None:
    """Once per process, when the first sink is set up (not at import): close every
    live sink at exit (delivering what it holds), and reset them in a forked child."""
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        atexit.register(_close_all_sinks)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_reset_sinks_in_child)


# --------------------------------------------------------------------------- sinks


class NullSink(EventSink):
    """Discards every event (tests, benchmarks)."""

    name = "null"

    def emit(self, doc: dict[str, Any]) -> None:
        return None

    def _deliver(self, entries: list[Entry]) -> Delivery:  # pragma: no cover - never called
        return Delivery()


class MemorySink(EventSink):
    """Keeps every event in :attr:`docs` synchronously (tests of the worker's hooks)."""

    name = "memory"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.docs: list[dict[str, Any]] = []

    def emit(self, doc: dict[str, Any]) -> None:
        with self._cond:
            self.docs.append(doc)
            self._delivered += 1

    def _deliver(self, entries: list[Entry]) -> Delivery:  # pragma: no cover - never called
        return Delivery()


class RedisStreamSink(EventSink):
    """``XADD <prefix>:events MAXLEN ~ <maxlen>`` per event, one pipeline per batch (an
    event of a job: by ``history.lua``, with its job's history; on a single Redis, a run
    of such events per call).

    ``connection`` is a redis-py client (thread-safe: the delivery thread takes
    its own connection from the client's pool, never the worker's).
    """

    def __init__(self, connection: RedisClient, prefix: str = "fw", *, maxlen: int = 100000,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connection = connection
        self.prefix = prefix
        self.key = Keys(prefix).events
        self.maxlen = maxlen
        self.name = f"Redis stream {self.key}"
        #: each queue's keys (None: not a queue name), found once per queue
        self._queue_keys: dict[str, QueueKeys | None] = {}

    def _deliver(self, entries: list[Entry]) -> Delivery:
        """One pipeline: the events of jobs go to their jobs' histories too (history.lua,
        a run of up to :data:`~.history.HISTORY_CHUNK` events per call, which XADDs them to the
        stream itself on a single Redis); other events XADD, in their place."""
        from ..core.connection import is_cluster
        from ..core.queue import scripts_for

        scripts = scripts_for(self.connection)
        own_stream = not is_cluster(self.connection)
        pipe = self.connection.pipeline(transaction=False)
        run = HistoryRun(pipe, scripts.history, self.key if own_stream else None, self.maxlen)
        for _event_id, doc in entries:
            fields: dict[EncodableT, EncodableT] = {
                k: stream_value(v) for k, v in doc.items() if v is not None}
            keys = self._history_keys(doc)
            if keys is None or not own_stream:
                run.send()                  # the stream keeps the events' order
                pipe.xadd(self.key, fields, maxlen=self.maxlen, approximate=True)
                run.calls.append(None)
            if keys is not None:
                run.add(keys, doc.get("event") in HISTORY_COPY_TTL, fields)
        run.send()
        answers = pipe.execute(raise_on_error=False)
        scripts.reload_missing(answers, run.calls)
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        return Delivery()

    def _history_keys(self, doc: dict[str, Any]) -> tuple[str, str] | None:
        """The history and record keys of the event's job, or None (no job named)."""
        job_id, queue = doc.get("job_id"), doc.get("queue")
        if not (isinstance(job_id, str) and job_id and isinstance(queue, str)):
            return None
        try:
            qkeys = self._queue_keys[queue]
        except KeyError:
            if len(self._queue_keys) >= 4096:      # a reaper's thousands of queues
                self._queue_keys.clear()
            qkeys = self._queue_keys[queue] = queue_keys(self.prefix, queue)
        if qkeys is None:
            return None
        return qkeys.job_events(job_id), qkeys.job(job_id)

    def script_stream(self) -> tuple[Any, str, int] | None:
        """``(connection, stream key, maxlen)`` where a script may XADD this sink's
        documents itself (``enqueue_many.lua`` does for "queued"), or None: a
        subclass may deliver differently, so only this class says yes."""
        if type(self) is not RedisStreamSink:
            return None
        return self.connection, self.key, self.maxlen


def stream_value(value: Any) -> str:
    """A document's value as the stream holds it (text; booleans as JSON writes them)."""
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
                "pip install 'fusionworker[elasticsearch]' (from a checkout: "
                "pip install -e '.[elasticsearch]')"
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
        operations: list[dict[str, Any]] = []
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
            result: dict[str, Any] = next(iter(item.values()), {}) if item else {}
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


def make_sink(settings: Settings, connection: RedisClient, **kwargs: Any) -> EventSink:
    """Elasticsearch when ``elasticsearch_url`` is set, else the Redis stream; a
    :class:`NullSink` when the event log is off (``FUSIONWORKER_EVENTS=0``).

    ``kwargs`` go to the sink (batch size, backoff, ...).
    """
    if not settings.events:
        return NullSink()
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
