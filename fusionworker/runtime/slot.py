"""A slot: one running horse (its job, its deadlines, its kill) and how it ended.

The loop (loop.py) owns the slots; a slot never talks to Redis. Its horse
was forked by the fork server (its exit comes as a message on the server's
socket, :meth:`Slot.exited`) or by the worker itself (its pipe and
``waitpid``, :meth:`Slot.poll_own`). A job that ends without a horse (a
malformed record, a refused function, a job run in this process by
``fusionworker.testing``) is a slot that ended at birth (:meth:`Slot.ended`).

Deadlines, all monotonic:

* ``deadline``: timeout + kill_grace: SIGTERM of the horse's process group,
  SIGKILL :data:`KILL_ESCALATION` later if it lingers (the loop never blocks
  on a kill);
* ``lease_until``: a horse never outlives its lease (horse.py docstring):
  the time the last claim or renewal of this job that reached Redis was SENT,
  + lease - margin; past it the loop kills the horse and the job is given
  back (``lease``, attempt not counted). The same deadline is on the
  worker's :class:`~fusionworker.runtime.horse.DeadlineBoard`, entry
  :attr:`index`, which the fork server's lease watchdog enforces (or, for a
  horse the worker forked itself, the horse's own).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from ..core.job import FailureReason, Job
from .horse import Horse, HorseExit

#: Seconds between SIGTERM and SIGKILL of a horse's process group.
KILL_ESCALATION = 2.0


class Slot:
    """One running horse: its job, its hard deadline, its lease, its kill."""

    def __init__(self, job: Job[Any], horse: Horse | None, *, kill_after: float = 0.0,
                 lease_until: float = 0.0, index: int = -1) -> None:
        self.job = job
        self.horse = horse
        self.started = time.monotonic()
        self.started_at = time.time()
        self.deadline = self.started + kill_after
        self.lease_until = lease_until
        self.index = index     # its entry on the worker's deadline board (-1: none)
        self.kill_at: float | None = None      # SIGKILL escalation after a SIGTERM
        self.next_tick = self.started          # the horse tick (memory ceiling): set by the loop
        self.exit: HorseExit | None = None     # known at birth: ended without a horse
        self.done = False

    @classmethod
    def ended(cls, job: Job[Any], exit_: HorseExit, index: int = -1) -> Slot:
        """A job that ended without a horse of ours (refused, or run in this process)."""
        slot = cls(job, None, index=index)
        slot.exit, slot.done = exit_, True
        slot.started -= exit_.duration     # it ran that long (in this process), or not at all
        return slot

    @property
    def pid(self) -> int:
        return self.horse.pid if self.horse is not None else 0

    @property
    def killed(self) -> bool:
        return self.horse is not None and self.horse._kill_reason is not None

    def wakes_at(self) -> float:
        """The next time the loop must look at this slot (a tick, a kill, an escalation)."""
        return min(self.deadline if self.kill_at is None else self.kill_at, self.lease_until,
                   self.next_tick)

    # -- killing (never blocks) -----------------------------------------------------

    def kill(self, reason: str) -> None:
        """SIGTERM the horse's group now; SIGKILL follows at :attr:`kill_at`."""
        if self.horse is None:
            return
        if self.horse._kill_reason is None:
            self.horse._kill_reason = FailureReason.read(reason)
        if self.kill_at is None:
            self.horse._signal_group(signal.SIGTERM)
            self.kill_at = time.monotonic() + KILL_ESCALATION

    def escalate(self, now: float) -> None:
        if self.horse is not None and self.kill_at is not None and now >= self.kill_at:
            self.horse._signal_group(signal.SIGKILL)
            self.kill_at = now + KILL_ESCALATION

    # -- the horse's end --------------------------------------------------------------

    def exited(self, msg: dict[str, Any]) -> None:
        """The fork server reported this horse's exit (status and report)."""
        assert self.horse is not None
        self.horse._buffer.extend(msg.get("report", "").encode())
        self.horse._status = int(msg["status"])
        self.done = True

    def server_died(self) -> None:
        """The fork server died: its horses died with it (PDEATHSIG); make sure, say why."""
        assert self.horse is not None
        self.horse._lost_server = True
        if self.horse._kill_reason is None:
            self.horse._kill_reason = FailureReason.KILLED
        self.horse._signal_group(signal.SIGKILL)
        self.horse._status = signal.SIGKILL
        self.done = True

    def poll_own(self) -> None:
        """A horse forked by the worker itself (no fork server): read its pipe, reap it."""
        horse = self.horse
        if self.done or horse is None:
            return
        if horse._read():
            horse._reap(block=True)
        elif not horse._reap(block=False):
            return
        else:
            horse._read()     # a grandchild may hold the pipe open after the horse is gone
        if horse._fd >= 0:
            os.close(horse._fd)
            horse._fd = -1
        self.done = True

    def outcome(self, *, cold: bool) -> HorseExit:
        """How the ended horse's attempt went. A horse killed at or past its lease (by its
        watchdog or by us) died of the lease: the job is given back, not failed; never
        in a cold shutdown, which gives every job back anyway."""
        if self.exit is not None:
            return self.exit
        horse = self.horse
        assert horse is not None
        if horse._kill_reason is not None:   # a grandchild may keep the pipe of a killed horse
            horse._signal_group(signal.SIGKILL)
        horse._kill_leftovers()              # what the job left in its process group
        exit_ = horse._outcome(time.monotonic() - self.started)
        if (not exit_.ok and exit_.reason in (FailureReason.KILLED, FailureReason.LEASE)
                and not cold and time.monotonic() >= self.lease_until):
            exit_.reason, exit_.error_type = FailureReason.LEASE, "LeaseExpired"
            exit_.error_message = ("the worker could not renew the job's lease in time "
                                   "(frozen or cut off from Redis): its horse was killed")
        return exit_
