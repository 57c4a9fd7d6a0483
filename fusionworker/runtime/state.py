"""The worker's explicit state: one small object instead of fields that interact.

What the worker *is* (:class:`~fusionworker.core.job.WorkerState`, the
heartbeat hash's ``state``) is derived, never stored: busy while a horse
runs, else suspended, throttled or idle from the facts below. What the loop decides on lives in
:class:`LoopState`; what the heartbeat hash is known to say lives in
:attr:`LoopState.published`, so a write is sent only when the hash would
change (:class:`View`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from ..core.job import STATES, WorkerState  # the vocabulary (core/job.py)

__all__ = ["STATES", "LoopState", "Stop", "View", "WorkerState"]

log = logging.getLogger("fusionworker.runtime.loop")   # the loop's lines, as loop.py's


class Stop(StrEnum):
    """A shutdown under way (the first SIGTERM/SIGINT: warm; the second: cold)."""

    WARM = "warm"   # claim nothing more, let every running job finish
    COLD = "cold"   # kill every horse, give every job back unstarted (attempt not counted)


@dataclass(frozen=True)
class View:
    """What the heartbeat hash says about the worker's work (compared, then written)."""

    state: WorkerState
    throttle: str = ""
    jobs: tuple[str, ...] = ()     # ids of the running jobs it lists (current_jobs)

    @cached_property
    def listed(self) -> frozenset[str]:
        """:attr:`jobs` as a set, made once per view: the loop asks of each running job
        whether the hash lists it (with 1,000 slots a tuple's ``in`` was a million
        comparisons per look)."""
        return frozenset(self.jobs)


@dataclass
class LoopState:
    """Everything the claim/dispatch loop decides on, in one place."""

    stop: Stop | None = None          # a shutdown under way
    reload_requested: bool = False    # SIGHUP arrived: re-read the settings at the next turn
    suspended: bool = False           # fw:suspended (heartbeat) or a control message said so
    hold: str | None = None           # why a middleware holds claims (before_claim), or None
    looping: bool = False             # the loop runs (the worker left STARTED)
    want_claim: bool = True           # claim at the next chance: a wake-up, a freed slot
    next_poll: float = 0.0            # claim again at this time even without a wake-up
    next_heartbeat: float = 0.0       # monotonic times of the periodic work
    next_tick: float = 0.0
    cold_done: bool = False           # every horse was told to stop (cold shutdown)
    #: what the heartbeat hash is known to say; None: unknown (a write failed), rewrite it
    published: View | None = None

    def state(self, busy: bool) -> WorkerState:
        """What the worker is, from the facts (``busy``: a horse runs)."""
        if busy:
            return WorkerState.BUSY
        if not self.looping:
            return WorkerState.STARTED
        if self.suspended:
            return WorkerState.SUSPENDED
        if self.hold:
            return WorkerState.THROTTLED
        return WorkerState.IDLE

    def may_claim(self) -> bool:
        """Nothing known locally forbids a claim (the middleware is asked separately)."""
        return (self.stop is None and not self.reload_requested and not self.suspended
                and self.hold is None)

    def rearm(self) -> None:
        """A new ``work()`` of the same worker (RQ's tests call it again): what the last
        run's end left (its stop, its timers, what the hash says) is forgotten."""
        self.stop, self.cold_done, self.looping, self.published = None, False, False, None
        self.want_claim, self.next_poll, self.next_heartbeat, self.next_tick = True, 0.0, 0.0, 0.0

    def set_suspended(self, name: str, suspended: bool, shutdown: str | None = None) -> None:
        """What the heartbeat read (``fw:suspended``, a shutdown asked) or a control
        message said; resumed, the worker claims at once (a timed suspension ends with
        no message: its key expires), not at its next poll."""
        if shutdown in (Stop.WARM, Stop.COLD) and self.stop not in (shutdown, Stop.COLD):
            self.stop = Stop(shutdown)     # asked from elsewhere (design.md): as SIGTERM
            log.warning("Worker %s: %s shutdown asked from elsewhere", name, shutdown)
        if suspended != self.suspended:
            self.suspended = suspended
            self.want_claim |= not suspended
            log.warning("Worker %s %s", name,
                        "suspended: claiming nothing until resumed" if suspended else "resumed")
