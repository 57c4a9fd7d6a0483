"""The outcome recorder: the finish pipeline, which carries the next claim.

:meth:`Recorder.record` writes, in ONE round trip, the outcome of every job
that ended since the last pass (finish.lua, or requeue.lua ``return`` for a
job given back), the heartbeat hash's list of running jobs when it changed, and, at the end, the claim.lua calls of the next jobs
when the loop may claim. Redis runs a pipeline's commands in order, so a
claimed next job implies recorded outcomes (on a Cluster: when the queues
share a shard). It RETURNS what the claims brought (:class:`~.claim.ClaimRound`);
nothing is left behind in a field for the loop to find, and it writes no loop
state: what the heartbeat hash is known to say after the round trip is part of
its answer (:class:`Recorded`). The worker's counters are counted here, once per
outcome, and written by the heartbeat (counters.py).

When the round trip fails (Redis unreachable, a refusal), each outcome is
recorded on its own (:meth:`Recorder.record_alone`), without claims, with
backoff until Redis answers (a PING every 0.25 s cuts the backoff short: the
write goes again as soon as Redis answers); after a lost reply it first looks whether the
write landed (:meth:`Recorder.landed`), so nothing is counted twice. The
crash points are in loop.py's docstring (step 5).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import redis
from redis.typing import EncodableT

from ..core.config import Settings
from ..core.hooks import Outcome, OutcomeReason, OutcomeStatus
from ..core.job import FailureReason, Job, encode_fields
from ..core.keys import Keys
from ..core.scripts import replies
from ..events.schema import outcome_fields
from .claim import Claimer, ClaimRound, Plan
from .counters import Counters
from .errors import REFUSED, UNREACHABLE, is_oom, wait_reachable
from .exits import HorseExit
from .horse.run import result_too_large
from .minutes import MinuteCounts
from .state import View

if TYPE_CHECKING:  # pragma: no cover
    from ..events.middleware import ScriptEvents

log = logging.getLogger(__name__)


#: A job its fork server or its worker died under this many times (each time running
#: beside other jobs, any of which may have killed it) fails instead of being given back
#: again; a job allowed more retries (``max_retries + 1``) gets that many.
SHARED_DEATHS_MAX = 3


def backoff_delay(settings: Settings, attempt: int, initial: float | None = None) -> float:
    """Delay before retry number ``attempt`` (1-based): initial * backoff^(n-1), capped, jittered."""
    base = settings.retry_delay if initial is None else initial
    delay = min(settings.retry_max_delay, base * settings.retry_backoff ** max(attempt - 1, 0))
    return delay * (1.0 + settings.retry_jitter * random.random())


def _too_large(settings: Settings, result: str | None) -> str | None:
    """Why ``result`` may not be stored, or None. The horse refused it already
    (horse/run.py): this holds for a result that came some other way."""
    return result_too_large(settings.max_result_bytes, result)


def decide(settings: Settings, job: Job[Any], exit_: HorseExit) -> Outcome:
    """The outcome of an attempt from the way its horse ended and the job's retry policy."""
    common: dict[str, Any] = dict(
        reason=exit_.reason, duration=exit_.duration, error_type=exit_.error_type,
        error_message=exit_.error_message, traceback=exit_.traceback)
    if exit_.ok:
        too_large = _too_large(settings, exit_.result_json)
        if too_large:      # never retried: the same job returns the same value again
            return Outcome(status=OutcomeStatus.FAILED, reason=OutcomeReason.EXCEPTION,
                           duration=exit_.duration, error_type="ResultTooLarge",
                           error_message=too_large, traceback="")
        return Outcome(status=OutcomeStatus.FINISHED, reason=OutcomeReason.OK,
                       duration=exit_.duration, result=exit_.result_json)
    if exit_.reason in (FailureReason.SHUTDOWN, FailureReason.LEASE, FailureReason.NEIGHBOUR):
        return Outcome(status=OutcomeStatus.REQUEUED, **common)
    if exit_.reason == FailureReason.STOPPED:     # on request: never retried
        return Outcome(status=OutcomeStatus.FAILED, not_retried="stopped on request",
                       **common)
    if exit_.shared:      # its fork server died under it: not its fault, up to a bound
        if job.shared_deaths + 1 < max(SHARED_DEATHS_MAX, job.max_retries + 1):
            # written with the give-back (requeue.lua 'return'), after the job's progress
            return Outcome(status=OutcomeStatus.REQUEUED, **common,
                           progress_fields=["shared_deaths", str(job.shared_deaths + 1)])
        common["error_message"] = (
            f"the fork server died under this job {job.shared_deaths + 1} times (a job "
            "running beside it, or this one, killed it each time): not tried again")
        return Outcome(status=OutcomeStatus.FAILED, **common)
    if exit_.retryable and job.attempts <= job.max_retries:
        if exit_.retry_delay is not None:
            delay = exit_.retry_delay
        elif job.retry_intervals:     # retry=Retry(max=, interval=[...]): as given
            delay = job.retry_intervals[min(job.attempts, len(job.retry_intervals)) - 1]
        else:
            delay = backoff_delay(settings, job.attempts, job.retry_delay)
        return Outcome(status=OutcomeStatus.RETRY, retry_delay=bounded_delay(delay), **common)
    return Outcome(status=OutcomeStatus.FAILED, not_retried=why_not_retried(job, exit_), **common)


