"""Producer and admin API of one queue: enqueue, fetch, cancel, requeue, pause, caps.

``Queue`` is thin: the options are :mod:`.options` (one list, validated once),
writing jobs is :mod:`.enqueue` (prepare, the single and the bulk writer),
reads are :mod:`.queue_read`, admin actions :mod:`.queue_admin`. Every state
change is one Lua script call (see ``scripts/``); reads are plain commands. A
``Queue`` is cheap: make one per call site if you like.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack

from . import emitting
from . import enqueue as _enqueue
from . import tracing as _otel
from .config import Settings, settings_from_env
from .enqueue import BULK_CHUNK, BULK_INFLIGHT
from .enqueue import at as _at
from .job import Job
from .keys import Keys, QueueKeys, check_queue_name
from .options import NAMES, OPTIONS, JobOptions, option_like, split, takes_options_of
from .prepared import CallData, PreparedJob
from .queue_admin import RATE_UNITS, QueueAdmin, forget_queue, parse_rate
from .queue_habits import QueueHabits
from .queue_read import BANDS, QueueReads, _band_range, find_queue_of, known_queues
from .redis_client import decoding, is_cluster, shared_client
from .scripts import scripts_for

if TYPE_CHECKING:  # pragma: no cover
    from .batch import Batch
    from .emitting import EventFields
    from .redis_client import RedisClient

log = logging.getLogger("fusionworker.queue")

#: the keywords of enqueue_call: the options and the scheduling form
_KEYWORDS = OPTIONS | {"_when"}

__all__ = [
    "BANDS", "BULK_CHUNK", "BULK_INFLIGHT", "NAMES", "OPTIONS", "RATE_UNITS", "PreparedJob",
    "Queue", "_at", "_band_range", "find_queue_of", "forget_queue", "known_queues",
    "parse_rate", "scripts_for", "settings_from_env",
]

#: client -> {(prefix, queue): when it was last added to ``fw:queues``}: saves the SADD of
#: a per-call Queue; re-sent after KNOWN_FOR seconds (the queue may have been deleted
#: meanwhile: at most that long after a delete is a queue missing from ``fw:queues``)
_known: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], float]] = (
    weakref.WeakKeyDictionary())
KNOWN_FOR = 10.0
_cache_lock = threading.Lock()


def _explicit(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """RQ's ``enqueue_in(delay, f, args=[...], kwargs={...}, **options)``: the job's
    arguments taken out of ``kwargs`` (left with the options). Without ``args=`` or
    ``kwargs=``: ``(args, kwargs)``, the keywords being the job's (and options)."""
    if "args" not in kwargs and "kwargs" not in kwargs:
        return args, kwargs
    if args:
        raise TypeError("give the job's arguments positionally or as args=[...]/kwargs={...}, "
                        "not both")
    explicit, job_kwargs = kwargs.pop("args", None), kwargs.pop("kwargs", None)
    extra = sorted(set(kwargs) - set(option_like(kwargs)))
    if extra:
        raise TypeError(f"with args=/kwargs=, the job's keyword arguments go inside "
                        f"kwargs={{...}}, not beside it: {', '.join(extra)}")
    return explicit, dict(job_kwargs or {})


