"""Writing jobs: prepare (validate and encode), then the single and the bulk writer.

``Queue.enqueue_call`` = :func:`prepare` + :func:`write_one`;
``Queue.prepare`` / ``Queue.enqueue_many`` = :func:`prepare` per job + :func:`write_many`.
Everything is checked in :func:`prepare`, before anything is written; once a
job is written, nothing here raises (a caller retrying on an exception would
enqueue twice): what follows (reading a duplicate, the ``queued`` event) is
logged when it fails.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Protocol

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..exceptions import MetaTooLarge
from . import codec
from . import tracing as _otel
from .catalog import learnt_options, lookup, producer_allowed, registered
from .config import check_value
from .functions import func_ref, takes_job_id, verify
from .job import Job, JobStatus, encode_fields, made_job, safe_text
from .job_habits import META_LIMIT
from .options import JobOptions, seconds_of
from .prepared import PreparedJob, prepared
from .queue_view import QueueView
from .redis_client import is_cluster, text_hash
from .scripts import replies

log = logging.getLogger("fusionworker.queue")

#: Jobs per ``enqueue_many.lua`` call: one atomic step, a few milliseconds of Redis time.
BULK_CHUNK = 500
#: ``enqueue_many.lua`` calls in flight on one connection (single Redis, Sentinel)
BULK_INFLIGHT = 2

#: function references (strings) that passed ``func_ref``'s check in this process
_CHECKED_REFS: set[str] = set()


def at(when: datetime) -> tuple[str, float]:
    """``enqueue_at``'s time: a naive datetime is this process's local time, as RQ's
    (``datetime.now() + timedelta(minutes=5)`` is five minutes from now) and as
    ``datetime.timestamp()`` takes it; an aware one is what it says."""
    if not isinstance(when, datetime):
        raise TypeError(f"enqueue_at takes a datetime, got {when!r}")
    return ("at", when.timestamp())


class QueueParts(QueueView, Protocol):
    """The queue these functions act for: a ``Queue`` (they are its parts, split out of
    queue.py), with the state its methods kept."""

    _events: Any
    _made_defaults: tuple[Any, ...] | None

    def _emit(self, event: str, job: Job[Any]) -> None: ...

    def _script_events(self) -> tuple[list[str], list[Any]] | None: ...


# -- prepare -------------------------------------------------------------------------------

#: the times a job may be scheduled for, in epoch seconds: those a date can say (the
#: years 1 to 9999), as every page, listing and event shows them
EARLIEST, LATEST = -62135596800.0, 253402300799.0


def _check_when(mode: str, value: float) -> None:
    """A delay (``in``) or a time (``at``) whose moment no date can say is refused."""
    moment = time.time() + float(value) if mode == "in" else float(value)
    if not EARLIEST <= moment <= LATEST:
        raise ValueError(f"the {'delay' if mode == 'in' else 'time'} {value!r} puts the job "
                         "past the year 9999 (or before the year 1): no date can say when")


def prepare(q: QueueParts, func: str | Callable[..., Any], args: list[Any] | tuple[Any, ...] | None,
            kwargs: Mapping[str, Any] | None, options: JobOptions,
            when: tuple[str, Any] | None = None) -> PreparedJob:
    """Validate and encode one job for queue ``q``; writes nothing."""
    # a bulk producer calls this per job: the settings' values are read once
    # (defaults), a checked function reference is remembered, and the error
    # texts are made only on failure
    allowed, ref, opts = _checked_job(q, func, options)
    if when is not None:      # enqueue_in(timedelta(...)) as well as seconds
        when = (when[0], seconds_of(when[1], "the delay"))
        if not math.isfinite(float(when[1])):
            raise ValueError(f"the delay or time must be a finite number, got {when[1]!r}")
        _check_when(*when)
    args_enc, kwargs_enc = _encode_arguments(ref, args, kwargs)
    mode, at_time = when or ("now", 0.0)
    deps: tuple[tuple[str, str], ...] = ()
    refs: list[str] = []
    if opts.depends_on is not None:  # waits, deferred, on other jobs (workflows.py)
        deps, refs = _dependencies(q, opts.depends_on, when)
        mode = "deferred"
    opts = _with_callbacks(opts, allowed)
    fields = _fields(q, ref, opts, args_enc, kwargs_enc, refs)
    assert opts.job_id is not None and opts.priority is not None  # checked() fills them
    # enqueue_many.lua's entry; a group is named so that a job without one takes the
    # script's short path (the script reads the group itself from the record)
    entry: list[Any] = [opts.job_id, opts.priority, mode, at_time, opts.unique_key or "",
                        "" if opts.group is None else safe_text(str(opts.group)), fields]
    if refs:
        entry.append(refs)
    return prepared(
        queue=q.name, id=opts.job_id, func=ref, priority=opts.priority, mode=mode,
        when=at_time, unique_key=opts.unique_key or "", fields=fields,
        entry=entry, deps=deps, batch=opts.batch, encoded_args=args_enc,
        encoded_kwargs=kwargs_enc,
    )


def _checked_job(q: QueueParts, func: str | Callable[..., Any],
                 options: JobOptions) -> tuple[tuple[str, ...], str, JobOptions]:
    """``(allowed references, func's checked reference, checked options)``: a registered
    function's own options (@job, register()) are the defaults, however it was named."""
    allowed, default_timeout, default_retries = defaults(q)
    ref = func if func.__class__ is str and func in _CHECKED_REFS else _checked_ref(func)
    verify(ref, allowed)     # imports the function's module when it may
    handle = lookup(ref)
    own = handle.default_options if handle is not None else learnt_options(ref)
    if own:            # (learnt: registered in the worker's other process, imports.py)
        options = options.over(own)
    return allowed, ref, options.checked(default_timeout, default_retries)


def _with_callbacks(opts: JobOptions, allowed: tuple[str, ...]) -> JobOptions:
    """``opts`` with its callbacks as checked, allowed references."""
    if opts.on_success is None and opts.on_failure is None and opts.on_stopped is None:
        return opts
    return opts._replace(on_success=_callback("on_success", opts.on_success, allowed),
                         on_failure=_callback("on_failure", opts.on_failure, allowed),
                         on_stopped=_callback("on_stopped", opts.on_stopped, allowed))


def _callback(option: str, func: Any, allowed: tuple[str, ...]) -> str | None:
    """An ``on_success``/``on_failure`` function as its checked, allowed reference. A
    function that cannot take the one argument it is called with (the job id) is
    refused here, before anything is written, not when it runs: RQ's callbacks take
    ``(job, connection, result)``."""
    if func is None:
        return None
    ref = _checked_ref(func)
    verify(ref, allowed)
    takes_job_id(option, ref, func)
    return ref


def _checked_ref(func: str | Callable[..., Any]) -> str:
    """``func_ref(func)``, remembering checked strings (up to 4096) for the next call."""
    ref = func_ref(func)
    if isinstance(func, str) and len(_CHECKED_REFS) < 4096:
        _CHECKED_REFS.add(ref)
    return ref


def defaults(q: QueueParts) -> tuple[tuple[str, ...], float, int]:
    """(functions a producer may enqueue, default timeout, default max_retries) of
    ``q``, checked once per settings and set of registered functions."""
    found = q._made_defaults
    settings = q.settings
    if found is None or found[0] is not settings or found[1] is not registered():
        refs = registered()
        timeout = check_value("job_timeout", float(settings.job_timeout), "timeout")
        retries = check_value("max_retries", int(settings.max_retries), "max_retries")
        found = q._made_defaults = (settings, refs, producer_allowed(settings), timeout, retries)
    return found[2], found[3], found[4]


def _encode_arguments(ref: str, args: list[Any] | tuple[Any, ...] | None,
                      kwargs: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """The arguments as ``codec.encode`` makes them; UnsupportedType naming the job.

    ``args`` is a list or a tuple (a string would be its characters), ``kwargs`` a
    dict (or another mapping); TypeError otherwise."""
    if args is None:
        args = []
    elif not isinstance(args, (list, tuple)):
        raise TypeError(f"args must be a list or a tuple, got {type(args).__name__} "
                        f"{_short(args)} (one argument: args=[value])")
    if kwargs is None:
        kwargs = {}
    elif kwargs.__class__ is not dict:
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a dict, got {type(kwargs).__name__} "
                            f"{_short(kwargs)}")
        kwargs = dict(kwargs)
    try:
        args_enc = codec.encode(args, "args")
        kwargs_enc = codec.encode(kwargs, "kwargs")
    except codec.UnsupportedType as exc:
        raise type(exc)(f"cannot enqueue {ref}: {exc}") from None
    return args_enc, kwargs_enc


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _dependencies(q: QueueParts, depends_on: Any, when: tuple[str, float] | None,
                  ) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    """``depends_on`` as ``(queue, id)`` pairs and as ``"queue:id"`` refs (workflows.py)."""
    from .workflows import dependency_ref, normalize_dependencies

    if when is not None:
        raise ValueError("depends_on cannot be combined with a delay")
    deps = tuple(normalize_dependencies(q.name, depends_on))
    return deps, [dependency_ref(name, i) for name, i in deps]


#: the options that are record fields only when given (None: not given); a plain job
#: skips encode_fields (one C call tells)
_OPTIONAL = operator.attrgetter(
    "retry_delay", "unique_key", "group", "on_failure_url", "batch", "description",
    "result_ttl", "failure_ttl", "ttl", "retry", "on_success", "on_failure", "retry_on",
    "on_stopped")
_NONE_GIVEN = (None,) * 14


def _fields(q: QueueParts, ref: str, opts: JobOptions, args_enc: Any, kwargs_enc: Any,
            refs: list[str]) -> list[str]:
    """The record's fields, ``[name, value, ...]``, as the enqueue scripts take them."""
    # the always-present fields spelled out: the name, the checked reference, ASCII JSON
    # and numbers need no safe_text
    args_text, kwargs_text = _args_text(q, ref, args_enc, kwargs_enc)
    fields = ["queue", q.name, "func", ref, "args", args_text, "kwargs", kwargs_text,
              "timeout", repr(opts.timeout), "max_retries", str(opts.max_retries)]
    if refs or opts.at_front or _OPTIONAL(opts) != _NONE_GIVEN:
        fields += _optional_fields(opts, refs)
    if opts.meta:    # tagged JSON, as the worker writes it (progress.py)
        fields += ["meta", _meta_text(ref, opts.meta)]
    if _otel.producer is not None:
        fields += _otel.trace_fields()   # the producer's trace context
    return fields


def _args_text(q: QueueParts, ref: str, args_enc: Any, kwargs_enc: Any) -> tuple[str, str]:
    """The arguments' JSON text; TooLarge beyond ``max_args_bytes``."""
    args_text = codec.compact(args_enc)
    kwargs_text = codec.compact(kwargs_enc) if kwargs_enc else "{}"
    limit = q.settings.max_args_bytes
    if limit and len(args_text) + len(kwargs_text) > limit:    # ASCII JSON: chars are bytes
        raise codec.TooLarge(
            f"cannot enqueue {ref}: its arguments are {len(args_text) + len(kwargs_text)} "
            f"bytes of JSON, more than max_args_bytes ({limit}; "
            "FUSIONWORKER_MAX_ARGS_BYTES): pass a reference (a key, a path) instead")
    return args_text, kwargs_text


def _meta_text(ref: str, meta: dict[str, Any]) -> str:
    """The meta's tagged JSON; MetaTooLarge beyond the limit a job's own meta has."""
    text = codec.compact(codec.encode(meta, "meta"))
    if len(text.encode("utf-8")) > META_LIMIT:
        raise MetaTooLarge(
            f"cannot enqueue {ref}: its meta is {len(text.encode('utf-8'))} bytes of JSON, "
            f"more than the {META_LIMIT} a job's meta may hold: store a reference instead")
    return text


def _optional_fields(opts: JobOptions, refs: list[str]) -> list[str]:
    """The fields of the options given (encode_fields skips None)."""
    return encode_fields(
        retry_delay=opts.retry_delay, unique_key=opts.unique_key, group=opts.group,
        on_failure_url=opts.on_failure_url, depends_on=refs or None,
        allow_dependency_failure="1" if refs and opts.allow_dependency_failure else None,
        batch=opts.batch.ref if opts.batch is not None else None,
        description=opts.description, result_ttl=opts.result_ttl,
        failure_ttl=opts.failure_ttl,
        ttl=opts.ttl if isinstance(opts.ttl, float) and opts.ttl > 0 else None,
        at_front="1" if opts.at_front else None,
        retry_intervals=list(opts.retry) if opts.retry is not None else None,
        on_success=opts.on_success, on_failure=opts.on_failure,
        retry_on=list(opts.retry_on) if opts.retry_on is not None else None,
        on_stopped=opts.on_stopped,
    )


def check_prepared(q: QueueParts, items: list[Any]) -> None:
    for n, p in enumerate(items):
        if not isinstance(p, PreparedJob):
            raise TypeError(f"item {n}: expected a PreparedJob from Queue.prepare(), "
                            f"got {type(p).__name__}")
        if p.queue != q.name:
            raise ValueError(f"item {n}: prepared for queue {p.queue!r}, not {q.name!r}")
        if p.batch is not None and p.batch.sealed:
            raise RuntimeError(f"item {n}: batch {p.batch.id} is sealed")


def local_job(q: QueueParts, p: PreparedJob, job_id: str, status: JobStatus, *, seq: int = 0,
              stamp: float | None = None, sched: float | None = None) -> Job[Any]:
    """The job as written from ``p``: what ``Job.from_hash`` would read back."""
    f = dict(zip(p.fields[0::2], p.fields[1::2]))
    delay = f.get("retry_delay")
    # decode() makes new lists and dicts: the Job shares nothing with the PreparedJob
    args = (codec.decode(p.encoded_args) if p.encoded_args is not None
            else codec.loads(f["args"]))
    kwargs = (codec.decode(p.encoded_kwargs) if p.encoded_kwargs is not None
              else codec.loads(f["kwargs"]))
    return made_job({
        "id": job_id, "queue": q.name, "func": p.func, "args": args, "kwargs": kwargs,
        "priority": p.priority, "seq": seq, "timeout": float(f["timeout"]), "status": status,
        "enqueued_at": stamp, "scheduled_for": sched,
        "max_retries": int(f["max_retries"]), "retry_delay": float(delay) if delay else None,
        "group": f.get("group"), "unique_key": f.get("unique_key"),
        "on_failure_url": f.get("on_failure_url"),
        "depends_on": json.loads(f["depends_on"]) if "depends_on" in f else None,
        "allow_dependency_failure": f.get("allow_dependency_failure") == "1",
        "batch": f.get("batch"), "traceparent": f.get("traceparent"),
        "tracestate": f.get("tracestate"), "_description": f.get("description"),
        "meta": codec.loads(f["meta"]) if "meta" in f else {},
        "result_ttl": int(f["result_ttl"]) if "result_ttl" in f else None,
        "failure_ttl": int(f["failure_ttl"]) if "failure_ttl" in f else None,
        "ttl": float(f["ttl"]) if "ttl" in f else None,
        "retry_intervals": json.loads(f["retry_intervals"]) if "retry_intervals" in f else None,
        "on_success": f.get("on_success"), "on_failure": f.get("on_failure"),
        "retry_on": json.loads(f["retry_on"]) if "retry_on" in f else None,
        "on_stopped": f.get("on_stopped"), "_queue": q})


# -- the single writer ---------------------------------------------------------------------

def write_one(q: QueueParts, prepared: PreparedJob) -> Job[Any]:
    """Write one prepared job (``enqueue.lua``); the job, or the live duplicate."""
    check_prepared(q, [prepared])
    if prepared.deps:  # the dependency steps of workflows.py, through enqueue_many
        return write_many(q, [prepared])[0]
    p = prepared
    # registration (fw:queues, which the reaper, info and health walk) happens inside
    # enqueue.lua, so it survives a data loss (FLUSHALL, a restart without persistence);
    # on a Cluster the set is on another slot: SADD first (an unregistered job is lost)
    cluster = is_cluster(q.connection)
    if cluster:
        q.connection.sadd(q.keys.queues, q.name)
    # a stream: the script writes the "queued" event, never after a worker's "processing"
    stream = q._script_events() or ([], ["", ""])    # none: the producer's sink does
    keys = [q.qkeys.base] if cluster else [q.qkeys.base, q.keys.queues, *stream[0]]
    try:
        placed = replies.enqueue(q.scripts.enqueue(keys=keys, args=[
            p.id, p.priority, p.mode, p.when, p.unique_key, q.settings.dedup_window,
            *stream[1][:2], *p.fields]))
    except ResponseError as exc:
        raise refusal(exc) from None
    actual_id = placed.job_id
    # written: from here on nothing may raise
    job: Job[Any] | None = None
    if placed.duplicate:     # the live job it matched, someone else's: read it
        try:
            job = q.fetch_job(actual_id)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("Job %s is a duplicate on %s but could not be read: %s",
                        actual_id, q.name, exc)
    if job is None:  # new (built from what was sent and the script's answer: no read),
        # or a duplicate gone meanwhile (result_ttl=0) or unreadable
        job = local_job(q, p, actual_id, placed.status, seq=placed.seq,
                        stamp=placed.enqueued_at, sched=placed.scheduled_for)
    job.deduplicated = placed.duplicate
    if p.batch is not None and not job.deduplicated:
        p.batch._added(1)
    if job.deduplicated:
        log.info("Skipped duplicate of job %s on %s (%s, status %s)",
                 actual_id, q.name, p.func, placed.status)
    elif not stream[0]:
        _emit_queued(q, job)
    return job


#: the start of the scripts' refusal while ``forget_queue`` deletes the queue
QUEUE_GONE = "QUEUEGONE "


def refusal(exc: ResponseError) -> Exception:
    """The exception a producer gets for a script's refusal: :class:`InvalidOperation`
    for a queue being deleted (``_lib.lua``'s ``forgetting``), else ``exc``."""
    from ..exceptions import InvalidOperation

    said = str(exc)
    return InvalidOperation(said[len(QUEUE_GONE):]) if said.startswith(QUEUE_GONE) else exc


def _emit_queued(q: QueueParts, job: Job[Any]) -> None:
    try:
        q._emit("queued", job)
    except Exception as exc:  # noqa: BLE001 - written: observability never fails it
        log.warning("Job %s was enqueued on %s; its 'queued' event was not: %s: %s",
                    job.id, q.name, type(exc).__name__, exc)


# -- the bulk writer -----------------------------------------------------------------------

def write_many(q: QueueParts, prepared: Iterable[PreparedJob], chunk_size: int = BULK_CHUNK,
               progress: Callable[[int], None] | None = None) -> list[Job[Any]]:
    """``Queue.enqueue_many`` (its docstring says what this promises)."""
    from ..exceptions import PartialEnqueue

    items = list(prepared)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    check_prepared(q, items)
    if not items:
        return []
    waiting = _register_waiting(q, items)
    q._register()
    out, error = _write_chunks(q, items, chunk_size, progress)
    if error is not None:
        if isinstance(error, ResponseError):
            error = refusal(error)
        if out:
            raise PartialEnqueue(out, error) from error
        raise error
    if waiting:
        _recheck_waiting(q, waiting, out)
    return out


def _register_waiting(q: QueueParts, items: list[PreparedJob]) -> list[PreparedJob]:
    """workflows.py steps 1 (read: all exist) and 2 (register on theirs) for the jobs
    of ``items`` that wait on others; those jobs."""
    waiting = [p for p in items if p.deps]
    if waiting:
        from .workflows import check_dependencies_exist, register

        check_dependencies_exist(q.connection, q.settings.prefix,
                                 sorted({d for p in waiting for d in p.deps}))
        for p in waiting:
            register(q, list(p.deps), p.id)
    return waiting


def _write_chunks(q: QueueParts, items: list[PreparedJob], chunk_size: int,
                  progress: Callable[[int], None] | None,
                  ) -> tuple[list[Job[Any]], Exception | None]:
    """The jobs written, chunk by chunk, and the first error (no chunk sent after it)."""
    chunks = [items[i:i + chunk_size] for i in range(0, len(items), chunk_size)]
    stream = q._script_events()
    out: list[Job[Any]] = []
    error: Exception | None = None
    for chunk, reply in chunk_replies(q, chunks, stream):
        if isinstance(reply, Exception):
            error = error or reply
            continue
        out += bulk_jobs(q, chunk, replies.enqueue_many(reply), emit=stream is None)
        if stream is None:
            _drain_events(q, chunk_size)
        if progress:
            progress(len(chunk))
    return out, error


def _recheck_waiting(q: QueueParts, waiting: list[PreparedJob], out: list[Job[Any]]) -> None:
    """workflows.py step 4: dependencies that ended meanwhile (``out`` updated in place)."""
    from .workflows import recheck

    by_id = {p.id: p for p in waiting}
    for n, job in enumerate(out):
        prep = by_id.get(job.id)
        if (prep is not None and job.status == JobStatus.DEFERRED
                and not job.deduplicated and recheck(q, job.id, prep.deps)):
            out[n] = q.fetch_job(job.id) or job


def chunk_replies(q: QueueParts, chunks: list[list[PreparedJob]],
                  stream: tuple[list[str], list[Any]] | None = None,
                  ) -> Iterator[tuple[list[PreparedJob], Any]]:
    """``(chunk, reply or exception)`` of each chunk sent, in order.

    On a client with a connection pool (single Redis, Sentinel) up to
    :data:`BULK_INFLIGHT` chunks are in flight on one connection; a Cluster
    client sends one at a time. After an error no further chunk is sent (the
    ones in flight are still read). ``stream``: see ``Queue._script_events``.
    """
    script = q.scripts.enqueue_many
    keys = [q.qkeys.base] + (stream[0] if stream else [])
    extra = stream[1] if stream else []
    window = q.settings.dedup_window

    def argv(chunk: list[PreparedJob]) -> list[Any]:
        return [window, "[" + ",".join([p.payload for p in chunk]) + "]", *extra]

    pool = getattr(q.connection, "connection_pool", None)
    if pool is None:  # Redis Cluster: one script call per chunk
        for chunk in chunks:
            try:
                yield chunk, script(keys=keys, args=argv(chunk))
            except Exception as exc:  # noqa: BLE001 - handed to the caller
                yield chunk, exc
                return
        return
    sha = q.connection.script_load(script.script.script)  # no NOSCRIPT mid-way
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name
        conn = pool.get_connection("EVALSHA")
    try:
        yield from _pipelined(conn, [sha, len(keys), *keys], argv, chunks)
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        conn.disconnect()
        yield [], exc
    except BaseException:
        conn.disconnect()  # a reply may still be unread: never reuse this connection
        raise
    finally:
        pool.release(conn)


def _pipelined(conn: Any, head: list[Any], argv: Callable[[list[PreparedJob]], list[Any]],
               chunks: list[list[PreparedJob]]) -> Iterator[tuple[list[PreparedJob], Any]]:
    """``EVALSHA head... argv(chunk)`` per chunk on ``conn``, :data:`BULK_INFLIGHT` in flight."""
    inflight: deque[list[PreparedJob]] = deque()
    for chunk in chunks:
        try:
            conn.send_command("EVALSHA", *head, *argv(chunk))
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


def bulk_jobs(q: QueueParts, chunk: list[PreparedJob], reply: replies.EnqueuedMany,
              emit: bool = True) -> list[Job[Any]]:
    """Jobs of one ``enqueue_many.lua`` reply, built from what was sent (no read
    back), except duplicates, which are fetched in one pipeline. ``emit``: hand
    the "queued" events to the sink (False: the script wrote them)."""
    jobs: list[Job[Any] | None] = []
    dups: list[tuple[int, str]] = []
    for n, (p, placed) in enumerate(zip(chunk, reply.jobs)):
        if placed.duplicate:
            dups.append((n, placed.job_id))
            jobs.append(None)
            continue
        job = local_job(q, p, placed.job_id, placed.status, seq=placed.seq, stamp=reply.now,
                        sched=placed.scheduled_for)
        if p.batch is not None:
            p.batch._added(1)
        jobs.append(job)
        if emit:
            _emit_queued(q, job)
    if dups:
        _read_duplicates(q, chunk, reply, dups, jobs)
    return [j for j in jobs if j is not None]


def _read_duplicates(q: QueueParts, chunk: list[PreparedJob], reply: replies.EnqueuedMany,
                     dups: list[tuple[int, str]], jobs: list[Job[Any] | None]) -> None:
    """Fill ``jobs[n]`` with the live duplicate of each ``(n, id)`` (one pipeline)."""
    try:
        pipe = q.connection.pipeline(transaction=False)
        for _, actual_id in dups:
            pipe.hgetall(q.qkeys.job(actual_id))
        found = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - written: the duplicates as known locally
        log.warning("Duplicates on %s could not be read back: %s", q.name, exc)
        found = [None] * len(dups)
    for (n, actual_id), data in zip(dups, found):
        data = text_hash(data or {})
        job: Job[Any] = Job.from_hash(data) if data else Job(
            id=actual_id, queue=q.name, func=chunk[n].func, status=reply.jobs[n].status)
        job._queue = q
        job.deduplicated = True
        jobs[n] = job


def _drain_events(q: QueueParts, room: int) -> None:
    """Back-pressure for bulk writes: when the event sink's buffer could not take
    another ``room`` events, wait (up to 10 s) for it to deliver them, rather than
    let it drop "queued" events of the jobs just written."""
    sink = q._events
    if sink in (None, False) or not hasattr(sink, "stats"):
        return
    size = getattr(sink, "buffer_size", None)
    try:
        if size is not None and sink.stats()["buffered"] + room > size:
            sink.flush(10.0)
    except Exception as exc:  # noqa: BLE001 - written already: never fail on events
        log.warning("Event sink of %s not drained: %s", q.name, exc)
