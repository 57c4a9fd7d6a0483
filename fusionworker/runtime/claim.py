"""Claiming: which queues, in which order, and reading claim.lua's answers.

A worker walks a cycle of its queues in which a queue of weight w appears w
times (``sms:3,email:1`` -> sms, sms, sms, email). To fill ``want`` free
slots it takes the next ``want`` places of the cycle, from where the last
claim that got a job left off, skipping queues known to be dry this round
and queues backed off after a refusal; one claim.lua call per queue asks for
that queue's share (``count``; a single claim without it). The calls go in
one pipeline, either on their own (:meth:`Claimer.claim`) or at the end of
the previous jobs' finish pipeline (recorder.py). A queue that gave fewer
than asked is dry for this round and the rest of the want goes to the next
queues. With one slot this is exactly "each claim starts one place after
the queue that gave the previous job and skips empty or paused queues".

In strict order (``strict=True``: RQ's ``worker high default low``) there is
no cycle position: each round asks the first queue in listed order that is
not dry this claim nor backed off for every wanted job, and the next round
the next such queue for what is left, so a job of a later queue is taken only
when every earlier queue was found empty (or paused) in this claim.

In fair order (``fair``: ``worker --fair``, fairshare.py) there is no cycle position
either: each round asks the queues not dry nor backed off whose recent worker time,
divided by their weight, is lowest.

Quiet queues (the idle cost does not grow with the queues served): while the
wake-up subscription is confirmed (wakeups.py), a queue a claim found with
nothing to take is *quiet*: no claim asks it again until its channel speaks
(enqueue, a scheduled job or retry, a promotion, a resume publish there), the
time its reply named comes (its first scheduled job, its rate limit's next
slot), or the sweep reaches it: every ``sweep_interval`` (the poll interval)
the next :data:`SWEEP_QUEUES` quiet queues are asked again, a safety net for a
write that published nothing. A plain queue's enqueue publishes only when it made
pending non-empty (design.md, "One wake-up per empty-to-non-empty, not per job"),
so a queue at its cap or refused (backed off, asked when that ends) is never quiet.
Losing the subscription (or Redis) makes every queue loud again. An idle worker on
1,000 queues claims from 4 queues a second, not 1,000. A burst worker never trusts
quiet queues (it ends on a full sweep).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from ..core.connection import seconds, server_time
from ..core.job import FailureReason, Job, MalformedJob
from ..core.keys import Keys, check_queue_name
from ..core.queue import known_queues
from ..core.scripts import replies
from .errors import UNREACHABLE, is_refusal
from .fairshare import FairShare

if TYPE_CHECKING:  # pragma: no cover
    from ..events.middleware import ScriptEvents

log = logging.getLogger(__name__)

#: Back-off of a queue whose claim Redis refused: first delay, cap (seconds).
QUEUE_BACKOFF = (1.0, 60.0)

#: Quiet queues asked again per sweep (every ``sweep_interval``): the safety net.
SWEEP_QUEUES = 4


def parse_queue_spec(spec: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"sms:3,email"`` -> ``[("sms", 3), ("email", 1)]``; ``all`` stays ``all``."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        name, _, weight = part.partition(":")
        try:
            w = int(weight) if weight else 1
        except ValueError:
            raise ValueError(f"bad weight in {part!r}: expected NAME:INTEGER") from None
        if w < 1:
            raise ValueError(f"weight of {name!r} must be >= 1")
        if name != "all":
            check_queue_name(name)
        out.append((name, w))
    if not out:
        raise ValueError("no queue given")
    return out


def _mismatch(data: dict[str, str], queue: str, claimed_id: str | None) -> str | None:
    """Why a claimed record disagrees with the key it was claimed under, or None.

    A missing field is no disagreement: the claimed id and queue fill it in.
    """
    if claimed_id is not None and data.get("id") not in (None, claimed_id):
        return (f"job record field 'id' ({data.get('id')!r}) disagrees with the claimed "
                f"id {claimed_id!r}")
    if data.get("queue") not in (None, "", queue):
        return (f"job record field 'queue' ({data.get('queue')!r}) disagrees with the queue "
                f"{queue!r} it was claimed from")
    return None


def job_from(queue: str, data: dict[str, str], claimed_id: str | None = None,
             max_args_bytes: int = 0) -> Job[Any]:
    """The claimed job. The key we claimed is the truth: a record whose
    ``id`` or ``queue`` field disagrees with it is failed as malformed, under the
    claimed id and queue, without running.

    The guard of the claim (docs/design.md, "Decoding what Redis holds"): whatever
    reading the record raises (arguments too deep, too large, not JSON, of a wrong
    type; any other error) makes it a job failed with reason ``malformed`` under the
    claimed id and queue, which the worker records like any failure; never an
    exception out of the claim. ``max_args_bytes`` (0: none): a larger ``args`` +
    ``kwargs`` text is malformed too (the setting of that name)."""
    try:
        too_large = _too_large(data, max_args_bytes)
        if too_large:
            raise MalformedJob(too_large)
        job = Job.from_hash(data, strict=True)
        mismatch = _mismatch(data, queue, claimed_id)
        if mismatch:
            raise MalformedJob(mismatch)
        return job
    except MalformedJob as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - a record nobody checked: it fails alone, never the worker
        why = f"job record cannot be read ({type(exc).__name__}: {exc})"[:500]
    job = _readable_part(data, queue)
    job.error_type, job.error_message = "MalformedJob", why
    job.failure_reason = FailureReason.MALFORMED
    job.queue = queue
    if claimed_id:
        job.id = claimed_id
    return job


def _too_large(data: dict[str, str], limit: int) -> str | None:
    size = len(data.get("args") or "") + len(data.get("kwargs") or "")
    if limit and size > limit:
        return (f"job arguments are {size} characters of JSON, more than this worker's "
                f"max_args_bytes ({limit})")
    return None


def _readable_part(data: dict[str, str], queue: str) -> Job[Any]:
    """What can be read of a malformed record (its attempts, retries, callbacks...),
    without its arguments; a bare job when even that fails."""
    rest = {k: v for k, v in data.items() if k not in ("args", "kwargs", "result")}
    try:
        return Job.from_hash(rest)
    except Exception:   # not strict reading should not fail; if it does, the bare job
        log.exception("Reading the fields of a malformed job record of queue %s failed", queue)
        return Job(id=str(data.get("id", "")), queue=queue, func=str(data.get("func", "")))


@dataclass
class Plan:
    """The claim.lua calls of one round: (queue, count) in cycle order, and their places."""

    calls: list[tuple[str, int]]
    places: list[int]               # the cycle index of each claimed place, in order
    sent: float = 0.0               # monotonic time the calls were sent
    armed: bool = False             # planned with wake-ups confirmed: dry queues go quiet

    @property
    def asked(self) -> int:
        return len(self.places)


@dataclass
class ClaimRound:
    """What a claim round brought: the jobs, and what it learnt about the queues."""

    jobs: list[Job[Any]] = field(default_factory=list)
    asked: int = 0
    dry: set[str] = field(default_factory=set)   # gave fewer than asked: nothing more now
    sent: float = 0.0     # when the claim was sent: every lease started no earlier
    #: Redis was unreachable (the round stopped there): the caller backs off
    unreachable: Exception | None = None

    @property
    def short(self) -> bool:
        return len(self.jobs) < self.asked


class Claimer:
    """The queues of one worker and the claim.lua calls over them.

    ``name``: the claiming worker's (each claimed job records it); ``lease``: the
    seconds each claim leases a job for; ``failed_ttl``: what a dead-lettered
    record without a job keeps; ``max_args_bytes``: see :func:`job_from`."""

    def __init__(self, connection: Any, scripts: Any, keys: Keys, spec: str | Sequence[str], *,
                 name: str, lease: float, failed_ttl: float, strict: bool = False,
                 max_args_bytes: int = 0, fair: FairShare | None = None) -> None:
        self.connection, self.scripts, self.keys = connection, scripts, keys
        self.name, self.lease, self.failed_ttl = name, lease, failed_ttl
        #: a record with more argument text is failed as malformed (0: no limit)
        self.max_args_bytes = max_args_bytes
        self.spec = parse_queue_spec(spec)
        #: strict order: the first queue in listed order that has jobs, always
        self.strict = strict
        if strict and any(weight != 1 for _, weight in self.spec):
            raise ValueError("weights mean nothing in strict queue order: give plain "
                             "queue names, or serve them weighted round-robin")
        if strict and fair is not None:
            raise ValueError("fair share picks queues by their use, strict order by their "
                             "place: give the queues with -q to serve them fairly")
        #: fair share by use (``--fair``): the queue with the least recent worker time
        self.fair = fair
        #: claim.lua writes each job's "processing" event (events/middleware.py), or None
        self.events: ScriptEvents | None = None
        self.weights: dict[str, int] = {}
        self.queue_names: list[str] = []
        self.cycle: list[str] = []
        self.pos = 0
        #: queue -> (monotonic time until which it is not claimed from, current delay)
        self.backoff: dict[str, tuple[float, float]] = {}
        #: the last round met a rate-limited queue holding jobs (a burst worker waits)
        self.rate_held = False
        #: queue -> server time its first scheduled (or rate-held) job is due (last reply)
        self.due_at: dict[str, float] = {}
        #: wake-ups are confirmed (the loop sets it): a dry queue may go quiet
        self._armed = False
        #: queues found with nothing to claim since wake-ups were confirmed (module doc)
        self.quiet: set[str] = set()
        self.sweep_interval = 1.0
        self._sweep_at = 0.0
        self._sweep_pos = 0
        #: queues whose last reply said "capped", was refused or not understood: never quiet
        self._loud: set[str] = set()
        #: (the server's time in a reply of the last claim, time.monotonic() then)
        self.server_clock: tuple[float, float] | None = None
        #: jobs it may still claim (``Worker.work(max_jobs=)``); None: no end
        self.left: int | None = None
        self.resolve()

    # -- the queues -------------------------------------------------------------

    @property
    def follows_all(self) -> bool:
        return any(name == "all" for name, _ in self.spec)

    def resolve(self) -> bool:
        """(Re)build the queue list and cycle (``all``: every known queue). True: changed."""
        names: list[str] = []
        cycle: list[str] = []
        for name, weight in self.spec:
            expanded = (known_queues(self.connection, self.keys.prefix)
                        if name == "all" else [name])
            for q in expanded:
                if q not in names:
                    names.append(q)
                    cycle.extend([q] * weight)
                    self.weights[q] = weight
        changed = names != self.queue_names
        self.queue_names, self.cycle = names, cycle
        if changed:
            served = set(names)
            self.quiet &= served
            self.due_at = {q: t for q, t in self.due_at.items() if q in served}
        return changed

    # -- quiet queues -------------------------------------------------------------

    @property
    def next_due(self) -> float | None:
        """The server time the first scheduled (or rate-held) job of a queue not backed
        off is due."""
        return min((t for q, t in self.due_at.items() if not self.backed_off(q)), default=None)

    def wake(self, queues: set[str] | None = None) -> None:
        """Channels spoke: these queues (None: every queue) may hold jobs again."""
        if queues is None:
            self.quiet.clear()
        else:
            self.quiet -= queues

    @property
    def armed(self) -> bool:
        """Wake-ups are confirmed: a queue found dry may go quiet."""
        return self._armed

    @armed.setter
    def armed(self, value: bool) -> None:
        self._armed = value
        if not value:            # a wake-up may have been missed: every queue is loud
            self.quiet.clear()

    def _refresh(self) -> None:
        """Wake the quiet queues whose due time came, and the next of the sweep."""
        if not self.quiet:
            return
        now = self.server_now()
        if now is not None:
            for queue, due in self.due_at.items():
                if due <= now:
                    self.quiet.discard(queue)
        mono = time.monotonic()
        if mono < self._sweep_at or not self.quiet:
            return
        self._sweep_at = mono + self.sweep_interval
        names, woken = self.queue_names, 0
        for step in range(len(names)):
            queue = names[(self._sweep_pos + step) % len(names)]
            if queue in self.quiet:
                self.quiet.discard(queue)
                woken += 1
                if woken >= SWEEP_QUEUES:
                    self._sweep_pos = (self._sweep_pos + step + 1) % len(names)
                    return

    def backed_off(self, queue: str) -> bool:
        return time.monotonic() < self.backoff.get(queue, (0.0, 0.0))[0]

    def refused(self, queue: str, exc: Exception) -> None:
        """Redis refused a claim on ``queue`` (OOM, WRONGTYPE...): back this queue off,
        doubling up to QUEUE_BACKOFF[1]; the worker goes on with its other queues."""
        delay = min(self.backoff.get(queue, (0.0, QUEUE_BACKOFF[0] / 2))[1] * 2,
                    QUEUE_BACKOFF[1])
        self.backoff[queue] = (time.monotonic() + delay, delay)
        log.error("Worker %s: Redis refused to claim from queue %s (%s); backing this queue "
                  "off for %.0f s", self.name, queue, exc, delay)

    def server_now(self) -> float | None:
        """The server's time now, from the last claim's reply (no round trip); None
        when no reply of it said."""
        if self.server_clock is None:
            return None
        said, at = self.server_clock
        return said + (time.monotonic() - at)

    def backoff_end(self) -> float | None:
        """``time.monotonic()`` when the first backed-off queue may be asked again."""
        now = time.monotonic() if self.backoff else 0.0     # (none: no clock read)
        return min((until for until, _ in self.backoff.values() if until > now), default=None)

    def idle_timeout(self, poll_interval: float) -> float:
        """``poll_interval``, or less when a scheduled job, a rate limit's slot (server
        clock: from the claim's reply, else one TIME) or a back-off's end is sooner."""
        wait = poll_interval
        end = self.backoff_end()
        if end is not None:
            wait = min(wait, max(0.0, end - time.monotonic()))
        due = self.next_due
        if due is None:
            return wait
        now = self.server_now()
        if now is None:
            try:
                now = server_time(self.connection)
            except UNREACHABLE:
                return wait
        return min(wait, max(0.0, due - now))

    def untried(self, dry: set[str]) -> bool:
        """Some queue may still hold a job: not dry this round, not quiet, not backed off."""
        return any(q not in dry and q not in self.quiet and not self.backed_off(q)
                   for q in self.queue_names)

    def nothing_due(self) -> bool:
        """No queue holds a job ready now (pending, or scheduled for a time passed; a
        paused queue holds none): what a burst worker that may not claim (suspended)
        ends on, with one read-only round trip. False when Redis cannot tell."""
        if not self.cycle and self.follows_all:
            self.resolve()
        try:
            pipe = self.connection.pipeline(transaction=False)
            pipe.time()
            for name in self.queue_names:
                qkeys = self.keys.queue(name)
                pipe.exists(qkeys.paused)
                pipe.zcard(qkeys.pending)
                pipe.zrange(qkeys.scheduled, 0, 0, withscores=True)
            answers = pipe.execute()
        except (redis.RedisError, OSError):
            return False
        now = seconds(answers[0])
        for i in range(1, len(answers), 3):
            paused, pending, first = answers[i:i + 3]
            if not paused and (pending or (first and float(first[0][1]) <= now)):
                return False
        return True

    # -- one round --------------------------------------------------------------

    def plan(self, want: int, dry: set[str] | None = None) -> Plan | None:
        """The next ``want`` places of the cycle from :attr:`pos`, skipping dry and
        backed-off queues; None when no queue is left (or no claim, :attr:`left`)."""
        n = len(self.cycle)
        want = want if self.left is None else min(want, self.left)
        if want <= 0 or not n:
            return None
        self._refresh()
        skip = set(dry) if dry else set()
        skip |= self.quiet
        if self.backoff:
            skip.update(q for q in self.queue_names if q in self.backoff and self.backed_off(q))
        plan = self._plan(want, skip, n)
        if plan is not None:
            plan.armed = self.armed
            for queue, _ in plan.calls:     # its reply says again (a stale time is no loop)
                self.due_at.pop(queue, None)
        return plan

    def _plan(self, want: int, skip: set[str], n: int) -> Plan | None:
        if self.strict:
            return self._strict_plan(want, skip)
        if self.fair is not None:
            return self._fair_plan(want, skip)
        if not skip and want == 1:           # the steady state of one slot
            index = self.pos % n
            return Plan([(self.cycle[index], 1)], [index])
        places: list[int] = []
        counts: dict[str, int] = {}
        i = 0
        while len(places) < want:
            if i >= n and not places:
                return None                     # a whole turn of the cycle found no queue
            index = (self.pos + i) % n
            queue = self.cycle[index]
            i += 1
            if queue in skip:
                continue
            places.append(index)
            counts[queue] = counts.get(queue, 0) + 1
        return Plan(list(counts.items()), places)

    def _strict_plan(self, want: int, skip: set[str]) -> Plan | None:
        """Strict order: every wanted job asked of the first queue not skipped."""
        for index, queue in enumerate(self.cycle):
            if queue not in skip:
                return Plan([(queue, want)], [index] * want)
        return None

    def _fair_plan(self, want: int, skip: set[str]) -> Plan | None:
        """Fair order: the wanted jobs dealt to the queues not skipped by their use."""
        assert self.fair is not None
        open_ = [(q, self.weights.get(q, 1)) for q in self.queue_names if q not in skip]
        calls = self.fair.share(want, open_)
        if not calls:
            return None
        places = [self.cycle.index(q) for q, count in calls for _ in range(count)]
        return Plan(calls, places)

    def loud_queues(self) -> list[str]:
        """The queues not known quiet (a quiet queue has nothing to take: fair share
        does not read its use, so an idle worker's cost stays that of its sweep)."""
        return [q for q in self.queue_names if q not in self.quiet]

    def replan(self, plan: Plan) -> Plan:
        """A plan made before :meth:`note` counted the jobs that just ended, made again
        with them counted (fair share only; round-robin's plan does not depend on use)."""
        if self.fair is None:
            return plan
        return self.plan(plan.asked) or plan

    def note(self, ended: Sequence[tuple[Job[Any], Any]]) -> None:
        """Jobs ended here (with their outcomes): fair share counts their worker time at
        once, before the next plan (a job given back at shutdown counts none)."""
        if self.fair is None:
            return
        for job, outcome in ended:
            if str(getattr(outcome, "status", "")) != "requeued":
                self.fair.note(job.queue, float(getattr(outcome, "duration", 0.0) or 0.0))

    def forget(self) -> None:
        """Start a claim (one or more rounds): forget what the last one met. Not per
        round: a round asking one queue must not forget that an earlier round of the
        same claim met a rate-limited queue (a burst worker would end with jobs held)."""
        self.rate_held = False

    def queue_calls(self, pipe: Any, plan: Plan) -> None:
        """Queue the round's claim.lua calls on ``pipe`` (sent by the caller)."""
        for queue, count in plan.calls:
            self.scripts.claim.queue_by_sha(pipe, self._keys(queue), self._args(count, queue))

    def _keys(self, queue: str) -> list[str]:
        """claim.lua's keys: the queue's base, and the event stream when it writes there."""
        base = self.keys.queue(queue).base
        return [base] if self.events is None else [base, self.events.stream]

    def _args(self, count: int, queue: str) -> list[Any]:
        """claim.lua's arguments: who claims, the attempt's fresh token, the lease, the
        dead-letter's retention, and the count form's count (a single claim without);
        with the event stream, what the "processing" events say of the worker."""
        args: list[Any] = [self.name, uuid.uuid4().hex, self.lease, self.failed_ttl]
        if self.events is not None:
            return [*args, count if count > 1 else "", self.events.maxlen, self.events.host,
                    queue]
        if count > 1:
            args.append(count)
        return args

    def reload_scripts(self, plan: Plan, answers: list[Any]) -> None:
        """A NOSCRIPT reply (Redis restarted or failed over): the Script call loads the
        script and runs that claim once more, on its own (with a fresh token)."""
        if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in answers):
            self.scripts.reload_missing(
                answers, [("claim", self._keys(queue), self._args(count, queue))
                          for queue, count in plan.calls], catch=redis.RedisError)

    def take(self, plan: Plan, answers: list[Any], dry: set[str]) -> list[Job[Any]]:
        """The jobs of the round's replies; queues that gave less than asked join ``dry``.

        :attr:`pos` moves one place past the last place that got a job (round-robin;
        strict order has no position)."""
        jobs: list[Job[Any]] = []
        got: dict[str, int] = {}
        for (queue, count), reply in zip(plan.calls, answers):
            found, taken = self.parse(queue, reply)
            jobs.extend(found)
            got[queue] = len(found)
            if taken < count:
                dry.add(queue)
                if plan.armed and self.armed and queue not in self._loud:
                    self.quiet.add(queue)
        last = None
        for index in plan.places:
            name = self.cycle[index] if index < len(self.cycle) else None
            if name is not None and got.get(name, 0) > 0:
                got[name] -= 1
                last = index
        if last is not None and self.cycle and not self.strict:
            self.pos = (last + 1) % len(self.cycle)
        if self.left is not None:
            self.left -= len(jobs)
        return jobs

    def claim(self, want: int) -> ClaimRound:
        """Claim up to ``want`` jobs on our own (one round trip per round): the rounds go
        on until ``want`` jobs came or every queue is dry or backed off."""
        out = ClaimRound(asked=want)
        self.forget()
        if not self.cycle and self.follows_all:
            self.resolve()
        while len(out.jobs) < want:
            plan = self.plan(want - len(out.jobs), out.dry)
            if plan is None:
                break
            try:
                pipe = self.connection.pipeline(transaction=False)
                self.queue_calls(pipe, plan)
                read = (self.fair.queue_reads(pipe, self.loud_queues()) if self.fair
                        else [])
                plan.sent = time.monotonic()
                answers = pipe.execute(raise_on_error=False)
                if self.fair is not None:   # the use of every queue, for the next plan
                    self.fair.learn([], read, answers[len(plan.calls):])
                    del answers[len(plan.calls):]
                self.reload_scripts(plan, answers)
            except UNREACHABLE as exc:
                out.unreachable = exc
                break
            out.sent = out.sent or plan.sent        # the earliest: the leases' lower bound
            out.jobs.extend(self.take(plan, answers, out.dry))
        return out

    # -- claim.lua's answers ----------------------------------------------------

    def parse(self, queue: str, reply: Any) -> tuple[list[Job[Any]], int]:
        """One claim.lua reply (single or count form): its jobs, and how many places it
        took (a dead-lettered entry without a record takes one, yields no job)."""
        self._loud.discard(queue)
        if is_refusal(reply):    # OOM, WRONGTYPE...: backed off, asked when that ends
            self.refused(queue, reply)
            self._loud.add(queue)
            return [], 0
        if isinstance(reply, Exception) or not reply:
            self._loud.add(queue)           # not understood: never quiet
            return [], 0
        self.backoff.pop(queue, None)
        answer = replies.claim(reply)
        if answer.kind == "capped" or answer.capped:
            self._loud.add(queue)
        for job_id in answer.missing:
            self._log_missing(queue, job_id)
        if answer.kind == "limited" or answer.limited:
            self.rate_held = True    # jobs wait for a rate-limit slot: a burst worker waits too
        if answer.next_due is not None:   # limited: when the rate limit next allows a claim
            self.due_at[queue] = answer.next_due
        else:
            self.due_at.pop(queue, None)
        if answer.now is not None:
            self.server_clock = (answer.now, time.monotonic())
        jobs = [job_from(queue, taken.data, taken.job_id, self.max_args_bytes)
                for taken in answer.jobs]
        if self.events is not None:       # counted dropped by the event log's hook
            self.events.lost_claims.update(
                job.id for job, taken in zip(jobs, answer.jobs) if taken.event_lost)
        return jobs, len(answer.jobs) + len(answer.missing)

    @staticmethod
    def _log_missing(queue: str, job_id: Any) -> None:
        log.error("Queue %s held job id %s without a job record: moved to failed",
                  queue, job_id)
