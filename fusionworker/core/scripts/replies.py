"""What each Lua script answers, parsed once into a small dataclass.

A script replies with a Lua table whose first element names the answer
(``'job'``, ``'missing'``, ``'refused'``...) and whose other elements depend on
it; each script's header gives that contract. The functions here (one per
script, named after it, listed in :data:`PARSERS`) are the only code that
reads a reply by position: callers read named fields::

    verdict = replies.cancel(scripts.cancel(keys=[base], args=[job_id, ttl]))
    if verdict.outcome == "refused":
        ...  # verdict.status is the job's status

A reply is parsed after the call succeeded: an error reply (``redis.error_reply``
in the script, OOM, NOSCRIPT) is raised by the client, or returned in place of
the reply by a pipeline, and is the caller's to handle before parsing. Text may
arrive as ``bytes`` (a client without ``decode_responses``): it is decoded here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Literal, NamedTuple, cast

from ..redis_client import text as _text
from ..vocabulary import JobStatus

#: a reply as redis-py returns it: nested lists of text, numbers and lists
Raw = Any


def _items(reply: Raw) -> list[Any]:
    if not isinstance(reply, (list, tuple)) or not reply:
        raise ValueError(f"unexpected script reply {reply!r}")
    return list(reply)


def _hash(flat: Sequence[Any]) -> dict[str, str]:
    """``{k: v}`` of an ``HGETALL`` reply passed through a script (``[k, v, k, v...]``)."""
    if all(map(isinstance, flat, repeat(str))):   # a decoding client's: C calls only
        return dict(zip(flat[::2], flat[1::2]))
    return {_text(k): _text(v) for k, v in zip(flat[::2], flat[1::2])}


def _is_hash(item: Any) -> bool:
    """A flat ``HGETALL`` list (a count-form item is an ``{hash, id}`` pair or an id)."""
    return isinstance(item, list) and not (item and isinstance(item[0], list))


def _status(value: Any) -> JobStatus:
    return JobStatus.read(_text(value))


def _time(value: Any) -> float | None:
    text = _text(value)
    return float(text) if text else None


# --------------------------------------------------------------------------- enqueue

Placement = Literal["queued", "scheduled", "duplicate"]


class Enqueued(NamedTuple):
    """``enqueue.lua``: where the job went; a duplicate names the live job it matched
    (a named tuple: one per job enqueued, made at a fraction of a frozen dataclass's cost)."""

    placement: Placement
    job_id: str
    status: JobStatus
    #: the new job's sequence number (0 for a duplicate)
    seq: int = 0
    #: when a scheduled job becomes due
    scheduled_for: float | None = None
    #: enqueue.lua: the new job's ``enqueued_at`` (enqueue_many.lua: the call's ``now``)
    enqueued_at: float | None = None

    @property
    def duplicate(self) -> bool:
        return self.placement == "duplicate"


def enqueue(reply: Raw) -> Enqueued:
    items = _items(reply)
    placement, job_id, status = items[:3]
    n = len(items)
    return Enqueued(cast(Placement, _text(placement)), _text(job_id), _status(status),
                    int(_text(items[3])) if n > 3 else 0, _time(items[5]) if n > 5 else None,
                    _time(items[4]) if n > 4 else None)


@dataclass(frozen=True)
class EnqueuedMany:
    """``enqueue_many.lua``: one :class:`Enqueued` per job sent, in order."""

    jobs: tuple[Enqueued, ...]
    #: the server time of the enqueue (the jobs' ``enqueued_at``)
    now: float


def enqueue_many(reply: Raw) -> EnqueuedMany:
    """The script answers one JSON string (cheaper to build and parse than a table)."""
    flat = json.loads(_text(reply))
    jobs = tuple(
        Enqueued(cast(Placement, placement), job_id, JobStatus.read(status), int(seq),
                 float(sched) if sched else None)
        for placement, job_id, status, seq, sched in
        (flat[i:i + 5] for i in range(0, len(flat) - 1, 5))
    )
    return EnqueuedMany(jobs, float(flat[-1]))


# --------------------------------------------------------------------------- claim

ClaimKind = Literal["job", "empty", "paused", "capped", "missing", "limited"]


@dataclass(frozen=True)
class Claimed:
    """One job taken by ``claim.lua``: its record, its id as the queue held it, and why
    its "processing" event was not written (None: written, or none to write)."""

    data: dict[str, str]
    job_id: str | None
    event_lost: str | None = None


@dataclass(frozen=True)
class Claim:
    """``claim.lua``, single or count form.

    ``kind`` is ``job`` when at least one job was taken (``jobs``); ``missing``
    lists queue entries that had no record (moved to the failed registry);
    ``next_due`` is, for ``empty``, when the next scheduled job is due and, for
    ``limited``, when the rate limit next allows a claim (None: unknown). A count
    claim that took jobs and stopped short at the rate limit (or at jobs scheduled
    for later) has kind ``job``, ``next_due`` from its last item, and ``limited``
    True when the rate limit stopped it; ``capped`` True when the queue's concurrency
    cap stopped it (a single claim says so by its kind, ``capped``).
    """

    kind: ClaimKind
    jobs: tuple[Claimed, ...] = ()
    missing: tuple[str, ...] = ()
    now: float | None = None
    next_due: float | None = None
    limited: bool = False
    capped: bool = False


def claim(reply: Raw) -> Claim:
    items = _items(reply)
    kind = cast(ClaimKind, _text(items[0]))
    if kind == "job":
        if len(items) in (4, 5) and _is_hash(items[2]):   # single: now, hash, id[, why]
            lost = _text(items[4]) if len(items) == 5 else None
            return Claim(kind, jobs=(Claimed(_hash(items[2]), _text(items[3]), lost),),
                         now=_time(items[1]))
        return _claimed_many(items)
    if kind == "missing":
        return Claim(kind, missing=(_text(items[1]),))
    if kind in ("empty", "limited"):
        return Claim(kind, next_due=_time(items[1]) if len(items) > 1 else None,
                     now=_time(items[2]) if len(items) > 2 else None)
    return Claim(kind)



def _stop_word(item: Raw) -> str | None:
    """``capped``, ``limited`` or ``empty`` when ``item`` of a count claim's reply is
    what stopped it short (``{'capped'}``, ``{why, when}``), else None."""
    if not isinstance(item, list) or not item or isinstance(item[0], list):
        return None
    word = _text(item[0])
    if (len(item), word) == (1, "capped") or (len(item) == 2 and word in ("limited", "empty")):
        return word
    return None


def _claimed_many(items: list[Raw]) -> Claim:
    """A count claim's ``job`` reply: now, then each item a ``{hash, id}`` pair, a bare
    hash, a missing id, or the ``{why, when}`` that stopped it short (``{'capped'}``:
    the concurrency cap)."""
    jobs: list[Claimed] = []
    missing: list[str] = []
    stop: tuple[str, float | None] | None = None
    capped = False
    for item in items[2:]:
        why = _stop_word(item)
        if why == "capped":
            capped = True
        elif why is not None:
            stop = (why, _time(item[1]))
        elif not isinstance(item, list):
            missing.append(_text(item))
        elif item and isinstance(item[0], list):
            jobs.append(Claimed(_hash(item[0]), _text(item[1]),
                                _text(item[2]) if len(item) > 2 else None))
        else:
            jobs.append(Claimed(_hash(item), None))
    return Claim("job", jobs=tuple(jobs), missing=tuple(missing), now=_time(items[1]),
                 next_due=stop[1] if stop else None,
                 limited=stop is not None and stop[0] == "limited", capped=capped)

# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Finished:
    """``finish.lua``: ``stale`` when the attempt no longer owned the job (nothing
    written); else ``outcome`` is what was recorded (finished, failed, retry) and ``at``
    the server time it was recorded (the minute the worker counts it in); ``event_lost``
    why the script could not write the outcome's event (a key of another type)."""

    stale: bool
    outcome: str | None = None
    at: float | None = None
    #: why the outcome's event (written by the script) was lost, when it was
    event_lost: str | None = None


def finish(reply: Raw) -> Finished:
    items = _items(reply)
    if _text(items[0]) == "stale":
        return Finished(stale=True)
    return Finished(stale=False, outcome=_text(items[1]) if len(items) > 1 else None,
                    at=float(_text(items[2])) if len(items) > 2 else None,
                    event_lost=_text(items[3]) if len(items) > 3 else None)


def touch(reply: Raw) -> bool:
    """``Scripts.touch``: whether the attempt still owns its job (its lease was renewed)."""
    return bool(int(reply))


#: ``touch_many.lua``'s answer for a job whose stop was asked (stop.lua): owned, to kill
STOP_ASKED = 2


def touch_many(reply: Raw) -> list[int]:
    """``touch_many.lua``: per job sent, 0 when its attempt no longer owns it, 1 when
    it does, :data:`STOP_ASKED` when it does and its stop was asked."""
    return [int(x) for x in reply]


@dataclass(frozen=True)
class Stopped:
    """``stop.lua``: ``stopping`` (the worker named was told), ``not_started`` / ``ended``
    (``status`` says which), ``missing``."""

    outcome: str
    detail: str = ""


def stop(reply: Raw) -> Stopped:
    items = _items(reply)
    return Stopped(_text(items[0]), _text(items[1]) if len(items) > 1 else "")


def progress(reply: Raw) -> tuple[bool, str | None]:
    """``progress.lua``: whether it was written (False: not this attempt's job any more),
    and why its event was not (None: written, or none to write)."""
    if isinstance(reply, (bytes, str)):      # a text: written, the event was not
        return True, _text(reply)
    return bool(int(reply)), None


def alone(reply: Raw) -> bool:
    """``alone.lua``: whether it was written (False: not this attempt's job any more)."""
    return bool(int(reply))


def ask_shutdown(reply: Raw) -> bool:
    """``ask_shutdown.lua``: whether it was written (False: no live worker of that name)."""
    return bool(int(reply))


RequeueOutcome = Literal["requeued", "abandoned", "skipped"]


@dataclass(frozen=True)
class Requeued:
    """``requeue.lua``: ``requeued``, ``abandoned`` (reap mode: attempts used up, the
    job failed) or ``skipped`` with the reason why (``missing`` when there is no job)."""

    outcome: RequeueOutcome
    why: str | None = None

    @property
    def missing(self) -> bool:
        return self.outcome == "skipped" and self.why == "no such job"


def requeue(reply: Raw) -> Requeued:
    items = _items(reply)
    return Requeued(cast(RequeueOutcome, _text(items[0])),
                    _text(items[1]) if len(items) > 1 else None)


# --------------------------------------------------------------------------- admin

Verdict = Literal["ok", "canceled", "deleted", "refused", "missing", "held", "released"]


@dataclass(frozen=True)
class Changed:
    """``cancel.lua``, ``delete.lua``, ``reprioritize.lua``: ``outcome`` is the change
    made (``canceled``, ``deleted``, ``ok``), ``refused`` (the job's status does not
    allow it) or ``missing``. ``status``: the job's status before (or that refused);
    ``old_priority``: reprioritize's previous priority."""

    outcome: Verdict
    status: JobStatus | None = None
    old_priority: int | None = None
    #: hold.lua's refusal of a queued job: ``group`` (it waits on its group's list)
    why: str | None = None


def cancel(reply: Raw) -> Changed:
    items = _items(reply)
    outcome = cast(Verdict, _text(items[0]))
    return Changed(outcome, _status(items[1]) if len(items) > 1 else None)


delete = cancel


def hold(reply: Raw) -> Changed:
    """``hold.lua`` (``held``) and ``release.lua`` (``released``; ``status``: the job's
    status now)."""
    items = _items(reply)
    outcome = cast(Verdict, _text(items[0]))
    return Changed(outcome, _status(items[1]) if len(items) > 1 else None,
                   why=_text(items[2]) if len(items) > 2 else None)


release = hold


def use(reply: Raw) -> tuple[float, float]:
    """``use.lua``: (the queue's decayed use now, the server's time of it)."""
    items = _items(reply)
    return float(_text(items[0])), float(_text(items[1]))


def reprioritize(reply: Raw) -> Changed:
    items = _items(reply)
    outcome = cast(Verdict, _text(items[0]))
    if outcome == "ok":
        return Changed(outcome, old_priority=int(items[1]))
    return Changed(outcome, _status(items[1]) if len(items) > 1 else None)


# --------------------------------------------------------------------------- cron

CronOutcome = Literal["queued", "skipped", "missed", "moved", "early", "paused"]


@dataclass(frozen=True)
class CronTick:
    """``cron_tick.lua``: ``queued`` (``job_id`` is the new job), ``skipped`` (``job_id``
    is the run still live), ``missed``, ``moved``, ``early`` or ``paused``."""

    outcome: CronOutcome
    job_id: str | None = None


def cron_tick(reply: Raw) -> CronTick:
    items = _items(reply)
    return CronTick(cast(CronOutcome, _text(items[0])),
                    _text(items[1]) if len(items) > 1 else None)


# --------------------------------------------------------------------------- workflows


@dataclass(frozen=True)
class DepRegistered:
    """``dep_register.lua``: ``registered`` (the dependency is live: it will notify),
    or not, with the dependency's ``status`` (an ended one) or None (it is missing)."""

    registered: bool
    status: JobStatus | None


def dep_register(reply: Raw) -> DepRegistered:
    items = [_text(x) for x in _items(reply)]
    if items[0] == "registered":
        return DepRegistered(True, JobStatus.read(items[1]))
    if items[0] == "missing":
        return DepRegistered(False, None)
    return DepRegistered(False, JobStatus.read(items[0]))


DepOutcome = Literal["queued", "waiting", "canceled", "already", "ignored"]


@dataclass(frozen=True)
class DepDone:
    """``dep_done.lua``: what the note did to the dependent: ``queued`` (its last
    dependency ended), ``waiting``, ``canceled`` (a dependency failed), ``already``
    (note seen before) or ``ignored`` (the dependent is no longer deferred:
    ``status`` is its status, or None when it is missing)."""

    outcome: DepOutcome
    status: JobStatus | None = None


def dep_done(reply: Raw) -> DepDone:
    items = [_text(x) for x in _items(reply)]
    status = items[1] if len(items) > 1 and items[1] != "missing" else None
    return DepDone(cast(DepOutcome, items[0]), JobStatus.read(status) if status else None)


BatchOutcome = Literal["fired", "counted", "already", "missing"]


@dataclass(frozen=True)
class BatchDone:
    """``batch_done.lua``: ``fired`` (the batch completed; ``callbacks`` enqueued),
    ``counted``, ``already`` (note seen before) or ``missing`` (no such batch)."""

    outcome: BatchOutcome
    callbacks: int = 0


def batch_done(reply: Raw) -> BatchDone:
    items = _items(reply)
    outcome = cast(BatchOutcome, _text(items[0]))
    return BatchDone(outcome, int(items[1]) if outcome == "fired" and len(items) > 1 else 0)


@dataclass(frozen=True)
class Waiting:
    """``waiting.lua``: the record as read (empty: there is none) and whether it carries
    the waiter's mark (False: Redis refused it; the waiter reads on a timer)."""

    marked: bool
    data: dict[str, str]


def waiting(reply: Raw) -> Waiting:
    items = _items(reply)
    return Waiting(marked=int(items[0]) == 1, data=_hash(items[1]))


def minutes(reply: Raw) -> int:
    """``minutes.lua``: how many (minute, outcome, count) triples it took, from the
    first (written, or skipped on a key of another type); the rest were refused."""
    return int(reply)


def changed(reply: Raw) -> bool:
    """``run_now.lua``, ``save_meta.lua``: whether it wrote (False: the job is not
    scheduled / gone)."""
    return bool(int(reply))


def history(reply: Raw) -> list[str]:
    """``history.lua``: the events' stream ids, in order (``''`` each where the stream is
    on another slot: a Cluster, whose pipeline ``XADD``s them apart)."""
    return [_text(x) if x is not None else "" for x in reply or ()]


#: the parser of every script, by script name
PARSERS: dict[str, Callable[[Raw], Any]] = {
    "enqueue": enqueue, "enqueue_many": enqueue_many, "claim": claim, "finish": finish,
    "touch": touch, "touch_many": touch_many, "requeue": requeue, "cancel": cancel,
    "hold": hold, "release": release, "use": use, "history": history,
    "delete": delete, "reprioritize": reprioritize, "cron_tick": cron_tick,
    "dep_register": dep_register, "dep_done": dep_done, "batch_done": batch_done,
    "progress": progress, "waiting": waiting, "minutes": minutes, "stop": stop,
    "alone": alone, "ask_shutdown": ask_shutdown,
    "run_now": changed, "save_meta": changed,
}
