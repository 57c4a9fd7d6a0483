"""The whole Redis key schema, in one place.

Per-queue keys share the queue's hash tag, ``{prefix}:{<queue>}:…``, so that
every Lua script touches one Redis Cluster slot only:

=============================  =======  ==============================================
key                            type     meaning
=============================  =======  ==============================================
``fw:{q}:pending``             ZSET     job ids ready to run, score = priority/FIFO
``fw:{q}:started``             ZSET     claimed job ids, score = deadline (whole s)
``fw:{q}:scheduled``           ZSET     delayed jobs and retries, score = run-at
``fw:{q}:failed``              ZSET     dead-letter, score = failure time
``fw:{q}:finished``            ZSET     finished job ids, score = end time (pruned)
``fw:{q}:canceled``            ZSET     canceled job ids, score = cancel time (pruned)
``fw:{q}:seq``                 STRING   FIFO sequence counter
``fw:{q}:paused``              STRING   present = paused
``fw:{q}:forgetting``          STRING   present = ``forget_queue`` deleting it: enqueues refused
``fw:{q}:max_active``          STRING   concurrency cap (absent = none)
``fw:{q}:rate``                HASH     rate limit: limit, window (s), held_since, held_seconds
``fw:{q}:rate:log``            ZSET     starts inside the rate window, score = start time
``fw:{q}:group_rate``          HASH     per-group rate limits: ``every`` / ``group:<g>`` -> "N W"
``fw:{q}:group_rate:log:<g>``  ZSET     group g's starts inside its window, score = start time
``fw:{q}:group_rate:parked``   ZSET     jobs set aside by their group's limit, score = slot
``fw:{q}:group_rate:held``     HASH     held_seconds, held_jobs: totals of the set-asides
``fw:{q}:deferred``            ZSET     jobs waiting on dependencies, score = enqueue time
``fw:{q}:held``                ZSET     jobs set aside by ``job hold``, score = when held
``fw:{q}:use``                 HASH     v, t: decayed worker seconds of the queue (``--fair``)
``fw:{q}:deps:<id>``           SET      "queue:id" refs job <id> still waits on
``fw:{q}:dependents:<id>``     SET      "queue:id" refs of jobs waiting on job <id>
``fw:{q}:outbox``              LIST     dependency and batch notes to replay to other queues
``fw:{q}:batch:<id>``          HASH     batch on this queue: callbacks, total, sealed, failed, fired
``fw:{q}:batch:<id>:ended``    SET      "queue:id" refs of the batch's jobs that ended
``fw:{q}:batches``             ZSET     batches not yet fired, score = creation time
``fw:{q}:job:<id>``            HASH     the job record (see ``job.py``)
``fw:{q}:unique:<key>``        STRING   dedup key -> job id
``fw:{q}:group:<g>``           LIST     jobs of group g waiting behind the running one
``fw:{q}:groups``              HASH     group -> job id that holds the group
``fw:{q}:cron``                ZSET     cron entry name -> next run (server time)
``fw:{q}:cron:<name>``         HASH     cron entry definition and last-run info
``fw:{q}:minute:<m>``          HASH     outcome -> count in epoch minute m (TTL 2 h; ≤ 1 heartbeat behind)
``fw:{q}:hist:<r>:<b>``        HASH     chart counts of bucket b (r: its length in s; with a TTL)
``fw:{q}:wake``                channel  published on enqueue/promotion: wakes idle workers
``fw:{q}:done:<id>``           channel  outcomes of job <id> (Job.wait; finished/retry: if ``waited``)
``fw:{q}:stop``                channel  stop requests (stop.lua: a job id); every worker PSUBSCRIBEs
=============================  =======  ==============================================

Global keys (touched by single-key commands only):

=============================  =======  ==============================================
``fw:queues``                  SET      every queue ever enqueued to
``fw:workers``                 SET      names of registered workers
``fw:worker:<name>``           HASH     heartbeat hash of a worker, with TTL (``shutdown``: a stop asked)
``fw:suspended``               STRING   present = all workers suspended (TTL = duration)
``fw:reaper``                  STRING   reaper lock (SET NX PX)
``fw:events``                  STREAM   default event log (capped)
``fw:control``                 channel  suspend/resume, ``shutdown:<worker>`` notifications
``fw:hist:all:<r>:<b>``        HASH     chart counts of bucket b summed over every queue (TTL)
=============================  =======  ==============================================
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, overload

from .base_error import FusionWorkerError
from .vocabulary import JobStatus

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


class InvalidQueueName(FusionWorkerError, ValueError):
    """Queue names are 1-128 characters of letters, digits, ``_ . -``."""


def check_addressable(what: str, value: str) -> str:
    """``value`` (a job id, a cron entry's or a worker's name) if the dashboard and the API
    can address it by URL and a log line can show it; ValueError (one line) otherwise.

    A ``/`` is kept by the dashboard's links and by most clients' quoting, so it splits
    the path; a ``\\`` typed unencoded is read as ``/`` by browsers; ``.`` and ``..`` are
    resolved away by every client; a control character (a newline) would split log lines."""
    if "/" in value or "\\" in value or value in (".", ".."):
        raise ValueError(f"{what} {value!r} cannot be addressed by URL (dashboard, API): "
                         "no '/' or '\\', and not '.' or '..'")
    if not value.isprintable():
        raise ValueError(f"{what} {value!r} must not contain control characters (a newline "
                         "would split log lines)")
    return value


def check_worker_name(name: str) -> str:
    """``name`` if a worker may be called so (``--name``, ``Worker(name=)``): 1-200
    characters :func:`check_addressable` takes; ValueError (one line) otherwise."""
    if name.__class__ is not str or not name or len(name) > 200:
        raise ValueError(f"worker name {name!r}: give 1-200 characters")
    return check_addressable("worker name", name)


def is_queue_name(name: object) -> bool:
    """True when ``name`` is a name :func:`check_queue_name` takes."""
    return isinstance(name, str) and bool(_QUEUE_NAME.match(name)) and name != "all"


def check_queue_name(name: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.match(name) or name == "all":
        raise InvalidQueueName(
            f"invalid queue name {name!r}: use 1-128 characters of letters, digits, '_', '.', '-' "
            "('all' is reserved)"
        )
    return name


class _Based(Protocol):
    @property
    def base(self) -> str: ...


class _Key:
    """A key: its owner's ``base`` + ``part`` (a descriptor of :class:`QueueKeys` and
    :class:`Keys`)."""

    __slots__ = ("part",)

    def __init__(self, part: str) -> None:
        self.part = part

    @overload
    def __get__(self, keys: None, owner: type) -> _Key: ...

    @overload
    def __get__(self, keys: _Based, owner: type) -> str: ...

    def __get__(self, keys: _Based | None, owner: type) -> _Key | str:
        return self if keys is None else keys.base + self.part


#: the member keys' parts, by the function that makes them (:func:`script_suffixes`)
_MEMBERS: dict[Callable[[Any, str], str], tuple[str, str]] = {}


def _member(part: str, tail: str = "") -> Callable[[Any, str], str]:
    """The key of one member (a job, a batch, a group, a worker), a method of
    :class:`QueueKeys` and :class:`Keys`: ``base`` + ``part`` + its name + ``tail``."""
    if tail:
        def key(keys: _Based, name: str) -> str:
            return keys.base + part + name + tail
    else:
        def key(keys: _Based, name: str) -> str:
            return keys.base + part + name
    _MEMBERS[key] = (part, tail)
    return key


@dataclass(frozen=True)
class QueueKeys:
    """Keys of one queue; ``base`` is the hash-tagged prefix ``fw:{q}:``."""

    prefix: str
    name: str

    @classmethod
    def from_base(cls, base: str) -> QueueKeys:
        """The keys of the queue whose ``base`` (``fw:{q}:``) this is."""
        prefix, sep, rest = base.partition(":{")
        if not sep or not rest.endswith("}:"):
            raise ValueError(f"not a queue's key base: {base!r}")
        return cls(prefix, rest[:-2])

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.name}}}:"

    # the queue's own keys: its base + the part given
    #: A ``SCAN MATCH`` pattern of every key of the queue.
    match_all = _Key("*")
    pending = _Key("pending")
    started = _Key("started")
    scheduled = _Key("scheduled")
    failed = _Key("failed")
    finished = _Key("finished")
    canceled = _Key("canceled")
    deferred = _Key("deferred")
    #: The queue's decayed worker time (HASH: v, t; use.lua, ``worker --fair``).
    use = _Key("use")
    #: Jobs set aside by ``hold`` (ZSET, score = when held; hold.lua).
    held = _Key("held")
    seq = _Key("seq")
    paused = _Key("paused")
    #: Present while ``forget_queue`` deletes the queue: enqueue refuses (STRING).
    forgetting = _Key("forgetting")
    max_active = _Key("max_active")
    groups = _Key("groups")
    cron = _Key("cron")
    wake = _Key("wake")
    #: The channel of stop requests (stop.lua publishes a started job's id).
    stop = _Key("stop")
    #: The queue's rate limit (HASH: limit, window, held totals).
    rate = _Key("rate")
    rate_log = _Key("rate:log")
    #: Per-group rate limits (HASH: ``every`` / ``group:<g>`` -> "N W").
    group_rate = _Key("group_rate")
    group_rate_held = _Key("group_rate:held")
    group_rate_parked = _Key("group_rate:parked")
    #: Dependency and batch notes to replay to other queues (LIST).
    outbox = _Key("outbox")
    #: Batches not yet fired (ZSET, score = creation time).
    batches = _Key("batches")

    # the keys naming one member (a job, a batch, a group...): base + part + name (+ tail)
    group_rate_log = _member("group_rate:log:")
    batch = _member("batch:")
    batch_ended = _member("batch:", ":ended")
    #: The "queue:id" refs the job still waits on (SET).
    deps = _member("deps:")
    dependents = _member("dependents:")
    job = _member("job:")
    #: The job's events, oldest first (LIST of JSON ``[stream id, fields]``, capped;
    #: lives as long as the job record: scripts/history.lua).
    job_events = _member("job_events:")
    #: Channel published on every outcome of the job (``Job.wait`` listens).
    done = _member("done:")
    unique = _member("unique:")
    group = _member("group:")
    cron_entry = _member("cron:")

    def registry(self, status: str) -> str:
        """The ZSET listing the jobs of ``status`` (a ``JobStatus``): ``pending`` for
        queued jobs, the status's own name for the others."""
        return self.pending if status == JobStatus.QUEUED else self.base + str(status)

    def minute(self, minute: int) -> str:
        """Outcome counts (finished/retry/failed) of epoch minute ``minute`` (the workers'
        heartbeats write them: runtime/minutes.py, scripts/minutes.lua)."""
        return self.base + "minute:" + str(minute)

    def history(self, resolution: int, bucket: int) -> str:
        """The dashboard's chart counts of one time bucket (events/metrics_history.py)."""
        return self.base + "hist:" + str(resolution) + ":" + str(bucket)


