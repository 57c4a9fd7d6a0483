"""The worker's job counters, in one place: ``successful``, ``failed``,
``total_working_time`` of the worker hash (increments not written yet) and of the
``Worker`` object (its totals since it started, :attr:`Counters.total`).

They are counted here as the recorder records outcomes (the same rule as ever: a
finished outcome counts in ``successful``, a failure for good in ``failed``, every
outcome's duration in ``total_working_time``) and written to the worker's hash by the
next heartbeat (heartbeat.py, in the pipeline it sends anyway) and once more when the
worker stops (before the ``on_stop`` hooks and the deregistration), not by every
job's finish pipeline: two commands (``HINCRBY`` and ``HINCRBYFLOAT``) less per job,
as Sidekiq's processed/failed stats are. What the hash says is at most one heartbeat
interval behind the recorded outcomes while Redis answers (docs/design.md).

A write Redis refused (OOM) or that did not reach it is given back and goes with the
next heartbeat; a write whose reply was lost (the connection broke after sending)
is given back too, so after a connection loss the counters may count one heartbeat's
jobs twice: they are statistics, never read by a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..core.hooks import Outcome, OutcomeStatus
from ..core.redis_client import execute_settled


@dataclass
class Counts:
    """Increments of the worker hash's counters."""

    successful: int = 0
    failed: int = 0
    working: float = 0.0

    def add(self, other: Counts) -> None:
        self.successful += other.successful
        self.failed += other.failed
        self.working += other.working


class Counters:
    """The increments counted since the last write that Redis took."""

    def __init__(self) -> None:
        self.unwritten = Counts()
        #: this worker's totals (``Worker.successful``, ...): outcomes Redis took, and
        #: the duration of every attempt
        self.total = Counts()

    def recorded(self, outcome: Outcome, stale: bool) -> None:
        """One outcome's write answered: ``stale`` when the token fence refused it."""
        self.total.working += outcome.duration
        if stale:
            return
        if outcome.status == OutcomeStatus.FINISHED:
            self.total.successful += 1
        elif outcome.status == OutcomeStatus.FAILED:
            self.total.failed += 1

    def count(self, outcomes: Sequence[Outcome]) -> None:
        """Count recorded outcomes (each once)."""
        for outcome in outcomes:
            if outcome.status == OutcomeStatus.FINISHED:
                self.unwritten.successful += 1
            elif outcome.status == OutcomeStatus.FAILED:
                self.unwritten.failed += 1
            self.unwritten.working += outcome.duration

    def queue(self, pipe: Any, key: str) -> tuple[Counts, int]:
        """Queue the increments on ``pipe`` (nothing when there are none) and take them:
        returns them and how many commands were queued. Hand both to :meth:`settle` with
        the commands' answers, or the increments to :meth:`give_back` when the pipeline
        raised."""
        taken, self.unwritten = self.unwritten, Counts()
        n = 0
        if taken.successful:
            pipe.hincrby(key, "successful", taken.successful)
            n += 1
        if taken.failed:
            pipe.hincrby(key, "failed", taken.failed)
            n += 1
        if taken.working:
            pipe.hincrbyfloat(key, "total_working_time", taken.working)
            n += 1
        return taken, n

    def settle(self, taken: Counts, answers: Sequence[Any]) -> None:
        """The answers of the commands :meth:`queue` queued: a refusal gives the
        increments back, whole (the hash is written by whole heartbeats)."""
        if any(isinstance(answer, Exception) for answer in answers):
            self.give_back(taken)

    def give_back(self, taken: Counts) -> None:
        self.unwritten.add(taken)

    def flush(self, connection: Any, key: str, ttl: int) -> None:
        """Write the increments now, in a round trip of their own (at stop), renewing the
        hash's TTL as a heartbeat does. Raises what Redis raised, the increments given
        back."""
        pipe = connection.pipeline(transaction=False)
        taken, n = self.queue(pipe, key)
        if not n:
            return
        pipe.expire(key, ttl)
        execute_settled(pipe, partial(self.give_back, taken), partial(self.settle, taken))
