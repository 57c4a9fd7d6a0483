"""The job record (one Redis HASH ``fw:{queue}:job:<id>``).

Its vocabulary (:class:`JobStatus`, :class:`FailureReason`, :class:`WorkerState`)
is in ``vocabulary.py`` and importable from here.

The record: one Redis HASH ``fw:{queue}:job:<id>``, JSON values, no pickle. Its
schema is ``record.py`` (``JobRecord``, ``HASH_ONLY``); this table says what each
field means (``tests/core/test_record.py`` keeps the two the same).

Hash fields (all strings in Redis):

==================  ==========================================================
``id``              job id (uuid4 hex unless the producer chose one)
``queue``           queue name
``func``            ``module:function``
``args``            JSON list (tagged JSON, see ``codec.py``)
``kwargs``          JSON object (tagged JSON)
``priority``        integer in [-1023, 1023], higher runs first
``seq``             per-queue enqueue sequence number (FIFO inside a priority)
``timeout``         hard time limit, seconds
``status``          a :class:`JobStatus` value
``enqueued_at``     server time (epoch seconds) of enqueue
``scheduled_for``   when a delayed job or a retry becomes due
``started_at``      server time of the last claim
``ended_at``        server time of the last outcome
``attempts``        how many times the job was claimed
``shared_deaths``   how many times a process its horse shared with other jobs (the fork
                    server, the worker) died under it: given back uncounted until 3 (optional)
``worker_deaths``   of those, the worker's: the job then runs alone in a worker (optional)
``alone``           the attempt token of such a run: that worker's death is the job's
``max_retries``     retries allowed on retryable errors
``retry_delay``     first backoff delay of this job (optional)
``result``          tagged JSON of the return value (finished jobs)
``error_type``      exception class (or ``Timeout``, ``Segfault``, ...)
``error_message``   one line
``traceback``       the horse's traceback
``failure_reason``  a :class:`FailureReason` value
``not_retried``     why the last failure was the end (no retry), in words
``worker``          name of the worker that ran the last attempt
``token``           attempt token: fences a late outcome of an older attempt
``group``           serialization group (optional)
``unique_key``      dedup key (optional)
``on_failure_url``  webhook POSTed after a final failure (optional)
``duration``        seconds the last attempt ran
``cron``            name of the cron entry that enqueued the job (optional)
``cron_due``        the due time of that cron run (optional)
``traceparent``     W3C trace context of the enqueue (OpenTelemetry, optional)
``tracestate``      W3C trace state of the enqueue (OpenTelemetry, optional)
``depends_on``      JSON list of ``"queue:job_id"`` this job waits on (optional)
``allow_dependency_failure``  ``1``: run even if a dependency failed (optional)
``has_dependents``  ``1`` once a job waits on this one (optional)
``waited``          ``1`` once a ``Job.wait`` subscribed to its outcome (waiting.lua):
                    finish.lua publishes ``done:<id>`` only then (optional)
``batch``           ``queue:batch_id`` of its batch (optional; see ``batch.py``)
``progress``        fraction in [0, 1] the job last reported (``current_job().set_progress``;
                    written by the worker parent, see ``progress.py``; optional)
``progress_message``  the message that came with it (optional)
``progress_at``     epoch seconds (the horse's clock) the job reported it (optional)
``meta``            tagged-JSON object the job keeps in ``current_job().meta`` (optional;
                    kept across attempts: the next attempt starts from it)
``progress_writes`` how many rate-limited progress/meta writes the worker made
``description``     what the producer said the job is (optional; :attr:`Job.description`)
``result_ttl``      seconds this job is kept once finished: 0 none, -1 forever (optional;
                    default the worker's FUSIONWORKER_RESULT_TTL)
``failure_ttl``     seconds this job is kept once failed, -1 forever (optional; default
                    FUSIONWORKER_FAILED_TTL)
``at_front``        ``1``: place it ahead of its priority's pending jobs when it becomes
                    ready (optional; used once: push_pending drops it and writes ``seq``,
                    which may then be zero or negative)
``retry_intervals`` JSON list of seconds: the delay before retry n is item n-1, the last
                    repeating (``retry=Retry(max=, interval=)``; optional)
``on_success``      ``module:function`` enqueued with this job's id once it finished
                    (optional; through the outbox, see workflows.py)
``on_failure``      the same once it failed for good (optional)
``on_stopped``      the same once it was stopped (``job stop``; optional)
``requeues``        times requeued from the failed registry (each life's callbacks run)
``stop_requested``  server time a stop was asked (stop.lua; the worker kills the horse)
``retry_on``        JSON list of the exception classes retried instead of the worker's
                    FUSIONWORKER_RETRYABLE (``"module.Class"``, ``"*"``: any; optional)
``ttl``             seconds the job may wait to be started, from ``enqueued_at`` or, when
                    later, ``scheduled_for`` (optional; then claim.lua cancels it, reason
                    ``expired``)
``held_from``       the queue a held job came from (hold/release; optional)
``held_score``      its score there (optional)
``held_at``         when it was held (optional)
==================  ==========================================================

The pending ZSET's score is ``priority * 2**42 - seq`` (invariant 4; ``at_front``
takes a seq below the first pending job's): docs/design.md, "Score encoding".
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ..exceptions import JobCanceled, JobFailed, JobWaitTimeout, NoSuchJob, PriorityOutOfRange
from . import codec
from .base_error import FusionWorkerError
from .config import settings_from_env
from .job_habits import DONE_STATUSES as DONE_STATUSES
from .job_habits import JobHabits
from .job_habits import JobResult as JobResult
from .queue_port import queue_class
from .record import JobRecord, read_fields, to_dict

# the vocabulary's home is vocabulary.py; these names stay importable from here
from .vocabulary import FailureReason as FailureReason
from .vocabulary import JobStatus as JobStatus
from .vocabulary import WorkerState as WorkerState
from .vocabulary import _Vocabulary as _Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .redis_client import RedisClient

R = TypeVar("R")

PRIORITY_MIN = -1023
PRIORITY_MAX = 1023
SEQ_LIMIT = 2**42



STATUSES = tuple(JobStatus)
LIVE_STATUSES = (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.STARTED)
#: every worker state, for gauges and listings
STATES = tuple(WorkerState)


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PriorityOutOfRange(f"priority must be an integer, got {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise PriorityOutOfRange(
            f"priority {priority} out of range [{PRIORITY_MIN}, {PRIORITY_MAX}]"
        )
    return priority


def score(priority: int, seq: int) -> int:
    """The pending-ZSET score of a job (see the module docstring)."""
    return priority * SEQ_LIMIT - seq


#: bits of a random 128-bit number kept / set to make it a version-4 UUID (RFC 4122)
_UUID4_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_job_id() -> str:
    """32 hex digits of a random version-4 UUID: ``uuid.uuid4().hex`` without the
    ``UUID`` object (half the cost; a bulk producer makes one per job)."""
    return f"{int.from_bytes(os.urandom(16), 'big') & _UUID4_KEEP | _UUID4_SET:032x}"


def _confirmed(pubsub: Any, remaining: Callable[[], float | None], limited: bool) -> None:
    """Wait for the subscription's confirmation (from then on every outcome reaches us),
    or for the time left to run out."""
    while True:
        msg = pubsub.get_message(timeout=remaining() if limited else 1.0)
        if msg is not None and msg.get("type") == "subscribe":
            return
        if limited and remaining() == 0:
            return


def _next_message(pubsub: Any, left: float | None, marked: bool, limited: bool) -> None:
    """Wait for a message on the job's channel: up to ``left`` seconds, at most 1 s when
    the record is not marked (no message may come); without a limit, in 60 s reads."""
    while True:
        wait = left if left is not None else 60.0
        msg = pubsub.get_message(timeout=wait if marked else min(wait, 1.0))
        if msg is not None or limited or not marked:
            return


class MalformedJob(FusionWorkerError, ValueError):
    """The job hash cannot be turned into a runnable job (bad JSON, missing field)."""


@dataclass(repr=False)
class Job(JobRecord[R], JobHabits):
    """A job as read from Redis: its record (:class:`~.record.JobRecord`, the fields)
    and the I/O on it; RQ's names are :class:`~.job_habits.JobHabits`.

    ``Job[R]``: ``result`` is what the function (returning ``R``) returned,
    once ``status == JobStatus.FINISHED``. A job got from a ``Queue`` (``enqueue``,
    ``fetch_job``) can :meth:`refresh` and :meth:`wait`.
    """

    #: set by ``Queue.enqueue`` when the job was not enqueued because a live duplicate exists
    deduplicated: bool = False
    #: the Queue this job was read through (refresh/wait use its connection)
    _queue: Any = field(default=None, repr=False, compare=False)

    @property  # type: ignore[misc]
    def result(self) -> R | None:
        """What the function returned. As RQ's ``job.result``, a job got from a ``Queue``
        that has not ended yet is read again first (one ``HGETALL``), so a job kept from
        ``enqueue`` shows its result once it finished; an ended job (or one built by
        hand) answers from what was read."""
        self._read_unless_ended()
        value: R | None = self.__dict__.get("result")
        return value

    @result.setter
    def result(self, value: R | None) -> None:
        self.__dict__["result"] = value

    @property
    def error(self) -> str | None:
        """``"Type: message"`` of the last failure, or None."""
        if not self.error_type:
            return None
        return f"{self.error_type}: {self.error_message}" if self.error_message else self.error_type

    @property
    def wait_time(self) -> float | None:
        """Seconds between enqueue (or becoming due) and the last start."""
        if self.started_at is None or self.enqueued_at is None:
            return None
        since = self.enqueued_at
        if self.scheduled_for is not None and self.scheduled_for > since:
            since = self.scheduled_for
        return max(0.0, self.started_at - since)

    # -- reading a job by its id (RQ's names) ---------------------------------------

    @classmethod
    def fetch(cls, job_id: str, connection: RedisClient | None = None, *,
              queue: str | None = None, settings: Settings | None = None) -> Job[Any]:
        """The job ``job_id`` of any queue (RQ's ``Job.fetch(id, connection=...)``).

        ``queue`` saves the search over the known queues. Raises
        :class:`~fusionworker.exceptions.NoSuchJob` when no queue holds it.
        """
        from .queue_names import find_queue_of  # redis: not loaded with a job's module

        queue_type = queue_class()
        settings = settings or settings_from_env()
        probe = queue_type(queue or "default", connection, settings=settings)
        name = find_queue_of(probe.connection, job_id, settings.prefix, queue)
        if name is None:
            raise NoSuchJob(f"no job {job_id!r} in any queue")
        found: Job[Any] | None = queue_type(name, probe.connection,
                                            settings=settings).fetch_job(job_id)
        if found is None:          # deleted between the search and the read
            raise NoSuchJob(f"no job {job_id!r} in queue {name!r}")
        return found

    @classmethod
    def fetch_many(cls, job_ids: list[str], connection: RedisClient | None = None, *,
                   settings: Settings | None = None) -> list[Job[Any] | None]:
        """The jobs of ``job_ids``, None for each one no queue holds (RQ's name)."""
        out: list[Job[Any] | None] = []
        for job_id in job_ids:
            try:
                out.append(cls.fetch(job_id, connection, settings=settings))
            except NoSuchJob:
                out.append(None)
        return out

    @classmethod
    def exists(cls, job_id: str, connection: RedisClient | None = None, *,
               settings: Settings | None = None) -> bool:
        """Whether some queue holds job ``job_id``."""
        try:
            cls.fetch(job_id, connection, settings=settings)
        except NoSuchJob:
            return False
        return True

    def fetch_dependencies(self) -> list[Job[Any]]:
        """The jobs this one waits on, read now (those still in Redis; RQ's name)."""
        q = self._queue_for("fetch_dependencies")
        queue_type = queue_class()
        found: list[Job[Any]] = []
        for ref in self.depends_on or []:
            queue, _, job_id = ref.partition(":")
            job = queue_type(queue, q.connection, settings=q.settings).fetch_job(job_id)
            if job is not None:
                found.append(job)
        return found

    # -- seeing it change --------------------------------------------------------

    def _require_queue(self) -> Any:
        if self._queue is None:
            raise ValueError("this Job was not read through a Queue: use queue.fetch_job(id)")
        return self._queue

    def refresh(self) -> Self:
        """Read the job again from Redis (in place; returns self). One ``HGETALL``.

        Raises :class:`~fusionworker.exceptions.NoSuchJob` if it is gone (deleted,
        expired, or finished with ``result_ttl=0``).
        """
        q = self._require_queue()
        return self._update(q, q.connection.hgetall(q.qkeys.job(self.id)))

    def _update(self, q: Any, data: dict[str, str]) -> Self:
        """Take what ``data`` (the record as ``HGETALL`` reads it) says, in place."""
        if not data:
            kept = ("" if self.result_ttl != 0 else ": its result_ttl is 0 (Celery's "
                    "ignore_result=True), so it is not kept once it ended; give it a "
                    "result_ttl to read its outcome")
            raise NoSuchJob(f"job {self.id!r} of queue {q.name!r} no longer exists{kept}")
        fresh = Job.from_hash(data)
        for f in dataclasses.fields(self):
            if f.name not in ("deduplicated", "_queue"):
                setattr(self, f.name, getattr(fresh, f.name))
        return self

    def _read_waited(self, q: Any) -> bool:
        """Mark the record ``waited`` and read it, in one step (waiting.lua): finish.lua
        publishes the outcome of a marked job only. False: Redis refused the mark (out
        of memory, a read-only replica), so no message may come: read again on a timer."""
        from .scripts import replies

        read = replies.waiting(q.scripts.waiting(keys=[q.qkeys.base], args=[self.id]))
        self._update(q, read.data)
        return read.marked

    def wait(self, timeout: float | None = None) -> Self:
        """Block until the job is finished, failed or canceled; return it (refreshed).

        Raises :class:`~fusionworker.exceptions.JobFailed` (reason, error type,
        message and traceback on it) for a failed job,
        :class:`~fusionworker.exceptions.JobCanceled` for a canceled one, and
        :class:`~fusionworker.exceptions.JobWaitTimeout` when ``timeout``
        seconds pass first (the job itself goes on). A retry in between is
        not an end: waiting goes on through it.

        No polling: it subscribes to the job's channel ``fw:{q}:done:<id>``,
        then marks the job's record ``waited`` and reads it in one step
        (waiting.lua: an outcome recorded before that step is in what it reads;
        finish.lua publishes the outcome of a marked job, and cancel, delete and
        failures always publish), and reads again only when a message arrives
        (after a reconnection too: the subscription's confirmation comes again).
        Cost when the job is done already: one pub/sub connection from the pool,
        SUBSCRIBE, one script call that only reads.
        """
        from .redis_client import new_pubsub_connection

        q = self._require_queue()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)

        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        pubsub = new_pubsub_connection(q.connection)
        try:
            pubsub.subscribe(q.qkeys.done(self.id))
            _confirmed(pubsub, remaining, deadline is not None)
            while True:
                marked = self._read_waited(q)
                if self.status in DONE_STATUSES:
                    break
                left = remaining()
                if left == 0:
                    raise JobWaitTimeout(
                        f"job {self.id} ({self.func}) is still {self.status} after "
                        f"waiting {timeout:g} s", job=self)
                _next_message(pubsub, left, marked, deadline is not None)
        finally:
            pubsub.close()
        if self.status in (JobStatus.FAILED, JobStatus.STOPPED):
            raise JobFailed(self)
        if self.status == JobStatus.CANCELED:
            raise JobCanceled(self)
        return self

    @classmethod
    def from_hash(cls, data: dict[str, str], *, strict: bool = False) -> Job[Any]:
        """Build from ``HGETALL``. ``strict``: raise :class:`MalformedJob` on arguments
        that cannot be read (``codec.loads``: bad JSON, too deep, a bad tag) or no
        ``func``. Not strict, reading never fails: what cannot be read is left empty
        (listings show such a record; its ``args``/``kwargs`` are ``[]``/``{}``)."""
        args_raw, kwargs_raw = data.get("args", "[]"), data.get("kwargs", "{}")
        try:
            args = codec.loads(args_raw) if args_raw else []
            kwargs = codec.loads(kwargs_raw) if kwargs_raw else {}
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise MalformedJob("args must be a JSON list and kwargs a JSON object")
        except (ValueError, TypeError) as exc:
            if strict:
                raise MalformedJob(f"job payload is not valid JSON: {exc}") from None
            args, kwargs = [], {}
        if strict and not data.get("func"):
            raise MalformedJob("job record has no 'func'")
        result_raw = data.get("result")
        try:
            result = codec.loads(result_raw) if result_raw else None
        except (ValueError, TypeError):
            result = result_raw
        fields = read_fields(data, {"args": args, "kwargs": kwargs, "result": result})
        return made_job(fields) if cls is Job else cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view (CLI ``--json``, events): the record's ``api`` fields."""
        return to_dict(self)


#: every field of a :class:`Job` at its default, in the dataclass's order (``None`` for
#: the three made by a factory: :func:`made_job` makes them anew)
_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(Job)}
_FACTORIES: tuple[tuple[str, Callable[[], Any]], ...] = tuple(
    (f.name, f.default_factory) for f in dataclasses.fields(Job)
    if f.default_factory is not dataclasses.MISSING)
