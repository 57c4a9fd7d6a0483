"""Producer and admin API of one queue: enqueue, fetch, cancel, requeue, pause, caps.

Every state change is one Lua script call (see ``scripts/``); reads are plain
commands. A ``Queue`` is cheap: make one per call site if you like.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..exceptions import InvalidOperation, NoSuchJob
from . import codec
from . import tracing as _otel
from .config import SETTINGS, Settings, check_value, load_settings
from .connection import decoding, shared_client, text, text_hash, texts
from .functions import func_ref, verify
from .job import (
    DONE_STATUSES,
    SEQ_LIMIT,
    Job,
    JobStatus,
    check_priority,
    encode_fields,
    new_job_id,
    safe_text,
)
from .keys import Keys, QueueKeys, check_queue_name
from .registry import producer_allowed, registered
from .scripts import Scripts, replies

if TYPE_CHECKING:  # pragma: no cover
    from .batch import Batch
    from .connection import RedisClient
    from .registries import JobRegistry

log = logging.getLogger("fusionworker.queue")

#: ``enqueue()`` keyword arguments that are job options, not arguments of the job.
OPTIONS = frozenset({
    "priority", "timeout", "max_retries", "retry_delay", "job_id", "unique_key", "group",
    "on_failure_url", "depends_on", "allow_dependency_failure", "batch",
})

#: Priority bands reported by ``stats()`` / ``info``: name, lowest, highest priority.
BANDS = (("high", 10, 1023), ("normal", 0, 9), ("low", -1023, -1))

#: client -> {(prefix, queue): when it was last added to ``fw:queues``}: saves the SADD of
#: a per-call Queue; re-sent after KNOWN_FOR seconds (the queue may have been deleted
#: meanwhile: at most that long after a delete is a queue missing from ``fw:queues``)
_known: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], float]] = (
    weakref.WeakKeyDictionary())
KNOWN_FOR = 10.0
_cache_lock = threading.Lock()


def scripts_for(connection: RedisClient) -> Scripts:
    """The registered scripts of a client (registered once per client).

    Kept on the client itself (``_fusionworker_scripts``): the scripts refer
    to the client, so a cache elsewhere would keep every client (and its
    sockets) alive; this way they go together.
    """
    found: Scripts | None = getattr(connection, "_fusionworker_scripts", None)
    if found is None:
        with _cache_lock:
            found = getattr(connection, "_fusionworker_scripts", None)
            if found is None:
                found = Scripts(connection)
                setattr(connection, "_fusionworker_scripts", found)  # noqa: B010 - not its own
    return found


_env_settings: dict[tuple[str | None, ...], Settings] = {}


_ENV_NAMES = tuple(s.env for s in SETTINGS)
_ENV_KEYS = tuple(os.environ.encodekey(n) for n in _ENV_NAMES) if hasattr(
    os.environ, "encodekey") else ()


def settings_from_env() -> Settings:
    """``load_settings()``, memoized on the environment's values (a per-call ``Queue``).

    The key is read from ``os.environ``'s own dict where CPython has one (50
    lookups through the mapping cost ~50 us, more than the rest of a Queue).
    """
    data = getattr(os.environ, "_data", None)
    if _ENV_KEYS and isinstance(data, dict):
        key = tuple(data.get(k) for k in _ENV_KEYS)
    else:
        key = tuple(os.environ.get(n) for n in _ENV_NAMES)
    found = _env_settings.get(key)
    if found is None:
        found = load_settings()
        if len(_env_settings) < 32:
            _env_settings[key] = found
    return found


def _at(when: datetime) -> tuple[str, float]:
    """``enqueue_at``'s time: naive datetimes are taken as UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return ("at", when.timestamp())


#: Jobs per ``enqueue_many.lua`` call: one atomic step, a few milliseconds of Redis time.
BULK_CHUNK = 500
#: ``enqueue_many.lua`` calls in flight on one connection (single Redis, Sentinel)
BULK_INFLIGHT = 2


#: ``codec.dumps``'s JSON text of an encoded value, without making an encoder per call
_tagged_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
#: compact JSON keeping non-ASCII text as UTF-8 (a job's entry for ``enqueue_many.lua``),
#: without making an encoder per call
_payload = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


#: function references (strings) that passed ``func_ref``'s check in this process
_CHECKED_REFS: set[str] = set()


def _checked_ref(func: str | Callable[..., Any]) -> str:
    """``func_ref(func)``, remembering checked strings (up to 4096) for the next call."""
    ref = func_ref(func)
    if isinstance(func, str) and len(_CHECKED_REFS) < 4096:
        _CHECKED_REFS.add(ref)
    return ref


@dataclass(frozen=True)
class PreparedJob:
    """A validated, encoded job that is not written yet (``Queue.prepare``)."""

    queue: str
    id: str
    func: str
    priority: int
    mode: str
    when: float
    unique_key: str
    #: hash fields as ``[name, value, ...]`` strings (``job.encode_fields``)
    fields: list[str] = field(repr=False)
    #: this job's entry of ``enqueue_many.lua``'s JSON argument
    payload: str = field(repr=False, default="")
    #: dependencies as ``(queue, job_id)`` (``depends_on``; then ``mode`` is deferred)
    deps: tuple[tuple[str, str], ...] = ()
    #: the ``Batch`` the job joins (``batch=``), counted once written
    batch: Batch | None = field(default=None, repr=False, compare=False)
    #: the arguments as encoded (``codec.encode``; their JSON is in ``fields``): the
    #: returned Job decodes them instead of parsing that JSON again
    encoded_args: Any = field(default=None, repr=False, compare=False)
    encoded_kwargs: Any = field(default=None, repr=False, compare=False)


def _band_range(low: int, high: int) -> tuple[int, int]:
    """Score range of the priorities low..high (see job.score)."""
    return (low - 1) * SEQ_LIMIT + 1, high * SEQ_LIMIT - 1


