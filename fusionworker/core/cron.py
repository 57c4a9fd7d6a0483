"""Cron entries: jobs enqueued on a schedule, exactly once per due time.

Definitions live in Redis, in the target queue's slot (see ``keys.py``)::

    fw:{q}:cron          ZSET  entry name -> next run (epoch seconds; +inf = paused)
    fw:{q}:cron:<name>   HASH  definition, plus last_due / last_run / last_job /
                               last_status / runs / skips / misses

This module is the model and the admin API (register, list, pause, ...: the CLI,
the dashboard and ``info`` use it); every worker's ``CronScheduler``
(``middleware/cron.py``) enqueues the due runs through ``cron_tick.lua``, which
moves the entry's next run and enqueues in one step, so one worker wins each due
time. A missed due time is skipped or run once (``catch_up``), never in a burst; a
run whose previous job is still live is skipped unless ``allow_overlap``. The
sequence, its crash point and each case: docs/design.md, "Cron: one enqueue per
due time".

Schedules are croniter expressions in the entry's time zone: five fields
(minute hour day month weekday), or six with *seconds as the last field*
(croniter's convention): ``"* * * * * */5"`` = every 5 seconds. Daylight
saving time: a schedule with a fixed hour (``"30 2 * * *"``) runs once when
the clocks go back (the repeated wall-clock hour is skipped, as Vixie cron
does), and at the first valid time after the gap when they go forward (02:30
on the spring-forward day runs at 03:00). Wildcard hours follow real time.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..exceptions import FusionWorkerError
from . import codec
from .config import Settings, check_value
from .functions import func_ref, verify
from .job import check_priority
from .keys import Keys, QueueKeys, check_addressable, check_queue_name
from .options import registered_defaults
from .queue import known_queues, scripts_for
from .record import CRON_DEFINITION
from .redis_client import decoding, server_time
from .registry import producer_allowed
from .scripts import replies

if TYPE_CHECKING:  # pragma: no cover
    from redis.typing import EncodableT

    from .redis_client import RedisClient

log = logging.getLogger("fusionworker.cron")

#: A due time counts as missed only when the *following* scheduled time is
#: more than this many seconds in the past (a tick a little late is on time).
MISFIRE_GRACE = 1.0

CATCH_UP_MODES = ("skip", "once")

#: Entries handled per queue per tick (the rest wait for the next tick).
TICK_BATCH = 50

#: Seconds between a worker's looks at every served queue for cron entries the
#: ``cron_queues`` index does not list (written by an older version).
CRON_RESCAN = 600.0

#: the fields ``register`` writes (the entry's hash schema: record.CRON_FIELDS)
_DEFINITION = CRON_DEFINITION


class InvalidSchedule(FusionWorkerError, ValueError):
    """The cron expression, time zone or catch-up mode cannot be used."""


class NoSuchCronEntry(FusionWorkerError, LookupError):
    """No cron entry of that name (in that queue)."""


@dataclass
class CronEntry:
    """A cron entry as stored in Redis (times are epoch seconds, server clock)."""

    name: str
    queue: str
    schedule: str
    func: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int = 0
    timezone: str = "UTC"
    catch_up: str = "skip"
    allow_overlap: bool = False
    timeout: float | None = None
    max_retries: int | None = None
    paused: bool = False
    next_run: float | None = None       # None while paused
    last_due: float | None = None       # last due time handled (run, skipped or missed)
    last_run: float | None = None       # due time of the last enqueued run
    last_job: str | None = None
    last_status: str | None = None      # queued | caught_up | skipped | missed
    last_job_status: str | None = None  # status of last_job now (list_entries fills it)
    runs: int = 0
    skips: int = 0
    misses: int = 0

    @classmethod
    def from_hash(cls, data: dict[str, str], next_score: float | None) -> CronEntry:
        def num(key: str) -> float | None:
            value = data.get(key)
            return float(value) if value not in (None, "") else None

        max_retries = data.get("max_retries")
        _check_stored(int(data.get("priority") or 0), num("timeout"), max_retries)
        return cls(
            name=data.get("name", ""), queue=data.get("queue", ""),
            schedule=data.get("schedule", ""), func=data.get("func", ""),
            args=codec.loads(data.get("args") or "[]"),
            kwargs=codec.loads(data.get("kwargs") or "{}"),
            priority=int(data.get("priority") or 0), timezone=data.get("timezone") or "UTC",
            catch_up=data.get("catch_up") or "skip",
            allow_overlap=data.get("allow_overlap") == "1", timeout=num("timeout"),
            max_retries=int(max_retries) if max_retries not in (None, "") else None,
            paused=data.get("paused") == "1",
            next_run=None if next_score is None or next_score == float("inf") else next_score,
            last_due=num("last_due"), last_run=num("last_run"),
            last_job=data.get("last_job") or None, last_status=data.get("last_status") or None,
            runs=int(data.get("runs") or 0), skips=int(data.get("skips") or 0),
            misses=int(data.get("misses") or 0),
        )

    @classmethod
    def read(cls, data: dict[str, str], next_score: float | None,
             where: str) -> CronEntry | None:
        """:meth:`from_hash`, or None (logged) for a definition it cannot read: one bad
        entry is skipped, the others are listed and run."""
        try:
            return cls.from_hash(data, next_score)
        except Exception as exc:  # noqa: BLE001 - a record from Redis: skipped, never fatal
            _once(where, "cannot be read", exc)
            return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: cron entries (``"name on queue"``) this process logged as unreadable
_UNREADABLE: set[str] = set()


def _once(where: str, what: str, exc: BaseException | str) -> None:
    """Log a cron entry (or queue) Redis holds that cannot be used, once per process
    and entry, not once per tick: it is skipped, the others run."""
    if where not in _UNREADABLE and len(_UNREADABLE) < 1000:
        _UNREADABLE.add(where)
        shown = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        log.error("Cron entry %s %s (%s); skipped", where[:200], what, str(shown)[:200])


def _check_stored(priority: int, timeout: float | None, max_retries: str | None) -> None:
    """The options of an entry read from Redis are what ``register`` would take:
    ValueError otherwise (a priority a job cannot have, a timeout that is no time)."""
    check_priority(priority)
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout {timeout!r} is not a positive number of seconds")
    if max_retries not in (None, "") and int(max_retries) < 0:
        raise ValueError(f"max_retries {max_retries!r} is negative")


# -- schedule arithmetic (pure, no Redis) -----------------------------------------


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(f"unknown time zone {name!r}") from exc


#: The fields of a schedule, in order (the sixth, seconds, is optional).
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")
_NAMES = {3: {m: i + 1 for i, m in enumerate(("jan feb mar apr may jun jul aug sep oct nov "
                                              "dec").split())},
          4: {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}}


def _reversed_range(fields: Sequence[str]) -> str | None:
    """The first range of ``fields`` whose start is after its end (``1-0``), described."""
    for i, field in enumerate(fields):
        for part in field.split(","):
            lo, dash, hi = part.split("/")[0].partition("-")
            if not dash:
                continue
            start, end = (_NAMES.get(i, {}).get(v.lower(), int(v) if v.isdigit() else None)
                          for v in (lo, hi))
            if start is not None and end is not None and start > end:
                return (f"the range {lo}-{hi} of the {_FIELDS[i]} field runs backwards "
                        f"(a range goes from low to high, e.g. {hi}-{lo})")
    return None


_RANGES = ("0-59", "0-23", "1-31", "1-12 or jan-dec", "0-6 or sun-sat", "0-59")


def _bad_field(fields: Sequence[str]) -> str | None:
    """The first field of a 5- or 6-field schedule croniter refuses, with what it takes
    (each tried alone, the others ``*``)."""
    from croniter import croniter  # at first use (next_after says why)

    for i, field in enumerate(fields):
        alone = ["*"] * len(fields)
        alone[i] = field
        if not croniter.is_valid(" ".join(alone)):
            step = "; a step /N is at least 1" if "/0" in field else ""
            return f"the {_FIELDS[i]} field {field!r} is not valid: it takes {_RANGES[i]}{step}"
    return None


def check_schedule(schedule: str, timezone: str = "UTC") -> None:
    """Raise :class:`InvalidSchedule` (one line) unless ``schedule`` is one this scheduler
    honours: 5 fields (minute hour day month weekday) or 6 with seconds last, or an alias
    (``@daily``...); no range that runs backwards; a date that comes; a known zone."""
    from croniter import croniter  # at first use (next_after says why)

    fields = schedule.split() if isinstance(schedule, str) else []
    alias = len(fields) == 1 and fields[0].startswith("@")
    if len(fields) in (5, 6) and not croniter.is_valid(schedule) and _bad_field(fields):
        raise InvalidSchedule(f"invalid cron schedule {schedule!r}: {_bad_field(fields)}")
    if not (alias or len(fields) in (5, 6)) or not croniter.is_valid(schedule):
        raise InvalidSchedule(
            f"invalid cron schedule {schedule!r}: expected 5 fields (minute hour day month "
            "weekday) or 6 with seconds last, e.g. '*/5 * * * *' or '* * * * * */10'"
        )
    backwards = None if alias else _reversed_range(fields)
    if backwards:
        raise InvalidSchedule(f"invalid cron schedule {schedule!r}: {backwards}")
    next_after(schedule, timezone, time.time())     # a date that never comes says so


def _fixed_hour(schedule: str) -> bool:
    """Does the schedule name specific hours (so a repeated wall-clock hour must not rerun)?"""
    fields = schedule.split()
    if fields and fields[0].startswith("@"):
        return fields[0] not in ("@hourly", "@reboot")
    return len(fields) >= 2 and not fields[1].startswith("*")


def next_after(schedule: str, timezone: str, after: float) -> float:
    """The first scheduled time strictly after ``after`` (epoch seconds), in ``timezone``."""
    # croniter (with dateutil) is imported at the first schedule, not with this module:
    # every worker imports this one, most have no schedule, and croniter costs each
    # process 1.6 MiB of memory of its own
    from croniter import CroniterError, croniter

    zone = _zone(timezone)
    it = croniter(schedule, datetime.fromtimestamp(after, zone))
    fixed_hour = _fixed_hour(schedule)
    while True:
        try:
            nxt = float(it.get_next(float))
        except CroniterError as exc:     # e.g. '* * 31 2 *': croniter looked for years
            raise InvalidSchedule(f"cron schedule {schedule!r} never runs: no date matches "
                                  "its day, month and weekday fields (e.g. day 31 of a "
                                  "month that has 30 days or fewer)") from exc
        # fold=1: the second pass through a wall-clock hour repeated at the end of DST
        if fixed_hour and datetime.fromtimestamp(nxt, zone).fold == 1:
            continue
        return nxt


def plan(entry: CronEntry, due: float, now: float) -> tuple[str, float, str]:
    """What to do with due time ``due`` at server time ``now``: ``(action, next_run, reason)``.

    ``action`` is ``run`` or ``skip``; ``reason`` is ``due``, ``catch_up`` or ``missed``.
    """
    nxt = next_after(entry.schedule, entry.timezone, due)
    if now < nxt + MISFIRE_GRACE:
        return "run", nxt, "due"
    future = next_after(entry.schedule, entry.timezone, now)
    if entry.catch_up == "once":
        return "run", future, "catch_up"
    return "skip", future, "missed"


# -- admin API ------------------------------------------------------------------


def _qkeys(settings: Settings, queue: str) -> QueueKeys:
    return Keys(settings.prefix).queue(check_queue_name(queue))


def register(
    connection: RedisClient,
    settings: Settings,
    name: str,
    schedule: str,
    func: str | Any,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    queue: str = "default",
    priority: int | None = None,
    timezone: str = "UTC",
    catch_up: str = "skip",
    allow_overlap: bool = False,
    timeout: float | None = None,
    max_retries: int | None = None,
) -> CronEntry:
    """Create or replace cron entry ``name`` of ``queue``; its first run is the next
    scheduled time from now. Replacing keeps the entry's pause state and run history.

    ``priority``, ``timeout``, ``max_retries`` not given: the function's ``@job``
    options (its module is imported when it may be, as at enqueue), else 0 and the
    settings' defaults."""
    connection = decoding(connection)   # any redis-py client
    _check_entry(name, schedule, timezone, catch_up)
    priority, timeout, max_retries = _job_options(settings, func, priority, timeout,
                                                  max_retries)
    k = _qkeys(settings, queue)
    ekey = k.cron_entry(name)
    definition: dict[EncodableT, EncodableT] = {
        "name": name, "queue": queue, "schedule": schedule, "func": func_ref(func),
        "args": codec.dumps(list(args), where="args"),          # tagged JSON, as enqueue
        "kwargs": codec.dumps(dict(kwargs or {}), where="kwargs"),
        "priority": priority, "timezone": timezone, "catch_up": catch_up,
        "allow_overlap": "1" if allow_overlap else "0",
        "timeout": repr(float(timeout if timeout is not None else settings.job_timeout)),
        "max_retries": int(max_retries if max_retries is not None else settings.max_retries),
    }
    nxt = next_after(schedule, timezone, server_time(connection))
    paused = connection.hget(ekey, "paused") == "1"
    pipe = connection.pipeline(transaction=False)
    pipe.sadd(Keys(settings.prefix).cron_queues, queue)    # first: ticks look at the queue
    pipe.hset(ekey, mapping={**definition, "next_run": "" if paused else f"{nxt:.0f}"})
    pipe.zadd(k.cron, {name: float("inf") if paused else nxt})
    pipe.sadd(Keys(settings.prefix).queues, queue)
    pipe.execute()
    log.info("Cron entry %s on %s: %r (%s) -> %s, next run %s", name, queue, schedule,
             timezone, definition["func"], "paused" if paused else _fmt(nxt, timezone))
    return get_entry(connection, settings, name, queue)