@dataclass(frozen=True)
class Keys:
    """Entry point of the schema: ``Keys("fw").queue("sms").pending``."""

    prefix: str = "fw"

    def queue(self, name: str) -> QueueKeys:
        return QueueKeys(self.prefix, name)

    @property
    def base(self) -> str:
        """What every global key starts with: ``fw:``."""
        return self.prefix + ":"

    # the global keys: base + the part given
    queues = _Key("queues")
    workers = _Key("workers")
    #: The queues that have (or had) cron entries (SET): what a cron tick reads.
    cron_queues = _Key("cron_queues")
    suspended = _Key("suspended")
    reaper_lock = _Key("reaper")
    events = _Key("events")
    control = _Key("control")
    worker = _member("worker:")

    def history_all(self, resolution: int, bucket: int) -> str:
        """The chart counts of one time bucket summed over every queue (the charts of
        all queues at any number of queues; events/metrics_history.py)."""
        return f"{self.prefix}:hist:all:{resolution}:{bucket}"


def script_suffixes() -> dict[str, str]:
    """``K.<name>`` of the Lua scripts (scripts/__init__.py): the key of each
    :class:`QueueKeys` member after the queue's base: ``pending``, or for a member
    taking one name (``job(id)``) what precedes it: ``job:``. A member whose key goes on
    after the name also gives what follows it as ``<name>_tail``: ``base ..
    K.batch_ended .. bid .. K.batch_ended_tail``. A member taking more names is none."""
    keys, mark = QueueKeys("p", "q"), "\0"
    found: dict[str, str] = {}
    for name, member in vars(QueueKeys).items():
        if name.startswith("_") or name in ("base", "match_all"):
            continue
        if isinstance(member, _Key):
            key = keys.base + member.part
        elif member in _MEMBERS:
            part, tail = _MEMBERS[member]
            key = keys.base + part
            if tail:
                found[name + "_tail"] = tail
        elif inspect.isfunction(member) and member.__code__.co_argcount == 2:   # self, name
            key, _, tail = member(keys, mark).partition(mark)
            if tail:
                found[name + "_tail"] = tail
        else:
            continue
        if key[len(keys.base):]:    # registry(status) is no suffix
            found[name] = key[len(keys.base):]
    return found