class Queue:
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
    ) -> None:
        self.name = check_queue_name(name)
        self.settings = settings or settings_from_env()
        # any redis-py client works: one replying bytes gets a str-decoding twin
        connection = (shared_client(self.settings.redis_url) if connection is None
                      else decoding(connection))
        self.connection = connection
        self.keys = Keys(self.settings.prefix)
        self.qkeys: QueueKeys = self.keys.queue(name)
        self.scripts = scripts_for(connection)
        self._events = events
        self._registered = False
        self._made_defaults: tuple[Any, ...] | None = None
        if self.settings.otel:   # FUSIONWORKER_OTEL=on
            _otel.ensure_producer()

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    # -- enqueue ---------------------------------------------------------------

    def enqueue(self, func: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Job[Any]:
        """Enqueue ``func(*args, **kwargs)``; option names (:data:`OPTIONS`) are taken out.

        Use :meth:`enqueue_call` when the job's own keyword arguments clash with them.
        """
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS}
        return self.enqueue_call(func, args=list(args), kwargs=kwargs, **options)

    def enqueue_in(self, seconds: float, func: str | Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Job[Any]:
        """Enqueue to run ``seconds`` from now (by the Redis server's clock)."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS}
        return self.enqueue_call(func, args=list(args), kwargs=kwargs, _when=("in", seconds),
                                 **options)

    def enqueue_at(self, when: datetime, func: str | Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Job[Any]:
        """Enqueue to run at ``when`` (naive datetimes are taken as UTC)."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS}
        return self.enqueue_call(func, args=list(args), kwargs=kwargs, _when=_at(when),
                                 **options)

    def enqueue_call(
        self,
        func: str | Callable[..., Any],
        args: Iterable[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        priority: int = 0,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_delay: float | None = None,
        job_id: str | None = None,
        unique_key: str | None = None,
        group: str | None = None,
        on_failure_url: str | None = None,
        depends_on: Any = None,
        allow_dependency_failure: bool = False,
        batch: Batch | None = None,
        _when: tuple[str, float] | None = None,
    ) -> Job[Any]:
        """Enqueue with explicit ``args``/``kwargs``. Returns the job (or the live duplicate).

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
        return self._write_one(self.prepare_call(
            func, args, kwargs, priority=priority, timeout=timeout, max_retries=max_retries,
            retry_delay=retry_delay, job_id=job_id, unique_key=unique_key, group=group,
            on_failure_url=on_failure_url, depends_on=depends_on,
            allow_dependency_failure=allow_dependency_failure, batch=batch, _when=_when))

    def prepare_call(
        self,
        func: str | Callable[..., Any],
        args: Iterable[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        priority: int = 0,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_delay: float | None = None,
        job_id: str | None = None,
        unique_key: str | None = None,
        group: str | None = None,
        on_failure_url: str | None = None,
        depends_on: Any = None,
        allow_dependency_failure: bool = False,
        batch: Batch | None = None,
        _when: tuple[str, float] | None = None,
    ) -> PreparedJob:
        """Validate and encode what :meth:`enqueue_call` would write; writes nothing."""
        # a bulk producer calls this per job: the settings' values are read once
        # (_defaults), a checked function reference is remembered, and the error
        # texts are made only on failure
        allowed, default_timeout, default_retries = self._defaults()
        ref = func if func.__class__ is str and func in _CHECKED_REFS else _checked_ref(func)
        verify(ref, allowed)
        check_priority(priority)
        # one place for ranges (config.check_value): NaN, infinity, negatives refused here,
        # before anything is written (a NaN timeout would make every run fail obscurely)
        if timeout is None:
            timeout = default_timeout
        else:
            timeout = check_value("job_timeout", float(timeout), "timeout")
        if max_retries is None:
            max_retries = default_retries
        else:
            max_retries = check_value("max_retries", int(max_retries), "max_retries")
        if retry_delay is not None:
            retry_delay = check_value("retry_delay", float(retry_delay), "retry_delay")
        if _when is not None and not math.isfinite(float(_when[1])):
            raise ValueError(f"the delay or time must be a finite number, got {_when[1]!r}")
        try:
            args_enc = codec.encode(args if isinstance(args, (list, tuple))
                                    else list(args or []), "args")
            kwargs_enc = codec.encode(kwargs if kwargs.__class__ is dict
                                      else dict(kwargs or {}), "kwargs")
        except codec.UnsupportedType as exc:
            raise codec.UnsupportedType(f"cannot enqueue {ref}: {exc}") from None
        args_json = _tagged_json(args_enc)   # codec.dumps
        kwargs_json = _tagged_json(kwargs_enc) if kwargs_enc else "{}"
        job_id = job_id or new_job_id()
        if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
            raise ValueError("job_id must be a non-empty string of at most 200 characters")
        mode, when = _when or ("now", 0.0)
        if batch is not None:
            from .batch import Batch

            if not isinstance(batch, Batch):
                raise TypeError(f"batch must be a Batch, got {type(batch).__name__}")
            if batch.sealed:
                raise RuntimeError(f"batch {batch.id} is sealed: no job can be added")
        deps: tuple[tuple[str, str], ...] = ()
        refs: list[str] = []
        if depends_on is not None:  # waits, deferred, on other jobs (workflows.py)
            from .workflows import dependency_ref, normalize_dependencies

            if _when is not None:
                raise ValueError("depends_on cannot be combined with a delay")
            deps = tuple(normalize_dependencies(self.name, depends_on))
            refs = [dependency_ref(q, i) for q, i in deps]
            mode = "deferred"
        # encode_fields(queue=..., func=..., ...) with the always-present fields spelled
        # out: the name, the checked reference, ASCII JSON and numbers need no safe_text
        fields = ["queue", self.name, "func", ref, "args", args_json, "kwargs", kwargs_json,
                  "timeout", repr(timeout), "max_retries", str(max_retries)]
        if (retry_delay is not None or unique_key is not None or group is not None
                or on_failure_url is not None or refs or batch is not None):
            fields += encode_fields(
                retry_delay=retry_delay, unique_key=unique_key, group=group,
                on_failure_url=on_failure_url, depends_on=refs or None,
                allow_dependency_failure="1" if deps and allow_dependency_failure else None,
                batch=batch.ref if batch is not None else None,
            )
        if _otel.producer is not None:
            fields += _otel.trace_fields()   # the producer's trace context
        # enqueue_many.lua's entry; a group is named so that a job without one takes the
        # script's short path (the script reads the group itself from the record)
        entry: list[Any] = [job_id, priority, mode, when, unique_key or "",
                            "" if group is None else safe_text(str(group)), fields]
        if refs:
            entry.append(refs)
        return PreparedJob(
            queue=self.name, id=job_id, func=ref, priority=priority, mode=mode, when=when,
            unique_key=unique_key or "", fields=fields, payload=_payload(entry), deps=deps,
            batch=batch, encoded_args=args_enc, encoded_kwargs=kwargs_enc,
        )

    def _defaults(self) -> tuple[tuple[str, ...], float, int]:
        """(functions a producer may enqueue, default timeout, default max_retries),
        checked once per settings and set of registered functions."""
        found = self._made_defaults
        settings = self.settings
        if found is None or found[0] is not settings or found[1] is not registered():
            refs = registered()
            timeout = check_value("job_timeout", float(settings.job_timeout), "timeout")
            retries = check_value("max_retries", int(settings.max_retries), "max_retries")
            found = self._made_defaults = (settings, refs, producer_allowed(settings),
                                           timeout, retries)
        return found[2], found[3], found[4]

    def _write_one(self, prepared: PreparedJob) -> Job[Any]:
        self._check_prepared([prepared])
        if prepared.deps:  # the dependency steps of workflows.py, through enqueue_many
            return self.enqueue_many([prepared])[0]
        p = prepared
        # registration (fw:queues, which the reaper, info and health walk) happens inside
        # enqueue.lua, so it survives a data loss (FLUSHALL, a restart without persistence);
        # on a Cluster the global set lives on another slot: SADD before every enqueue
        # instead (a registered empty queue is harmless; an unregistered job would be lost)
        cluster = _is_cluster(self.connection)
        if cluster:
            self.connection.sadd(self.keys.queues, self.name)
        placed = replies.enqueue(self.scripts.enqueue(
            keys=[self.qkeys.base] if cluster else [self.qkeys.base, self.keys.queues],
            args=[p.id, p.priority, p.mode, p.when, p.unique_key, self.settings.dedup_window,
                  *p.fields],
        ))
        actual_id = placed.job_id
        ref = p.func
        # written: from here on nothing may raise (a caller retrying on an exception
        # would enqueue twice)
        job: Job[Any] | None = None
        if placed.duplicate:     # the live job it matched, someone else's: read it
            try:
                job = self.fetch_job(actual_id)
            except Exception as exc:  # noqa: BLE001 - see above
                log.warning("Job %s is a duplicate on %s but could not be read: %s",
                            actual_id, self.name, exc)
        if job is None:  # new (built from what was sent and the script's answer: no read),
            # or a duplicate gone meanwhile (result_ttl=0) or unreadable
            job = self._local_job(p, actual_id, placed.status, seq=placed.seq,
                                  stamp=placed.enqueued_at, sched=placed.scheduled_for)
        job.deduplicated = placed.duplicate
        if p.batch is not None and not job.deduplicated:
            p.batch._added(1)
        if job.deduplicated:
            log.info("Skipped duplicate of job %s on %s (%s, status %s)",
                     actual_id, self.name, ref, placed.status)
        else:
            try:
                self._emit("queued", job)
            except Exception as exc:  # noqa: BLE001 - observability never fails an enqueue
                log.warning("Job %s was enqueued on %s; its 'queued' event was not: %s: %s",
                            actual_id, self.name, type(exc).__name__, exc)
        return job

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

    def _emit(self, event: str, job: Job[Any] | dict[str, Any], **fields: Any) -> None:
        """Hand the event to the sink: ``events=None`` -> the process-wide default
        sink (made on first use), ``False`` -> no events, else the given sink."""
        if self._events is False:
            return
        from ..events.registry import default_sink  # the one deferred upward import
        from ..events.schema import make_event  # (tests/test_layers.py says why)

        if self._events is None:
            self._events = default_sink(self.settings, self.connection)
        stamp = job.enqueued_at if event == "queued" and isinstance(job, Job) else None
        self._events.emit(make_event(event, job, timestamp=stamp, **fields))

    # -- bulk enqueue (prepare / enqueue_many) ---------------------------------

    def prepare(self, func: str | Callable[..., Any], *args: Any, **kwargs: Any) -> PreparedJob:
        """Validate and encode exactly what :meth:`enqueue` takes (options included);
        writes nothing. Hand the result to :meth:`enqueue_many`.

        Bad input raises here (the same errors as ``enqueue``), so a batch with
        one bad job fails before anything is written.
        """
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS}
        return self.prepare_call(func, args=list(args), kwargs=kwargs, **options)

    def enqueue_many(self, prepared: Iterable[PreparedJob], *, chunk_size: int = BULK_CHUNK,
                     progress: Callable[[int], None] | None = None) -> list[Job[Any]]:
        """Write many prepared jobs (:meth:`prepare`) in as few round trips as possible.

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
        from ..exceptions import PartialEnqueue

        items = list(prepared)
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self._check_prepared(items)
        if not items:
            return []
        waiting = [p for p in items if p.deps]
        if waiting:  # workflows.py steps 1 (read: all exist) and 2 (register on theirs)
            from .workflows import check_dependencies_exist, register

            check_dependencies_exist(self.connection, self.settings.prefix,
                                     sorted({d for p in waiting for d in p.deps}))
            for p in waiting:
                register(self, list(p.deps), p.id)
        self._register()
        chunks = [items[i:i + chunk_size] for i in range(0, len(items), chunk_size)]
        stream = self._script_events()
        out: list[Job[Any]] = []
        error: Exception | None = None
        for chunk, reply in self._chunk_replies(chunks, stream):
            if isinstance(reply, Exception):
                error = error or reply
                continue
            out += self._bulk_jobs(chunk, replies.enqueue_many(reply), emit=stream is None)
            if stream is None:
                self._drain_events(chunk_size)
            if progress:
                progress(len(chunk))
        if error is not None:
            if out:
                raise PartialEnqueue(out, error) from error
            raise error
        if waiting:  # step 4: dependencies that ended meanwhile
            from .workflows import recheck

            by_id = {p.id: p for p in waiting}
            for n, job in enumerate(out):
                prep = by_id.get(job.id)
                if (prep is not None and job.status == JobStatus.DEFERRED
                        and not job.deduplicated and recheck(self, job.id, prep.deps)):
                    out[n] = self.fetch_job(job.id) or job
        return out

    def _script_events(self) -> tuple[list[str], list[Any]] | None:
        """Extra KEYS and ARGV of ``enqueue_many.lua`` for it to XADD the "queued"
        events itself, or None (the producer emits them to the sink).

        Only where the sink would write exactly that: the default (or a plain)
        :class:`~fusionworker.events.RedisStreamSink` (its ``script_stream()``)
        of this prefix on this Redis, which is never a Cluster (the stream is on
        another slot).
        """
        if self._events is False or _is_cluster(self.connection):
            return None
        from ..events.registry import default_sink  # the deferred upward imports of _emit
        from ..events.schema import _HOSTNAME

        sink = self._events
        if sink is None:
            sink = self._events = default_sink(self.settings, self.connection)
        target = getattr(sink, "script_stream", lambda: None)()
        if (target is None or target[1] != self.keys.events
                or not _same_server(target[0], self.connection)):
            return None
        return [target[1]], [target[2], _HOSTNAME, self.name]

    def _chunk_replies(self, chunks: list[list[PreparedJob]],
                       stream: tuple[list[str], list[Any]] | None = None,
                       ) -> Iterator[tuple[list[PreparedJob], Any]]:
        """``(chunk, reply or exception)`` of each chunk sent, in order.

        On a client with a connection pool (single Redis, Sentinel) up to
        :data:`BULK_INFLIGHT` chunks are in flight on one connection; a Cluster
        client sends one at a time. After an error no further chunk is sent (the
        ones in flight are still read). ``stream``: see :meth:`_script_events`.
        """
        script = self.scripts.enqueue_many
        keys = [self.qkeys.base] + (stream[0] if stream else [])
        extra = stream[1] if stream else []
        window = self.settings.dedup_window

        def argv(chunk: list[PreparedJob]) -> list[Any]:
            return [window, "[" + ",".join([p.payload for p in chunk]) + "]", *extra]

        pool = getattr(self.connection, "connection_pool", None)
        if pool is None:  # Redis Cluster: one script call per chunk
            for chunk in chunks:
                try:
                    yield chunk, script(keys=keys, args=argv(chunk))
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    yield chunk, exc
                    return
            return
        sha = self.connection.script_load(script.script.script)  # no NOSCRIPT mid-way
        try:
            conn = pool.get_connection()
        except TypeError:  # redis-py < 5.3 wants a command name
            conn = pool.get_connection("EVALSHA")
        try:
            inflight: deque[list[PreparedJob]] = deque()
            for chunk in chunks:
                try:
                    conn.send_command("EVALSHA", sha, len(keys), *keys, *argv(chunk))
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    yield chunk, exc
                    break
                inflight.append(chunk)
                if len(inflight) >= BULK_INFLIGHT:
                    done = inflight.popleft()
                    try:
                        yield done, conn.read_response()
                    except ResponseError as exc:
                        yield done, exc
                        break
            while inflight:
                done = inflight.popleft()
                try:
                    yield done, conn.read_response()
                except ResponseError as exc:
                    yield done, exc
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            conn.disconnect()
            yield [], exc
        except BaseException:
            conn.disconnect()  # a reply may still be unread: never reuse this connection
            raise
        finally:
            pool.release(conn)

    def _bulk_jobs(self, chunk: list[PreparedJob], reply: replies.EnqueuedMany,
                   emit: bool = True) -> list[Job[Any]]:
        """Jobs of one ``enqueue_many.lua`` reply, built from what was sent (no read
        back), except duplicates, which are fetched in one pipeline. ``emit``: hand
        the "queued" events to the sink (False: the script wrote them)."""
        jobs: list[Job[Any] | None] = []
        dups: list[tuple[int, str]] = []
        for n, (p, placed) in enumerate(zip(chunk, reply.jobs)):
            actual_id = placed.job_id
            if placed.duplicate:
                dups.append((n, actual_id))
                jobs.append(None)
                continue
            job = self._local_job(p, actual_id, placed.status, seq=placed.seq, stamp=reply.now,
                                  sched=placed.scheduled_for)
            if p.batch is not None:
                p.batch._added(1)
            jobs.append(job)
            if not emit:
                continue
            try:
                self._emit("queued", job)
            except Exception as exc:  # noqa: BLE001 - written: observability never fails it
                log.warning("Job %s was enqueued on %s; its 'queued' event was not: %s: %s",
                            actual_id, self.name, type(exc).__name__, exc)
        if dups:
            try:
                pipe = self.connection.pipeline(transaction=False)
                for _, actual_id in dups:
                    pipe.hgetall(self.qkeys.job(actual_id))
                found = pipe.execute()
            except Exception as exc:  # noqa: BLE001 - written: the duplicates as known locally
                log.warning("Duplicates on %s could not be read back: %s", self.name, exc)
                found = [None] * len(dups)
            for (n, actual_id), data in zip(dups, found):
                data = {_text(k): _text(v) for k, v in (data or {}).items()}
                job = Job.from_hash(data) if data else Job(
                    id=actual_id, queue=self.name, func=chunk[n].func,
                    status=reply.jobs[n].status)
                job._queue = self
                job.deduplicated = True
                jobs[n] = job
        return [j for j in jobs if j is not None]

    def _drain_events(self, room: int) -> None:
        """Back-pressure for bulk writes: when the event sink's buffer could not take
        another ``room`` events, wait (up to 10 s) for it to deliver them, rather than
        let it drop "queued" events of the jobs just written."""
        sink = self._events
        if sink in (None, False) or not hasattr(sink, "stats"):
            return
        size = getattr(sink, "buffer_size", None)
        try:
            if size is not None and sink.stats()["buffered"] + room > size:
                sink.flush(10.0)
        except Exception as exc:  # noqa: BLE001 - written already: never fail on events
            log.warning("Event sink of %s not drained: %s", self.name, exc)

    def _local_job(self, p: PreparedJob, job_id: str, status: JobStatus, *, seq: int = 0,
                   stamp: float | None = None, sched: float | None = None) -> Job[Any]:
        """The job as written from ``p``: what ``Job.from_hash`` would read back."""
        f = dict(zip(p.fields[0::2], p.fields[1::2]))
        delay = f.get("retry_delay")
        # decode() makes new lists and dicts: the Job shares nothing with the PreparedJob
        args = (codec.decode(p.encoded_args) if p.encoded_args is not None
                else codec.loads(f["args"]))
        kwargs = (codec.decode(p.encoded_kwargs) if p.encoded_kwargs is not None
                  else codec.loads(f["kwargs"]))
        job: Job[Any] = Job(
            id=job_id, queue=self.name, func=p.func, args=args,
            kwargs=kwargs, priority=p.priority, seq=seq,
            timeout=float(f["timeout"]), status=status, enqueued_at=stamp,
            scheduled_for=sched, max_retries=int(f["max_retries"]),
            retry_delay=float(delay) if delay else None, group=f.get("group"),
            unique_key=f.get("unique_key"), on_failure_url=f.get("on_failure_url"),
            depends_on=json.loads(f["depends_on"]) if "depends_on" in f else None,
            allow_dependency_failure=f.get("allow_dependency_failure") == "1",
            batch=f.get("batch"), traceparent=f.get("traceparent"),
            tracestate=f.get("tracestate"),
        )
        job._queue = self
        return job

    def _check_prepared(self, items: list[Any]) -> None:
        for n, p in enumerate(items):
            if not isinstance(p, PreparedJob):
                raise TypeError(f"item {n}: expected a PreparedJob from Queue.prepare(), "
                                f"got {type(p).__name__}")
            if p.queue != self.name:
                raise ValueError(f"item {n}: prepared for queue {p.queue!r}, not {self.name!r}")
            if p.batch is not None and p.batch.sealed:
                raise RuntimeError(f"item {n}: batch {p.batch.id} is sealed")

    # -- reads -----------------------------------------------------------------

    def fetch_job(self, job_id: str) -> Job[Any] | None:
        """The job, or None when unknown (or expired)."""
        # the queue's client decodes (``decoding``): the reply is text already
        data = cast("dict[str, str]", self.connection.hgetall(self.qkeys.job(job_id)))
        if not data:
            return None
        job: Job[Any] = Job.from_hash(data)
        job._queue = self
        return job

    def _require(self, job_id: str) -> Job[Any]:
        job = self.fetch_job(job_id)
        if job is None:
            raise NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")
        return job

    @property
    def count(self) -> int:
        """Jobs pending (ready to run)."""
        return int(self.connection.zcard(self.qkeys.pending))

    def __len__(self) -> int:
        return self.count

    def job_ids(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[str]:
        """Ids by registry: queued (best first), scheduled (soonest first), started,
        deferred (oldest first), finished/failed/canceled (newest first)."""
        r, k = self.connection, self.qkeys
        stop = max(limit, 1) - 1
        try:
            status = JobStatus(status)
        except ValueError:
            raise ValueError(f"unknown status {status!r}") from None
        if status == JobStatus.QUEUED:
            return texts(r.zrevrange(k.pending, 0, stop))
        if status in DONE_STATUSES:
            return texts(r.zrevrange(k.registry(status), 0, stop))
        return texts(r.zrange(k.registry(status), 0, stop))

    def jobs(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[Job[Any]]:
        ids = self.job_ids(status, limit)
        pipe = self.connection.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.qkeys.job(job_id))
        found = [Job.from_hash(d) for d in pipe.execute() if d]
        for job in found:
            job._queue = self
        return found

    def stats(self) -> dict[str, Any]:
        """Depths of every registry and band, pause state, cap, age of the oldest job."""
        k = self.qkeys
        pipe = self.connection.pipeline(transaction=False)
        pipe.zcard(k.pending)
        for _, low, high in BANDS:
            pipe.zcount(k.pending, *_band_range(low, high))
        for reg in (k.started, k.scheduled, k.failed, k.finished):
            pipe.zcard(reg)
        pipe.exists(k.paused)
        pipe.get(k.max_active)
        pipe.zrange(k.pending, -1, -1)
        pipe.hlen(k.groups)
        pipe.hgetall(k.base + "rate")
        pipe.zcard(k.deferred)
        pipe.zcard(k.base + "batches")
        pipe.hgetall(k.base + "group_rate")
        pipe.hgetall(k.base + "group_rate:held")
        pending, *rest = pipe.execute()
        group_rate = _group_rate_doc(*rest[-2:])
        del rest[-2:]
        bands = dict(zip((b[0] for b in BANDS), rest[:len(BANDS)]))
        open_batches = rest.pop()
        deferred = rest.pop()
        rate = rest.pop()
        started, scheduled, failed, finished, paused, cap, tail, groups = rest[len(BANDS):]
        # the oldest pending job is the one with the lowest seq, not the lowest score:
        # look at the tail of each band and take the oldest enqueued_at.
        oldest_age = None
        if pending:
            heads = [self.connection.zrangebyscore(k.pending, *_band_range(lo, hi), start=0, num=1)
                     for _, lo, hi in BANDS]
            ids = [h[0] for h in heads if h] + list(tail)
            stamps = [float(s) for s in (self.connection.hget(k.job(i), "enqueued_at")
                                         for i in ids) if s]
            if stamps:
                now = self.connection.time()  # not pipelined: a cluster pipeline refuses TIME
                server_now = now[0] + now[1] / 1e6
                oldest_age = max(0.0, server_now - min(stamps))
        return {
            "queue": self.name, "pending": pending, "bands": bands, "started": started,
            "scheduled": scheduled, "failed": failed, "finished": finished,
            "paused": bool(paused), "max_active": int(cap) if cap is not None else None,
            "busy_groups": groups, "oldest_age": oldest_age,
            "rate_limit": _rate_doc(rate), "group_rate_limit": group_rate,
            "deferred": deferred, "open_batches": open_batches,
        }

    # -- admin -----------------------------------------------------------------

    def cancel(self, job_id: str) -> Job[Any]:
        """Cancel a queued or scheduled job (a started job cannot be canceled)."""
        verdict = replies.cancel(self.scripts.cancel(keys=[self.qkeys.base],
                                                     args=[job_id, self.settings.result_ttl]))
        if verdict.outcome == "missing":
            raise NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")
        if verdict.outcome == "refused":
            raise InvalidOperation(f"job {job_id} is {verdict.status}; only queued or scheduled "
                                   "(or deferred) jobs can be canceled")
        job = self._require(job_id)
        self._emit("canceled", job)
        return job

    def delete(self, job_id: str) -> None:
        """Delete a job and every reference to it."""
        before = text_hash(self.connection.hgetall(self.qkeys.job(job_id)))
        verdict = replies.delete(self.scripts.delete(keys=[self.qkeys.base], args=[job_id]))
        if verdict.outcome == "missing":
            raise NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")
        self._emit("deleted", before or {"id": job_id, "queue": self.name})

    def requeue(self, job_id: str) -> Job[Any]:
        """Move a failed job back to its queue (attempts start over)."""
        verdict = replies.requeue(self.scripts.requeue(
            keys=[self.qkeys.base], args=[job_id, "failed", "", self.settings.failed_ttl]))
        if verdict.outcome != "requeued":
            if verdict.missing:
                raise NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")
            raise InvalidOperation(f"cannot requeue {job_id}: {verdict.why}")
        job = self._require(job_id)
        self._emit("requeued", job, reason="manual")
        return job

    def requeue_all_failed(self, progress: Callable[[int], None] | None = None) -> int:
        """Requeue every job in the failed registry; returns how many were requeued."""
        done = 0
        while True:
            ids = self.connection.zrange(self.qkeys.failed, 0, 499)
            if not ids:
                return done
            moved = 0
            for job_id in ids:
                verdict = replies.requeue(self.scripts.requeue(
                    keys=[self.qkeys.base], args=[job_id, "failed", "", self.settings.failed_ttl]))
                if verdict.outcome == "requeued":
                    moved += 1
                    self._emit("requeued", {"id": job_id, "queue": self.name}, reason="manual")
                else:  # a registry entry whose record expired: drop it
                    self.connection.zrem(self.qkeys.failed, text(job_id))
                if progress:
                    progress(1)
            done += moved

    def reprioritize(self, job_id: str, priority: int) -> Job[Any]:
        """Re-score a pending (queued or scheduled) job; refused otherwise."""
        check_priority(priority)
        verdict = replies.reprioritize(
            self.scripts.reprioritize(keys=[self.qkeys.base], args=[job_id, priority]))
        if verdict.outcome == "missing":
            raise NoSuchJob(f"no job {job_id!r} in queue {self.name!r}")
        if verdict.outcome == "refused":
            raise InvalidOperation(f"job {job_id} is {verdict.status}; only a pending job can "
                                   "be reprioritized")
        job = self._require(job_id)
        self._emit("reprioritized", job)
        return job

    def pause(self) -> None:
        """No worker anywhere claims from this queue until :meth:`unpause` (checked in claim)."""
        self.connection.set(self.qkeys.paused, str(time.time()))

    def unpause(self) -> None:
        self.connection.delete(self.qkeys.paused)
        self.connection.publish(self.qkeys.wake, "unpause")

    @property
    def is_paused(self) -> bool:
        return bool(self.connection.exists(self.qkeys.paused))

    def set_max_active(self, limit: int | None) -> None:
        """Cap the jobs running at once from this queue, across all workers (None = no cap)."""
        if limit is None:
            self.connection.delete(self.qkeys.max_active)
            self.connection.publish(self.qkeys.wake, "cap")
            return
        if int(limit) < 0:
            raise ValueError("max_active must be >= 0")
        self.connection.set(self.qkeys.max_active, int(limit))
        self.connection.publish(self.qkeys.wake, "cap")

    @property
    def max_active(self) -> int | None:
        value = self.connection.get(self.qkeys.max_active)
        return int(value) if value is not None else None

    # -- rate limit ------------------------------------------------------------

    def set_rate_limit(self, limit: str | tuple[int, float] | None, *,
                       per_group: bool = False, group: str | None = None) -> None:
        """At most N starts in any window of W seconds, over every worker and host
        (``"10/s"``, ``"600/m"``, ``"1000/h"`` or ``(N, W)``; None removes the limit).

        By default the limit is the queue's. ``per_group=True``: every group of
        the queue (jobs enqueued with ``group=``) gets its own window of that
        size; ``group="G"``: a limit for group G only, in place of the
        per-group one. A start must fit every limit that applies to it. A job
        whose group's window is full waits (status ``scheduled``) until its
        group's next slot while the queue's other jobs go on.

        Enforced inside the claim script with the Redis server's clock (a
        sliding-window log, see docs/design.md).
        """
        if per_group or group is not None:
            self._set_group_rate_limit(limit, per_group, group)
            return
        if limit is None:
            self.connection.delete(self.qkeys.base + "rate", self.qkeys.base + "rate:log")
            self.connection.publish(self.qkeys.wake, "rate")
            return
        count, window = parse_rate(limit) if isinstance(limit, str) else _check_rate(*limit)
        self.connection.hset(self.qkeys.base + "rate",
                             mapping={"limit": count, "window": repr(float(window))})
        # starts already logged stay counted for the new window (a longer one included)
        self.connection.pexpire(self.qkeys.base + "rate:log", int(window * 1000) + 1000)
        self.connection.publish(self.qkeys.wake, "rate")

    def _set_group_rate_limit(self, limit: str | tuple[int, float] | None, per_group: bool,
                              group: str | None) -> None:
        """``fw:{q}:group_rate`` field ``every`` (per_group) or ``group:<G>``: "N W".

        Each group's starts are logged in ``fw:{q}:group_rate:log:<G>``, which
        expires a second after its window: a changed limit counts the starts
        logged under the old one while those live.
        """
        if per_group and group is not None:
            raise ValueError("give per_group=True or group=..., not both")
        if group is not None and (not isinstance(group, str) or not group):
            raise ValueError(f"group must be a non-empty string, got {group!r}")
        field_name = "every" if per_group else f"group:{group}"
        key = self.qkeys.base + "group_rate"
        if limit is None:
            self.connection.hdel(key, field_name)
            if not self.connection.exists(key):  # no group limit left: its totals go too
                self.connection.delete(key + ":held")
        else:
            count, window = parse_rate(limit) if isinstance(limit, str) else _check_rate(*limit)
            self.connection.hset(key, field_name, f"{count} {float(window)!r}")
        self.connection.publish(self.qkeys.wake, "rate")

    @property
    def rate_limit(self) -> dict[str, Any] | None:
        """``{"limit": N, "window": W, "held_seconds": S}`` or None; ``held_seconds``
        is how long, in total, the queue had jobs ready but was held by its limit."""
        return _rate_doc(text_hash(self.connection.hgetall(self.qkeys.base + "rate")))

    @property
    def group_rate_limit(self) -> dict[str, Any] | None:
        """The per-group rate limits, or None without any: ``{"every": {"limit": N,
        "window": W} or None, "groups": {group: {"limit": N, "window": W}},
        "held_seconds": S, "held_jobs": J}``. ``held_jobs`` counts the times a job was
        set aside because its group's window was full, ``held_seconds`` sums how long
        each was set aside for (until its group's next slot)."""
        pipe = self.connection.pipeline(transaction=False)
        pipe.hgetall(self.qkeys.base + "group_rate")
        pipe.hgetall(self.qkeys.base + "group_rate:held")
        return _group_rate_doc(*pipe.execute())

    def empty(self, progress: Callable[[int], None] | None = None) -> int:
        """Delete every pending and scheduled job; returns how many."""
        removed = 0
        for registry in (JobStatus.QUEUED, JobStatus.SCHEDULED):
            while True:
                ids = self.job_ids(registry, 500)
                if not ids:
                    break
                for job_id in ids:
                    self.scripts.delete(keys=[self.qkeys.base], args=[job_id])
                    self._emit("deleted", {"id": job_id, "queue": self.name}, reason="emptied")
                    removed += 1
                    if progress:
                        progress(1)
        return removed

    # -- RQ's names (docs/from-rq.md); thin layers over the methods above --------

    @classmethod
    def all(cls, connection: RedisClient | None = None, *,
            settings: Settings | None = None) -> list[Queue]:
        """Every queue ever enqueued to (``fw:queues``), by name."""
        settings = settings or settings_from_env()
        conn = shared_client(settings.redis_url) if connection is None else connection
        return [cls(n, conn, settings=settings) for n in known_queues(conn, settings.prefix)]

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """Queued ids in the order they will run, ``length`` of them from ``offset``
        (-1: all)."""
        stop = -1 if length < 0 else offset + length - 1
        return texts(self.connection.zrevrange(self.qkeys.pending, offset, stop))

    def get_jobs(self, offset: int = 0, length: int = -1) -> list[Job[Any]]:
        """The queued jobs of :meth:`get_job_ids`."""
        found = (self.fetch_job(i) for i in self.get_job_ids(offset, length))
        return [j for j in found if j is not None]

    def is_empty(self) -> bool:
        """No job is queued (scheduled and deferred ones are not counted)."""
        return self.count == 0

    def get_job_position(self, job: Job[Any] | str) -> int | None:
        """Place of a queued job in the run order (0 runs next), or None."""
        place = self.connection.zrevrank(self.qkeys.pending, job if isinstance(job, str)
                                         else job.id)
        return None if place is None else int(cast("int", place))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Queue):
            return NotImplemented
        return (self.name, self.settings.prefix) == (other.name, other.settings.prefix)

    def __hash__(self) -> int:
        return hash((self.name, self.settings.prefix))

    def registry(self, status: JobStatus | str) -> JobRegistry:
        """The registry object of ``status`` (``"failed"``, ``"started"``, ...)."""
        from .registries import REGISTRIES

        if str(status) not in REGISTRIES:
            raise ValueError(f"no registry for status {status!r}; one of "
                             f"{', '.join(sorted(REGISTRIES))}")
        return REGISTRIES[str(status)](queue=self)

    failed_job_registry = property(lambda self: self.registry("failed"),
                                   doc="The queue's :class:`FailedJobRegistry`.")
    finished_job_registry = property(lambda self: self.registry("finished"),
                                     doc="The queue's :class:`FinishedJobRegistry`.")
    started_job_registry = property(lambda self: self.registry("started"),
                                    doc="The queue's :class:`StartedJobRegistry`.")
    scheduled_job_registry = property(lambda self: self.registry("scheduled"),
                                      doc="The queue's :class:`ScheduledJobRegistry`.")
    deferred_job_registry = property(lambda self: self.registry("deferred"),
                                     doc="The queue's :class:`DeferredJobRegistry`.")
    canceled_job_registry = property(lambda self: self.registry("canceled"),
                                     doc="The queue's :class:`CanceledJobRegistry`.")


def forget_queue(connection: RedisClient, name: str, prefix: str = "fw") -> int:
    """Remove queue ``name``: its registration and every key under ``fw:{name}:``.

    Sequence: pause the queue (no worker claims from it any more), refuse with
    :class:`InvalidOperation` while a job of it runs (``started``; the pause is
    undone unless it was paused before), then SREM the registration and delete the keys
    (job records, registries, cron entries, groups). Each step is idempotent:
    after a crash, calling it again finishes the work. A producer that
    enqueues to ``name`` again afterwards makes a new, empty queue. Returns
    the number of keys deleted. Callers confirm first (the CLI asks, or --yes).
    """
    check_queue_name(name)
    keys = Keys(prefix)
    qkeys = keys.queue(name)
    was_paused = connection.set(qkeys.paused, "1", get=True) is not None
    running = connection.zcard(qkeys.started)
    if running:
        if not was_paused:
            connection.delete(qkeys.paused)
        raise InvalidOperation(f"queue {name!r} has {running} running job(s); pause it "
                               "(`pause`), wait for them to end, and try again")
    connection.srem(keys.queues, name)
    deleted = 0
    batch: list[str] = []
    for key in connection.scan_iter(match=f"{qkeys.base}*", count=1000):
        if (key.decode() if isinstance(key, bytes) else key) == qkeys.paused:
            continue
        batch.append(key)
        if len(batch) >= 500:
            deleted += connection.delete(*batch)
            batch = []
    if batch:
        deleted += connection.delete(*batch)
    deleted += connection.delete(qkeys.paused)
    return deleted


def _same_server(a: Any, b: Any) -> bool:
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


def _is_cluster(connection: RedisClient) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(connection, RedisCluster)


#: seconds per unit of a rate limit ("10/s", "600/m", "1000/h")
RATE_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}


def _check_rate(count: Any, window: Any) -> tuple[int, float]:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"a rate limit allows at least 1 start, got {count!r}")
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not (
            0 < window <= 86400):
        raise ValueError(f"a rate-limit window is 0 < seconds <= 86400, got {window!r}")
    return count, float(window)