class Queue(QueueReads, QueueAdmin, QueueHabits):
    """One named priority queue.

    >>> q = Queue("sms")                      # connection from REDIS_URL
    >>> job = q.enqueue("app.tasks:send", "+1555", body="hi", priority=10)
    """

    def __init__(
        self,
        name: str = "default",
        connection: RedisClient | None = None,
        *,
        settings: Settings | None = None,
        events: Any = None,
        default_timeout: float | str | None = None,
        is_async: bool = True,
    ) -> None:
        self.name = check_queue_name(name)
        self.settings = settings or settings_from_env()
        if default_timeout is not None:     # RQ's: the timeout of a job that gives none
            self.settings = self.settings.replace(job_timeout=JobOptions(
                timeout=default_timeout).checked(1.0, 0).timeout)
        #: False (RQ's synchronous mode, for tests): each job enqueued runs in this
        #: process before ``enqueue`` returns (``fusionworker.testing.run_burst``)
        self.is_async = bool(is_async)
        # any redis-py client works: one replying bytes gets a str-decoding twin
        connection = (shared_client(self.settings.redis_url) if connection is None
                      else decoding(connection))
        self.connection = connection
        self.keys = Keys(self.settings.prefix)
        self.qkeys: QueueKeys = self.keys.queue(name)
        self.scripts = scripts_for(connection)
        if events is True:              # "events on": the default sink, as None says
            events = None
        elif events is not None and events is not False and not callable(
                getattr(events, "emit", None)):
            raise TypeError(f"events must be None, True, False or a sink with an emit() "
                            f"method, not {type(events).__name__}")
        if events is None and not self.settings.events:   # FUSIONWORKER_EVENTS=0
            events = False
        self._events = events
        #: (the sink it was worked out for, ``_script_events()``'s answer)
        self._script_stream: tuple[Any, tuple[list[str], list[Any]] | None] | None = None
        self._registered = False
        self._made_defaults: tuple[Any, ...] | None = None
        if self.settings.otel:   # FUSIONWORKER_OTEL=on
            _otel.ensure_producer(Queue)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    @classmethod
    def all(cls, connection: RedisClient | None = None, *,
            settings: Settings | None = None) -> list[Queue]:
        """Every queue ever enqueued to (``fw:queues``), by name (RQ's name)."""
        settings = settings or settings_from_env()
        conn = shared_client(settings.redis_url) if connection is None else connection
        return [Queue(n, conn, settings=settings) for n in known_queues(conn, settings.prefix)]

    # -- enqueue ---------------------------------------------------------------

    def enqueue(self, /, func: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Job[Any]:
        """Enqueue ``func(*args, **kwargs)``; option names (:data:`OPTIONS`) are taken out.

        Use :meth:`enqueue_call` when the job's own keyword arguments clash with them.
        """
        return self.enqueue_call(func, args=args, kwargs=kwargs, **split(kwargs).given())

    def enqueue_in(self, /, seconds: float | timedelta, func: str | Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Job[Any]:
        """Enqueue to run ``seconds`` (or a ``timedelta``) from now (by the Redis
        server's clock). The job's arguments may be given as ``args=[...]``,
        ``kwargs={...}`` instead, as RQ takes them."""
        args, job_kwargs = _explicit(args, kwargs)
        return self.enqueue_call(func, args=args, kwargs=job_kwargs, _when=("in", seconds),
                                 **split(kwargs).given())

    def enqueue_at(self, /, when: datetime, func: str | Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Job[Any]:
        """Enqueue to run at ``when`` (a naive datetime is local time, as RQ's); ``args=``,
        ``kwargs=`` as with :meth:`enqueue_in`."""
        args, job_kwargs = _explicit(args, kwargs)
        return self.enqueue_call(func, args=args, kwargs=job_kwargs, _when=_at(when),
                                 **split(kwargs).given())

    def _run_now(self, job: Job[Any]) -> Job[Any]:
        """``is_async=False``: run the queue's due jobs (the one just written among them) in
        this process, as RQ's synchronous mode does; the job as it ended. Written
        already: a failure here is logged, never raised."""
        from .emitting import runner  # fusionworker.testing.run_burst, installed above

        run = runner()
        if run is None:
            log.error("Job %s of %s was enqueued but no in-process runner is installed "
                      "(import fusionworker first)", job.id, self.name)
            return job
        try:
            run(self)
            return job.refresh()
        except Exception as exc:  # noqa: BLE001 - the job is enqueued: never raise now
            log.error("Job %s of %s was enqueued but not run in this process: %s: %s",
                      job.id, self.name, type(exc).__name__, exc)
            return job

    def prepare_call(
        self,
        func: str | Callable[..., Any],
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        priority: int | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_delay: float | None = None,
        job_id: str | None = None,
        unique_key: str | None = None,
        group: str | None = None,
        on_failure_url: str | None = None,
        depends_on: Any = None,
        allow_dependency_failure: bool | None = None,
        batch: Batch | None = None,
        description: str | None = None,
        meta: dict[str, Any] | None = None,
        result_ttl: int | None = None,
        failure_ttl: int | None = None,
        ttl: float | None = None,
        at_front: bool | None = None,
        retry: Any = None,
        on_success: str | Callable[..., Any] | None = None,
        on_failure: str | Callable[..., Any] | None = None,
        retry_on: Any = None,
        on_stopped: str | Callable[..., Any] | None = None,
        _when: tuple[str, float | timedelta] | None = None,
    ) -> PreparedJob:
        """Validate and encode what :meth:`enqueue_call` would write; writes nothing.

        Its keyword options are :class:`~fusionworker.core.options.JobOptions`'s, in
        that order (:data:`NAMES`); :meth:`enqueue_call` takes this signature."""
        options = JobOptions(priority, timeout, max_retries, retry_delay, job_id, unique_key,
                             group, on_failure_url, depends_on, allow_dependency_failure, batch,
                             description, meta, result_ttl, failure_ttl, ttl, at_front, retry,
                             on_success, on_failure, retry_on, on_stopped)
        return _enqueue.prepare(self, func, args, kwargs, options, _when)

    @takes_options_of(prepare_call)
    def enqueue_call(self, func: str | Callable[..., Any],
                     args: list[Any] | tuple[Any, ...] | None = None,
                     kwargs: Mapping[str, Any] | None = None, **options: Any) -> Job[Any]:
        """Enqueue with explicit ``args``/``kwargs``. Returns the job (or the live duplicate).

        The options are :meth:`prepare_call`'s (:class:`~fusionworker.core.options.JobOptions`,
        :data:`NAMES`); one left unset takes the function's ``@job`` default, then
        the settings' default.

        ``otel.instrument()`` wraps this method in a PRODUCER span (core/tracing.py).

        A job with the same ``job_id`` or ``unique_key`` that is queued, scheduled,
        started, or finished within the dedup window is not enqueued again: the
        existing job is returned with ``job.deduplicated = True``.

        Everything is checked before anything is written (the function is
        registered or allow-listed, the arguments are serializable, the
        options are valid); once the job is written this never raises:
        a failure of what follows (reading a duplicate's live job, the
        ``queued`` event) is logged and the job returned as known locally.
        """
        if not options.keys() <= _KEYWORDS:
            unknown = next(name for name in options if name not in _KEYWORDS)
            raise TypeError(f"Queue.enqueue_call() got an unexpected keyword argument {unknown!r}")
        job = _enqueue.write_one(self, Queue.prepare_call(self, func, args, kwargs, **options))
        return job if self.is_async else self._run_now(job)

    def prepare(self, /, func: str | Callable[..., Any], *args: Any, **kwargs: Any) -> PreparedJob:
        """Validate and encode exactly what :meth:`enqueue` takes (options included);
        writes nothing. Hand the result to :meth:`enqueue_many`.

        Bad input raises here (the same errors as ``enqueue``), so a batch with
        one bad job fails before anything is written.
        """
        return _enqueue.prepare(self, func, args, kwargs, split(kwargs))

    @staticmethod
    def prepare_data(func: str | Callable[..., Any], args: list[Any] | tuple[Any, ...] | None = None,
                     kwargs: Mapping[str, Any] | None = None, **options: Any) -> CallData:
        """RQ's ``Queue.prepare_data(...)``, for :meth:`enqueue_many`: the call and its
        options (:meth:`prepare_call`'s: RQ's ``job_id``, ``timeout``, ``result_ttl``,
        ``ttl``, ``failure_ttl``, ``description``, ``at_front``, ``meta``, ``retry``,
        ``on_success``/``on_failure``/``on_stopped`` among them), checked when
        ``enqueue_many`` prepares it on its queue, before anything is written."""
        return CallData(func, args, kwargs, dict(options))

    def enqueue_many(self, prepared: Iterable[PreparedJob | CallData], *,
                     chunk_size: int = BULK_CHUNK,
                     progress: Callable[[int], None] | None = None) -> list[Job[Any]]:
        """Write many prepared jobs (:meth:`prepare`, or RQ's :meth:`prepare_data`) in as
        few round trips as possible.

        Returns one :class:`Job` per prepared job, in order; a job that was not
        written because a live duplicate exists is that duplicate, with
        ``deduplicated = True`` (same rules as :meth:`enqueue`). ``progress(n)`` is
        called after each chunk with the number of jobs it held.

        Atomic per chunk: each chunk of ``chunk_size`` jobs is one Lua script call
        (``enqueue_many.lua``), so it is written entirely or not at all, and no
        worker sees half of it. Every job is validated before the first chunk is
        sent, so bad input writes nothing. On a single Redis (or Sentinel) the
        next chunks are sent before the reply of the previous one is read
        (:data:`BULK_INFLIGHT` on the connection), so the server runs one chunk
        while this process builds the jobs of another.

        Events: a "queued" event per job written, as :meth:`enqueue` emits.
        When they go to this Redis's event stream (the default sink, no
        Elasticsearch, not a Cluster), the chunk's script XADDs them itself, in
        the same atomic step as the jobs; otherwise the sink gets them here.

        If a chunk fails once others were written (connection lost, Redis out of
        memory), :class:`~fusionworker.exceptions.PartialEnqueue` lists the jobs
        known written (``.jobs``); a chunk in flight when the connection broke may
        or may not have been written. Calling ``enqueue_many`` again with the same
        prepared jobs is safe: their ids are fixed by ``prepare``, so the ones
        already written come back as duplicates.
        """
        jobs = [Queue.prepare_call(self, p.func, p.args, p.kwargs, **p.options)
                if isinstance(p, CallData) else p for p in prepared]
        return _enqueue.write_many(self, jobs, chunk_size, progress)

    def _chunk_replies(self, chunks: list[list[PreparedJob]],
                       stream: tuple[list[str], list[Any]] | None = None,
                       ) -> Iterator[tuple[list[PreparedJob], Any]]:
        return _enqueue.chunk_replies(self, chunks, stream)

    def _register(self) -> None:
        if self._registered:
            return
        pair = (self.settings.prefix, self.name)
        known = _known.get(self.connection)
        now = time.monotonic()
        if known is None or now - known.get(pair, -KNOWN_FOR) >= KNOWN_FOR:
            self.connection.sadd(self.keys.queues, self.name)
            with _cache_lock:
                _known.setdefault(self.connection, {})[pair] = now
        self._registered = True

    def _emit(self, event: str, job: Job[Any] | dict[str, Any],
              **fields: Unpack[EventFields]) -> None:
        """Hand the event to the sink: ``events=None`` -> the process-wide default
        sink (made on first use), ``False`` -> no events, else the given sink."""
        port = emitting.port()
        if self._events is False or port is None:
            return
        if self._events is None:
            self._events = port.default_sink(self.settings, self.connection)
        fields["timestamp"] = job.enqueued_at if event == "queued" and isinstance(job, Job) else None
        self._events.emit(port.document(event, job, **fields))

    def _script_events(self) -> tuple[list[str], list[Any]] | None:
        """Extra KEYS and ARGV of ``enqueue.lua`` and ``enqueue_many.lua`` for them to
        XADD the "queued" events themselves, or None (the producer emits them to the
        sink). Worked out once per sink.

        Only where the sink would write exactly that: the default (or a plain)
        :class:`~fusionworker.events.RedisStreamSink` (its ``script_stream()``)
        of this prefix on this Redis, which is never a Cluster (the stream is on
        another slot).
        """
        cached = self._script_stream
        if cached is not None and cached[0] is self._events:   # the same sink: the same answer
            return cached[1]
        try:
            answer = self._stream_of_sink()
        except Exception:  # noqa: BLE001 - no sink (e.g. its client is missing): the job
            return None    # is written all the same, and emitting its event logs why
        self._script_stream = (self._events, answer)
        return answer

    def _stream_of_sink(self) -> tuple[list[str], list[Any]] | None:
        port = emitting.port()
        if self._events is False or port is None or is_cluster(self.connection):
            return None
        sink = self._events
        if sink is None:
            sink = self._events = port.default_sink(self.settings, self.connection)
        target = getattr(sink, "script_stream", lambda: None)()
        if (target is None or target[1] != self.keys.events
                or not same_server(target[0], self.connection)):
            return None
        return [target[1]], [target[2], port.hostname, self.name]


def same_server(a: Any, b: Any) -> bool:
    """Do clients ``a`` and ``b`` talk to the same Redis server and database?"""
    if a is b:
        return True
    pool_a, pool_b = getattr(a, "connection_pool", None), getattr(b, "connection_pool", None)
    if pool_a is None or pool_b is None:
        return False
    if pool_a is pool_b:
        return True
    where = [(kw.get("host"), kw.get("port"), kw.get("path"), kw.get("db") or 0,
              getattr(pool, "service_name", None))
             for pool in (pool_a, pool_b) for kw in (pool.connection_kwargs,)]
    return where[0] == where[1] and where[0] != (None, None, None, 0, None)