#: the longest wait before a retry, as the longest timeout: ten years
RETRY_DELAY_MAX = 315_360_000.0


def bounded_delay(delay: Any) -> float:
    """A retry's delay as given (a record's ``retry_intervals``, a job's ``Retry(delay=)``)
    within 0 to :data:`RETRY_DELAY_MAX`: one no date can follow (``1e308``, ``inf``)
    waits ten years, one that is no number (``nan``) none."""
    try:
        seconds = float(delay)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if seconds != seconds:      # nan
        return 0.0
    return min(max(0.0, seconds), RETRY_DELAY_MAX)


def why_not_retried(job: Job[Any], exit_: HorseExit) -> str:
    """Why a failed attempt is the job's last, in words for the log."""
    if exit_.retryable:
        if job.max_retries == 0:
            return "not retried: max_retries is 0"
        return f"not retried: its {job.max_retries} retries are used up"
    if exit_.reason not in (FailureReason.EXCEPTION, FailureReason.TIMEOUT):
        return f"not retried: a failure of kind {exit_.reason} is not retried"
    what = exit_.error_type or str(exit_.reason)
    if job.max_retries == 0 and job.retry_on is None:    # the reason the job asked for
        return (f"not retried: max_retries is 0 (and {what} is not in "
                f"FUSIONWORKER_RETRYABLE)")
    if job.retry_on is not None:
        return (f"not retried: {what} is not among its retry_on "
                f"({', '.join(job.retry_on)})")
    return (f"not retried: {what} is not in FUSIONWORKER_RETRYABLE (give the job "
            f"retry_on=..., or retry=Retry(max=N) to retry any exception)")


#: why a job was given back (not counted), by its outcome's reason: the recorder's log
_GIVEN_BACK = {
    OutcomeReason.SHUTDOWN: "cold shutdown",
    OutcomeReason.NEIGHBOUR: "the kill of a job beside it in its async horse",
    OutcomeReason.LEASE: "its lease could not be renewed",
    # recorder.decide: `shared`, the only way a kill is given back
    OutcomeReason.KILLED: "the death of the fork server (or async horse) it shared with "
                          "other jobs, one of which may have caused it",
}

#: the job's status once an outcome of this status was recorded
_EXPECTED = {OutcomeStatus.FINISHED: "finished", OutcomeStatus.RETRY: "scheduled",
             OutcomeStatus.FAILED: "failed", OutcomeStatus.REQUEUED: "queued"}


class HashState(StrEnum):
    """What the heartbeat hash is known to say after a round trip of the recorder."""

    KEPT = "kept"          # as before (no view sent)
    WRITTEN = "written"    # the view sent with the outcomes
    UNKNOWN = "unknown"    # a write failed or was refused: write it again


@dataclass
class Recorded:
    """What :meth:`Recorder.record` did: the claims that rode along, and the hash."""

    claimed: ClaimRound
    hash: HashState = HashState.KEPT