_new = object.__new__


def made_job(given: dict[str, Any]) -> Job[Any]:
    """``Job(**given)``, the same object (every field in its instance dict, in the
    dataclass's order) at a third of the cost: the defaults copied in one step, then
    ``given``, where the dataclass's ``__init__`` takes and stores its 52 fields one by
    one. On every job's path: an enqueue, each claim of the worker, each job of a horse.
    ``args``, ``kwargs`` and ``meta`` are made anew when not given. ``given`` names
    fields of :class:`Job` only, ``id``, ``queue`` and ``func`` among them (the callers'
    own literals and :func:`~.record.read_fields`; no check is made)."""
    job: Job[Any] = _new(Job)
    fields = job.__dict__
    fields.update(_DEFAULTS)
    fields.update(given)
    for name, factory in _FACTORIES:
        if name not in given:
            fields[name] = factory()
    return job


def safe_text(value: str) -> str:
    """``value`` as text every encoder takes (Redis, JSON, logs, webhooks).

    A lone surrogate (``"caf\\udce9"``, common in text built from undecodable
    file names) cannot be encoded as UTF-8: redis-py, a log handler or a
    webhook body would raise. It becomes the escape ``\\udce9`` instead, so
    the text stays readable and the information is kept.
    """
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def encode_fields(**fields: Any) -> list[str]:
    """Flatten ``name=value`` pairs into ``[name, value, ...]`` strings for a script.

    ``None`` values are skipped; lists/dicts are JSON; text is made encodable
    (:func:`safe_text`).
    """
    out: list[str] = []
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, (list, dict)):
            value = json.dumps(value, separators=(",", ":"))
        elif isinstance(value, float):
            value = repr(value)
        out.extend((name, safe_text(str(value))))
    return out