def parse_rate(spec: str) -> tuple[int, float]:
    """``"10/s"`` -> ``(10, 1.0)``; also ``/m`` and ``/h``. ValueError on anything else."""
    count, sep, unit = spec.strip().partition("/")
    if not sep or not count.strip().isdigit() or unit.strip() not in RATE_UNITS:
        raise ValueError(f"invalid rate {spec!r}: expected N/s, N/m or N/h (e.g. 10/s)")
    return _check_rate(int(count), RATE_UNITS[unit.strip()])


def _rate_doc(data: dict[str, Any]) -> dict[str, Any] | None:
    data = {_text(k): _text(v) for k, v in (data or {}).items()}
    if "limit" not in data:
        return None
    return {"limit": int(data["limit"]), "window": float(data["window"]),
            "held_seconds": round(float(data.get("held_seconds") or 0.0), 6)}


def _group_rate_doc(limits: dict[str, Any], held: dict[str, Any]) -> dict[str, Any] | None:
    limits = {_text(k): _text(v) for k, v in (limits or {}).items()}
    if not limits:
        return None
    held = {_text(k): _text(v) for k, v in (held or {}).items()}

    def spec(text: str) -> dict[str, Any]:
        count, _, window = text.partition(" ")
        return {"limit": int(count), "window": float(window)}

    return {
        "every": spec(limits["every"]) if "every" in limits else None,
        "groups": {k[len("group:"):]: spec(v) for k, v in sorted(limits.items())
                   if k.startswith("group:")},
        "held_seconds": round(float(held.get("held_seconds") or 0.0), 6),
        "held_jobs": int(held.get("held_jobs") or 0),
    }


def known_queues(connection: RedisClient, prefix: str = "fw") -> list[str]:
    """Every queue ever enqueued to, sorted."""
    return sorted(texts(decoding(connection).smembers(Keys(prefix).queues)))


def find_queue_of(connection: RedisClient, job_id: str, prefix: str = "fw",
                  queue: str | None = None) -> str | None:
    """The queue holding job ``job_id`` (searching every known queue unless given)."""
    connection = decoding(connection)
    names = [queue] if queue else known_queues(connection, prefix)
    keys = Keys(prefix)
    pipe = connection.pipeline(transaction=False)
    for name in names:
        pipe.exists(keys.queue(name).job(job_id))
    for name, found in zip(names, pipe.execute()):
        if found:
            return name
    return None