class Recorder:
    """Writes outcomes (and carries claims) for one worker, and counts them.

    ``is_cold``: a cold shutdown is under way (nothing more is retried)."""

    def __init__(self, connection: Any, scripts: Any, keys: Keys, settings: Settings, *,
                 name: str, claimer: Claimer, is_cold: Callable[[], bool]) -> None:
        self.connection, self.scripts, self.keys, self.settings = connection, scripts, keys, settings
        self.name = name
        self.key = keys.worker(name)      # the heartbeat hash, where the counters are
        self.claimer = claimer
        self.is_cold = is_cold
        #: the job counters: the worker's totals, and the hash's increments not written
        #: yet (the heartbeat writes them)
        self.counters = Counters()
        #: the queues' per-minute outcome counts not written yet (the heartbeat too)
        self.minutes = MinuteCounts(scripts, keys, settings.result_ttl)
        #: finish.lua writes each outcome's event (events/middleware.py), or None
        self.events: ScriptEvents | None = None

    # -- the finish pipeline ----------------------------------------------------

    def record(self, ended: list[tuple[Job[Any], Outcome]], plan: Plan | None = None,
               view: tuple[View, dict[EncodableT, Any]] | None = None) -> Recorded:
        """Record every outcome in ``ended`` in one round trip; ``plan``'s claims ride at
        its end, ``view`` (the hash's new list of running jobs) in its middle.

        Returns what the claims brought (nothing when ``plan`` is None) and what the
        heartbeat hash is known to say now."""
        self.counters.count([outcome for _, outcome in ended])
        self.claimer.note(ended)       # fair share: this worker time counts at once,
        if plan is not None:           # and the claims riding here are dealt with it
            plan = self.claimer.replan(plan)
        pipe = self.connection.pipeline(transaction=False)
        calls = [self._queue_outcome(pipe, job, outcome) for job, outcome in ended]
        if view is not None:
            pipe.hset(self.key, mapping=view[1])
        use = self._queue_use(pipe, ended)
        if plan is not None:
            self.claimer.forget()
            self.claimer.queue_calls(pipe, plan)
            plan.sent = time.monotonic()
        try:
            answers = pipe.execute(raise_on_error=False)
        except UNREACHABLE as exc:
            return self._unsent(ended, plan, exc)
        # an outcome script not loaded yet (a Redis restarted, failed over, new) runs
        # again below, after the claims that rode here: what they found predates it
        rerun = any(isinstance(a, redis.exceptions.NoScriptError) for a in answers[:len(ended)])
        state = self._read_outcomes(ended, calls, answers)
        if view is not None:
            hset = answers[len(ended)]
            state = HashState.UNKNOWN if isinstance(hset, Exception) else HashState.WRITTEN
        if use is not None:
            self._learn_use(use, answers[len(ended) + (view is not None):])
        if plan is None:
            return Recorded(ClaimRound(), state)
        claims = answers[len(answers) - len(plan.calls):]
        self.claimer.reload_scripts(plan, claims)
        out = ClaimRound(asked=plan.asked, sent=plan.sent)
        out.jobs = self.claimer.take(plan, claims, out.dry)
        if rerun:       # (a cap still held by the jobs that ended): ask those queues again
            out.dry.clear()
            self.claimer.wake({queue for queue, _ in plan.calls})
        return Recorded(out, state)

    def _unsent(self, ended: list[tuple[Job[Any], Outcome]], plan: Plan | None,
                exc: Exception) -> Recorded:
        """The pipeline's reply was lost: each outcome on its own (it may have landed)."""
        log.warning("Worker %s: Redis unreachable while recording %d job(s) (%s); "
                    "recording each on its own", self.name, len(ended), exc)
        for job, outcome in ended:
            self.record_alone(job, outcome, lost_reply=True)
        return Recorded(ClaimRound(asked=plan.asked if plan else 0), HashState.UNKNOWN)

    def _read_outcomes(self, ended: list[tuple[Job[Any], Outcome]],
                       calls: list[tuple[str, list[Any], list[Any]]], answers: list[Any]
                       ) -> HashState:
        """The outcome scripts' replies, in order (one refused is recorded again); UNKNOWN:
        the heartbeat hash may not say what we think."""
        unknown = False
        # Redis restarted or failed over: each script is loaded and run once more
        self.scripts.reload_missing(answers, calls, catch=redis.RedisError)
        for (job, outcome), call, reply in zip(ended, calls, answers):
            if isinstance(reply, Exception):
                unknown |= self._failed(job, outcome, reply)
            else:
                self._recorded(job, outcome, *self._answer(job, outcome, call[0], reply))
        return HashState.UNKNOWN if unknown else HashState.KEPT

    def _queue_use(self, pipe: Any, ended: list[tuple[Job[Any], Outcome]]
                   ) -> tuple[list[str], list[str], list[Any]] | None:
        """Fair share (``--fair``): each attempt's worker time added to its queue's use
        (use.lua) and the use of the worker's queues read, in this pipeline. Returns
        what was queued (written, read, the writes' calls), or None."""
        fair = self.claimer.fair
        if fair is None:
            return None
        spent = [(job.queue, outcome.duration) for job, outcome in ended
                 if outcome.status != OutcomeStatus.REQUEUED]
        written = fair.queue_writes(pipe, spent)
        calls = [("use", [self.keys.queue(q).base], [f"{max(0.0, s):.6f}", fair.half_life])
                 for q, s in spent]
        read = fair.queue_reads(pipe, [q for q in self.claimer.loud_queues() if q not in written])
        return written, read, calls

    def _learn_use(self, use: tuple[list[str], list[str], list[Any]], answers: list[Any]
                   ) -> None:
        written, read, calls = use
        mine = answers[:len(written) + len(read)]
        # Redis restarted or failed over: use.lua is loaded and run once more
        self.scripts.reload_missing(mine, calls + [None] * len(read), catch=redis.RedisError)
        assert self.claimer.fair is not None
        self.claimer.fair.learn(written, read, mine)

    def _failed(self, job: Job[Any], outcome: Outcome, exc: Exception) -> bool:
        """The pipeline ran but this outcome's script answered an error. True: the
        heartbeat hash may not say what we think (write it again)."""
        if isinstance(exc, REFUSED) and (self.is_cold() or not is_oom(exc)):
            self._refused(job, exc)      # e.g. WRONGTYPE: sending it again cannot help
            return True
        log.error("Worker %s: recording job %s failed: %s; recording it again",
                  self.name, job.id, exc)
        return self.record_alone(job, outcome)

    def _refused(self, job: Job[Any], exc: Exception) -> None:
        """The job stays started; the reaper takes it back once its lease is over."""
        log.error("Worker %s: Redis refused the outcome of job %s (%s); it stays "
                  "started until the reaper recovers it", self.name, job.id, exc)

    def _queue_outcome(self, pipe: Any, job: Job[Any], outcome: Outcome) -> tuple[str, list[Any],
                                                                             list[Any]]:
        """Queue the outcome's script on ``pipe``; returns (script, keys, args) to re-run."""
        keys = [self.keys.queue(job.queue).base]
        if outcome.status == OutcomeStatus.REQUEUED:
            name, args = "requeue", [job.id, "return", job.token or "", self.settings.failed_ttl,
                                     *outcome.progress_fields]
        else:
            fields = encode_fields(
                result=outcome.result, error_type=outcome.error_type,
                error_message=outcome.error_message, traceback=outcome.traceback,
                failure_reason=None if outcome.status == OutcomeStatus.FINISHED else outcome.reason,
                not_retried=outcome.not_retried if outcome.status == OutcomeStatus.FAILED
                else None, duration=round(outcome.duration, 6),
            ) + outcome.progress_fields
            name = "finish"
            stopped = (outcome.status == OutcomeStatus.FAILED
                       and outcome.reason == OutcomeReason.STOPPED)
            args = [job.id, job.token or "", "stopped" if stopped else outcome.status,
                    self.settings.result_ttl,
                    self.settings.failed_ttl, outcome.retry_delay or 0, self.settings.dedup_window,
                    *self._event_block(job, outcome), *fields]
            if self.events is not None:     # finish.lua writes the outcome's event there
                keys.append(self.events.stream)
        getattr(self.scripts, name).queue_by_sha(pipe, keys, args)
        return name, keys, args

    def _event_block(self, job: Job[Any], outcome: Outcome) -> list[Any]:
        """finish.lua's event block: the outcome's event, as the event log's hook would
        emit it; [''] when the scripts write none."""
        if self.events is None:
            return [""]
        event, fields = outcome_fields(outcome)
        return self.events.block(event, job, **fields)

    # -- one outcome on its own, until Redis takes it ----------------------------

    def record_alone(self, job: Job[Any], outcome: Outcome, *, lost_reply: bool = False) -> bool:
        """Record one outcome of :meth:`record`'s (no claim; counted there), retrying with
        backoff while Redis is unreachable or out of memory. ``lost_reply``: an earlier
        attempt may have landed (looked up before writing again). True: it was refused
        for good (the heartbeat hash may not say what we think)."""
        delay = 0.5
        retrying = lost_reply
        while True:
            try:
                if retrying and self.landed(job, outcome):
                    stale, at = False, None   # the lost reply's write went through
                    break
                pipe = self.connection.pipeline(transaction=False)
                call = self._queue_outcome(pipe, job, outcome)
                answers = pipe.execute(raise_on_error=False)
                self.scripts.reload_missing(answers, [call], catch=())   # raised as before
                for value in answers:
                    if isinstance(value, Exception):
                        raise value
                stale, at = self._answer(job, outcome, call[0], answers[0])
                break
            except UNREACHABLE as exc:
                if self.is_cold():
                    log.error("Worker %s: Redis unreachable at cold shutdown; job %s stays "
                              "started and the reaper will recover it", self.name, job.id)
                    return False
                log.warning("Worker %s: Redis unreachable while recording job %s (%s); "
                            "retrying in %.1f s", self.name, job.id, exc, delay)
            except REFUSED as exc:
                if self.is_cold() or not is_oom(exc):
                    self._refused(job, exc)      # e.g. WRONGTYPE: retrying cannot help
                    return True
                log.warning("Worker %s: Redis refused the outcome of job %s (%s); retrying "
                            "in %.1f s", self.name, job.id, exc, delay)
                time.sleep(delay)                # OOM: the whole backoff
                retrying = True
                delay = min(delay * 2, 10.0)
                continue
            wait_reachable(self.connection, delay)   # a PING each 0.25 s cuts it short
            retrying = True
            delay = min(delay * 2, 10.0)
        self._recorded(job, outcome, stale, at)
        return False

    def landed(self, job: Job[Any], outcome: Outcome) -> bool:
        """After a lost reply: did our outcome write reach Redis before the connection broke?

        The scripts drop the token when they record; the job then shows the state
        our outcome gives it, under our worker name (a reaper's re-queue or another
        worker's claim looks different).
        """
        token, worker, status, reason = self.connection.hmget(
            self.keys.queue(job.queue).job(job.id), "token", "worker", "status", "failure_reason")
        if status is None:  # finished with result_ttl 0, or deleted
            return outcome.status == OutcomeStatus.FINISHED
        expected = ("stopped" if outcome.reason == OutcomeReason.STOPPED
                    else _EXPECTED[outcome.status])
        return (token != job.token and worker == self.name and status == expected
                and (outcome.status != OutcomeStatus.FAILED or reason == outcome.reason))

    def give_back(self, job: Job[Any]) -> None:
        """Shutdown began after a claim brought ``job``: it never ran, return it at its
        place without counting the attempt (as a cold shutdown does)."""
        try:
            self.scripts.requeue(keys=[self.keys.queue(job.queue).base],
                              args=[job.id, "return", job.token or "", self.settings.failed_ttl])
        except redis.RedisError as exc:
            log.error("Worker %s: Redis unreachable at shutdown (%s); job %s stays started "
                      "and the reaper will recover it", self.name, exc, job.id)
            return
        log.info("Worker %s: gave job %s back to %s (claimed as shutdown began, not started)",
                 self.name, job.id, job.queue)

    # -- after the write --------------------------------------------------------

    def _answer(self, job: Job[Any], outcome: Outcome, script: str,
                reply: Any) -> tuple[bool, float | None]:
        """(stale, at): stale when the script wrote nothing, the attempt no longer owning
        its job (token fence); ``at`` the server time finish.lua recorded the outcome. An
        outcome event finish.lua could not write is logged and said on ``outcome``."""
        if script == "finish":
            done = replies.finish(reply)
            outcome.event_lost = done.event_lost
            if done.event_lost:
                log.warning("Worker %s: the outcome of job %s was recorded, its event was "
                            "not (%s)", self.name, job.id, done.event_lost)
            return done.stale, done.at
        return replies.requeue(reply).outcome == "skipped", None

    def _recorded(self, job: Job[Any], outcome: Outcome, stale: bool,
                  at: float | None = None) -> None:
        self.counters.recorded(outcome, stale)
        if stale:
            outcome.recorded = False
            log.warning("Worker %s: outcome of job %s refused: the attempt was taken back "
                        "meanwhile, or its record lost with Redis's data (attempt token no "
                        "longer current)", self.name, job.id)
            return
        if outcome.status != OutcomeStatus.REQUEUED:   # finish.lua's: the chart counts it
            self.minutes.count(job.queue, at, str(outcome.status))
        ms = outcome.duration * 1000
        if outcome.status == OutcomeStatus.FINISHED:
            log.info("Worker %s finished job %s in %.1f ms", self.name, job.id, ms)
        elif outcome.status == OutcomeStatus.RETRY:
            log.warning("Worker %s: job %s failed (%s: %s); retry %d/%d in %.1f s",
                        self.name, job.id, outcome.error_type, outcome.error_message,
                        job.attempts, job.max_retries, outcome.retry_delay or 0)
        elif outcome.status == OutcomeStatus.REQUEUED:
            why = _GIVEN_BACK.get(outcome.reason, f"a failure of kind {outcome.reason}")
            log.warning("Worker %s: job %s interrupted by %s, put back on %s",
                        self.name, job.id, why, job.queue)
        else:        # stopped on request: an operator's act, said at WARNING
            log.log(logging.WARNING if outcome.reason == OutcomeReason.STOPPED
                    else logging.ERROR, "Worker %s: job %s failed [%s] %s: %s%s", self.name,
                    job.id, outcome.reason, outcome.error_type, outcome.error_message,
                    f"; {outcome.not_retried}" if outcome.not_retried else "")