def _check_entry(name: str, schedule: str, timezone: str, catch_up: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 200 or any(c.isspace() for c in name):
        raise InvalidSchedule("cron entry names are 1-200 characters without spaces")
    try:
        check_addressable("cron entry name", name)
    except ValueError as exc:
        raise InvalidSchedule(str(exc)) from None
    check_schedule(schedule, timezone)
    if catch_up not in CATCH_UP_MODES:
        raise InvalidSchedule(f"catch_up must be one of {', '.join(CATCH_UP_MODES)}")


def _job_options(settings: Settings, func: str | Any, priority: int | None,
                 timeout: float | None, max_retries: int | None
                 ) -> tuple[int, float | None, int | None]:
    """The runs' priority, timeout and retries: as given, else the function's ``@job``
    options (checked against the allow-list, as at enqueue), else 0 / the settings'."""
    verify(func_ref(func), producer_allowed(settings))   # default deny, as at enqueue
    own = registered_defaults(func_ref(func))
    priority = own.get("priority", 0) if priority is None else priority
    timeout = own.get("timeout") if timeout is None else timeout
    max_retries = own.get("max_retries") if max_retries is None else max_retries
    check_priority(priority)
    if timeout is not None:   # as at enqueue: finite, positive, at most the horse's timer
        timeout = check_value("job_timeout", float(timeout), "timeout")
    if max_retries is not None and max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    return priority, timeout, max_retries


def _fmt(ts: float, timezone: str = "UTC") -> str:
    return datetime.fromtimestamp(ts, _zone(timezone)).isoformat()


def find_queue(connection: RedisClient, settings: Settings, name: str, queue: str | None = None) -> str:
    """The queue holding entry ``name`` (searching every known queue unless given)."""
    connection = decoding(connection)   # any redis-py client
    names = [queue] if queue else known_queues(connection, settings.prefix)
    pipe = connection.pipeline(transaction=False)
    for q in names:
        pipe.exists(_qkeys(settings, q).cron_entry(name))
    found = [q for q, hit in zip(names, pipe.execute()) if hit]
    if not found:
        where = f"queue {queue!r}" if queue else "any queue"
        raise NoSuchCronEntry(f"no cron entry {name!r} in {where}")
    if len(found) > 1:
        raise NoSuchCronEntry(f"cron entry {name!r} exists in queues {', '.join(found)}: "
                              "say which with --queue")
    return found[0]


def get_entry(connection: RedisClient, settings: Settings, name: str,
              queue: str | None = None) -> CronEntry:
    connection = decoding(connection)   # any redis-py client
    queue = find_queue(connection, settings, name, queue)
    k = _qkeys(settings, queue)
    pipe = connection.pipeline(transaction=False)
    pipe.hgetall(k.cron_entry(name))
    pipe.zscore(k.cron, name)
    data, score = pipe.execute()
    if not data:
        raise NoSuchCronEntry(f"no cron entry {name!r} in queue {queue!r}")
    entry = CronEntry.from_hash(data, score)
    _fill_job_status(connection, settings.prefix, [entry])
    return entry


def _fill_job_status(connection: RedisClient, prefix: str, entries: list[CronEntry]) -> None:
    keys = Keys(prefix)
    pipe = connection.pipeline(transaction=False)
    for e in entries:
        pipe.hget(keys.queue(e.queue).job(e.last_job or "-"), "status")
    for e, status in zip(entries, pipe.execute()):
        e.last_job_status = status if e.last_job else None


def remove(connection: RedisClient, settings: Settings, name: str, queue: str | None = None) -> str:
    """Delete entry ``name`` (a run already enqueued still runs). Returns its queue."""
    connection = decoding(connection)   # any redis-py client
    queue = find_queue(connection, settings, name, queue)
    k = _qkeys(settings, queue)
    pipe = connection.pipeline(transaction=False)
    pipe.zrem(k.cron, name)         # first: a tick in between sees 'moved'
    pipe.delete(k.cron_entry(name))
    pipe.execute()
    log.info("Cron entry %s on %s removed", name, queue)
    return queue


def pause(connection: RedisClient, settings: Settings, name: str, queue: str | None = None) -> str:
    """Stop enqueueing runs of ``name`` until :func:`resume`. Returns its queue."""
    connection = decoding(connection)   # any redis-py client
    queue = find_queue(connection, settings, name, queue)
    _set_next_run(connection, _qkeys(settings, queue), name, None)
    log.info("Cron entry %s on %s paused", name, queue)
    return queue


def resume(connection: RedisClient, settings: Settings, name: str, queue: str | None = None) -> CronEntry:
    """Resume ``name``: its next run is the next scheduled time from now (no catch-up)."""
    connection = decoding(connection)   # any redis-py client
    entry = get_entry(connection, settings, name, queue)
    nxt = next_after(entry.schedule, entry.timezone, server_time(connection))
    _set_next_run(connection, _qkeys(settings, entry.queue), name, nxt)
    log.info("Cron entry %s on %s resumed, next run %s", name, entry.queue,
             _fmt(nxt, entry.timezone))
    return get_entry(connection, settings, name, entry.queue)


def _set_next_run(connection: RedisClient, k: QueueKeys, name: str, nxt: float | None) -> None:
    """An existing entry's next run (its hash and its score, one round trip); None
    pauses it (never due)."""
    pipe = connection.pipeline(transaction=False)
    pipe.hset(k.cron_entry(name), mapping={"paused": "1" if nxt is None else "0",
                                           "next_run": "" if nxt is None else f"{nxt:.0f}"})
    pipe.zadd(k.cron, {name: float("inf") if nxt is None else nxt}, xx=True)
    pipe.execute()


def list_entries(connection: RedisClient, prefix: str = "fw",
                 queues: Iterable[str] | None = None) -> list[CronEntry]:
    """Every cron entry (of ``queues``, default all known), soonest next run first,
    with the live status of each entry's last job (``last_job_status``)."""
    connection = decoding(connection)   # any redis-py client
    keys = Keys(prefix)
    names = list(queues) if queues is not None else known_queues(connection, prefix)
    pipe = connection.pipeline(transaction=False)
    for q in names:
        pipe.zrange(keys.queue(q).cron, 0, -1, withscores=True)
    listed = [(q, member, score) for q, rows in zip(names, pipe.execute())
              for member, score in rows]
    pipe = connection.pipeline(transaction=False)
    for q, member, _ in listed:
        pipe.hgetall(keys.queue(q).cron_entry(member))
    found = [CronEntry.read(data, score, f"{member} on {q}")
             for (q, member, score), data in zip(listed, pipe.execute()) if data]
    entries = [entry for entry in found if entry is not None]
    _fill_job_status(connection, prefix, entries)
    entries.sort(key=lambda e: (e.next_run is None, e.next_run or 0.0, e.queue, e.name))
    return entries


# -- the scheduler -----------------------------------------------------------------


def run_due(connection: RedisClient, prefix: str,
            queues: Iterable[str]) -> list[tuple[str, str, replies.CronTick]]:
    """Handle every due entry of ``queues`` once; returns ``(queue, name, reply)`` per
    script call. Safe to run in any number of processes at once (see module doc)."""
    keys = Keys(prefix)
    due, now = _due(connection, keys, list(queues))
    if not due:
        return []
    pipe = connection.pipeline(transaction=False)
    for q, member, _ in due:
        pipe.hgetall(keys.queue(q).cron_entry(member))
    definitions = pipe.execute(raise_on_error=False)     # a key of another type: skipped
    scripts = scripts_for(connection)
    calls = []
    pipe = connection.pipeline(transaction=False)
    for (q, member, score), data in zip(due, definitions):
        if isinstance(data, Exception):
            _once(f"{member} on {q}", "cannot be read", data)
            continue
        entry = CronEntry.read(data or {"name": member, "queue": q}, score, f"{member} on {q}")
        step = None if entry is None else _step(entry, bool(data), score, now)
        if entry is None or step is None:
            continue
        action, nxt, reason = step
        scripts.cron_tick(keys=[keys.queue(q).base], client=pipe, args=[
            member, f"{score:.0f}", f"{nxt:.0f}", action, uuid.uuid4().hex, reason])
        calls.append((q, member, entry, score, nxt))
    if not calls:
        return []
    results = []
    for (q, member, entry, score, nxt), reply in zip(
            calls, pipe.execute(raise_on_error=False)):
        if isinstance(reply, Exception):
            log.error("Cron entry %s on %s: cron_tick failed: %s", member, q, reply)
            continue
        tick = replies.cron_tick(reply)
        _log_reply(entry, score, nxt, tick)
        results.append((q, member, tick))
    return results


def _due(connection: RedisClient, keys: Keys, names: list[str]
         ) -> tuple[list[tuple[str, str, float]], float]:
    """(queue, entry, due time) of the entries due now (by the server's clock), and now."""
    if not names:
        return [], 0.0
    horizon = time.time() + 60.0  # local clock + slack; the server's clock decides below
    pipe = connection.pipeline(transaction=False)
    for q in names:
        pipe.zrangebyscore(keys.queue(q).cron, "-inf", horizon, start=0, num=TICK_BATCH,
                           withscores=True)
    candidates = []
    for q, rows in zip(names, pipe.execute(raise_on_error=False)):
        if isinstance(rows, Exception):          # its cron key is of another type
            _once(f"index of queue {q}", "cannot be read", rows)
            continue
        for member, score in rows:
            if math.isfinite(score):
                candidates.append((q, member, score))
            else:                                # no time: never due, said once
                _once(f"{member} on {q}", "has no next run", f"score {score}")
    if not candidates:
        return [], 0.0
    now = server_time(connection)
    return [c for c in candidates if c[2] <= now], now


def _step(entry: CronEntry, defined: bool, score: float, now: float
          ) -> tuple[str, float, str] | None:
    """What cron_tick.lua does with the due time: (action, next run, reason); None when
    the schedule cannot be computed (logged)."""
    if not defined:  # definition gone: the script drops the dangling score ('moved')
        return "skip", score + 1, "missed"
    try:
        return plan(entry, score, now)
    except (ValueError, OverflowError, InvalidSchedule) as exc:
        _once(f"{entry.name} on {entry.queue}", "cannot be scheduled", exc)
        return None


def _log_reply(entry: CronEntry, due: float, nxt: float, reply: replies.CronTick) -> None:
    kind = reply.outcome
    when = _fmt(due, entry.timezone)
    if kind == "queued":
        log.info("Cron entry %s enqueued job %s on %s (%s, due %s); next run %s",
                 entry.name, reply.job_id, entry.queue, entry.func, when,
                 _fmt(nxt, entry.timezone))
    elif kind == "skipped":
        log.info("Cron entry %s: run due %s skipped, job %s is still %s", entry.name, when,
                 reply.job_id, "running or queued")
    elif kind == "missed":
        log.warning("Cron entry %s: runs since %s missed while no worker ran "
                    "(catch_up=skip); next run %s", entry.name, when, _fmt(nxt, entry.timezone))


def index_queues(connection: RedisClient, prefix: str, queues: Sequence[str]) -> list[str]:
    """Add each of ``queues`` that has cron entries to ``<prefix>:cron_queues`` (entries
    an older version registered without it); returns them. One pipeline."""
    keys = Keys(prefix)
    names = list(queues)
    if not names:
        return []
    pipe = connection.pipeline(transaction=False)
    for q in names:
        pipe.exists(keys.queue(q).cron)
    found = [q for q, n in zip(names, pipe.execute()) if n]
    if found:
        connection.sadd(keys.cron_queues, *found)
    return found
