"""A slot: the worker's side of one running horse (its job, deadlines, kill) and
how it ended.

The loop (loop.py) owns the slots; a slot never talks to Redis. A launcher
(launch.py) makes them: a horse forked by the fork server (its exit comes as
an :class:`~fusionworker.runtime.protocol.ExitNotice`, :meth:`Slot.exited`),
one the worker forked itself (its report pipe and ``waitpid``,
:meth:`Slot.poll_own`), or a job that ended without a horse (a malformed
record, a refused function, a job run in this process by
``fusionworker.testing``): a slot that ended at birth (:meth:`Slot.ended`).

Deadlines, all monotonic, set by the loop:

* ``deadline``: timeout + kill_grace: SIGTERM of the horse's process group,
  SIGKILL :data:`KILL_ESCALATION` later if it lingers (the loop never blocks
  on a kill);
* ``lease_until``: a horse never outlives its lease (deadlines.py): the time
  the last claim or renewal of this job that reached Redis was SENT, + lease -
  margin (a renewal that comes after it passed moves nothing: :meth:`Slot.renew`);
  past it the loop kills the horse and the job is given back (``lease``, attempt
  not counted). The same deadline is on the worker's
  :class:`~fusionworker.runtime.deadlines.DeadlineBoard`, entry :attr:`index`,
  which the fork server's lease watchdog enforces (or, for a horse the worker
  forked itself, the horse's own).

A slot's life is one :class:`SlotState`, changed only by :meth:`Slot._enter` along
these transitions (anything else raises :class:`SlotStateError`)::

    born ASKED    (Slot.asked: sent to the fork server)
    born RUNNING  (a horse the worker forked itself)
    born ENDED    (Slot.ended: no horse: refused, or run in this process)
    ASKED   -> ASKED      ask_again (the server died before it answered: the request
                          went to another, once)
    ASKED   -> RUNNING    bind (the server's answer: the pid) or adopt (the server
                          died before it answered: the worker forked the horse)
    ASKED   -> ORPHANED   unanswered (the server died before it answered, and the request
                          goes to no other: a suspect's, or one asked twice)
    RUNNING -> ASKED      hand_on (a horse handed to the worker never read the job: it
                          died first, or refused it; the job went to the fork server)
    RUNNING -> ENDED      exited (the server's exit notice) or poll_own (reaped)
    RUNNING -> ORPHANED   origin_died (its fork server died: the horse with it)

ENDED and ORPHANED are final (:attr:`Slot.done`). An ASKED slot is policed,
renewed and listed like a running one; a kill asked for meanwhile is remembered
(``kill_reason``, ``kill_at``) and its signal sent when the pid is known (pid 0 is
never signalled: ``killpg(0)`` would be the worker's own group). A kill is not a
state: the horse is signalled, the slot stays RUNNING until its end is known.
``alone`` and ``blocking`` say who pays for a death (:meth:`Slot.outcome`), not
where the slot is.

An async horse (``--async-per-horse``) runs several jobs at once: their slots share
its pid and a :class:`HorseMates`; killing one kills the horse, and a job that died
with it without a report of its own pays only if it is the culprit (design.md,
"Async horses"). A stop of one (:meth:`Slot.stop`) kills nothing at first: its fork
server is asked to cancel the job's task (``cancel_at``: the horse is killed then if
the job has not ended; design.md, "A stop of one async job").
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from ..core.job import FailureReason, Job
from .exits import HorseExit, horse_exit
from .protocol import (
    FRAME_START,
    HorseReport,
    first_report_job,
    flooded,
    read_available,
    take_progress,
)

if TYPE_CHECKING:  # pragma: no cover
    from .forkserver.client import ForkServer
    from .protocol import ExitNotice

log = logging.getLogger(__name__)

#: Seconds between SIGTERM and SIGKILL of a horse's process group (and between a stop's
#: cancel of an async horse's task and the kill of that horse, if the job has not ended).
KILL_ESCALATION = 2.0


class SlotState(Enum):
    """Where a slot is in its life (the module docstring draws the transitions)."""

    ASKED = "asked"          #: sent to the fork server; its horse's pid not known yet
    RUNNING = "running"      #: its horse, pid known, runs the job (or ran it: not read yet)
    ENDED = "ended"          #: its horse's end is known (exit, reaped), or it had none
    ORPHANED = "orphaned"    #: its fork server died under it: the horse was killed with it

    #: equality is identity (a plain Enum), so is the hash: one C call, where Enum's own
    #: ``__hash__`` is Python code (a slot's state is looked up about 15 times a job)
    __hash__ = object.__hash__


#: the states a slot may go to from each (birth: ASKED, RUNNING or ENDED); checked in
#: :meth:`Slot._enter`, the one place a slot's state changes
_NEXT: dict[SlotState, frozenset[SlotState]] = {
    SlotState.ASKED: frozenset({SlotState.RUNNING, SlotState.ORPHANED}),
    SlotState.RUNNING: frozenset({SlotState.ENDED, SlotState.ORPHANED, SlotState.ASKED}),
    SlotState.ENDED: frozenset(),
    SlotState.ORPHANED: frozenset(),
}

_OVER = frozenset({SlotState.ENDED, SlotState.ORPHANED})


class SlotStateError(RuntimeError):
    """A slot was asked to go where its life cycle does not lead (a bug of the caller)."""


_READ_CHUNK = 65536


class HorseMates:
    """The slots of one async horse (they share its pid): who is to blame for its death."""

    __slots__ = ("slots", "loop_held", "orphan_held")

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        #: a job of the horse was named as holding its loop since the last report
        self.loop_held = False
        #: a task a finished job left held its loop since the last report: a timeout
        #: that passed meanwhile is no job's fault (:meth:`Slot._died_with_mates`)
        self.orphan_held = False

    def culprit(self, slot: Slot, now: float, asked: bool) -> bool:
        """Another job of the horse is known to have caused its death: it held the event
        loop and the worker killed the horse (``asked``), the worker killed the horse for
        it, or its lease was over."""
        return any(other is not slot and ((other.blocking and asked)
                                          or other.kill_reason is not None
                                          or now >= other.lease_until)
                   for other in self.slots)

    def asked(self) -> bool:
        """The worker killed the horse for one of its jobs (a timeout, the memory
        ceiling, a stop past its cancel...): only then does a held loop explain its
        death. A horse that died unasked (its own SIGKILL, a segfault, the OOM killer)
        died of no hold; nor did one whose stopped job was only asked to cancel its task
        (no signal yet: :meth:`Slot.cancel_pending`), e.g. a job that kills its own
        horse at the cancel: the stopped job is the culprit, the mates go back."""
        return any(other.kill_reason is not None and not other.cancel_pending
                   for other in self.slots)

    def blocked(self) -> bool:
        """A job of the horse held its event loop (the horse said so)."""
        return any(other.blocking for other in self.slots)

    def reported(self, slot: Slot) -> None:
        """``slot``'s job reported: it is never a culprit, and the horse's loop turned
        since any hold it named before (its notices come in the order it wrote them), so
        none of those holders is the culprit of a later death either."""
        self.slots.remove(slot)
        self.orphan_held = False
        if self.loop_held:     # (most reports: none named, no walk over the K mates)
            self.loop_held = False
            for other in self.slots:
                other.blocking = False


class Slot:
    """One running horse: its job, its hard deadline, its lease, its kill, its end.

    ``origin``: what forked the horse (the fork server's handle), None for a horse
    of the worker's own (``fd``: its report pipe) or a slot that ended at birth.
    ``state``: where it is born (a horse of the worker's own: RUNNING)."""

    def __init__(self, job: Job[Any], pid: int = 0, *, index: int = -1,
                 origin: ForkServer | None = None, fd: int = -1,
                 state: SlotState = SlotState.RUNNING) -> None:
        self._state = state
        self.job = job
        self.pid = pid
        self.origin = origin
        self.fd = fd
        self.index = index     # its entry on the worker's deadline board (-1: none)
        self.started = time.monotonic()
        #: when the job's horse took it (the fork server's answer; else ``started``): its
        #: run time is counted from here, not the fork server's own start-up
        self.ran_from = self.started
        self.started_at = time.time()
        self.deadline = math.inf               # timeout + kill_grace (the loop sets it)
        self.lease_until = math.inf
        self.kill_at: float | None = None      # SIGKILL escalation after a SIGTERM
        #: a stop of an async horse's job: its task's cancel was asked (:meth:`stop`); the
        #: horse is killed at this time if the job has not ended by then
        self.cancel_at: float | None = None
        self.next_tick = self.started          # the horse tick (memory ceiling): set by the loop
        self.kill_reason: FailureReason | None = None
        self.end_stamp: Any = None             # the end its horse stamped on its report
        self.exit: HorseExit | None = None     # known at birth: ended without a horse
        self._buf = bytearray()                # the report pipe's data / the exit's report
        self._status: int | None = None
        #: its fork server ran this job only (a suspect: launch.py); its death is the job's
        self.alone = False
        #: an async horse's job: the other jobs of that horse (None: a horse of its own)
        self.mates: HorseMates | None = None
        #: its async horse said this job holds its event loop (horse/asyncloop.py)
        self.blocking = False
        #: its request went to a second fork server, the first died before answering
        self.asked_again = False

    @classmethod
    def ended(cls, job: Job[Any], exit_: HorseExit, index: int = -1) -> Slot:
        """A job that ended without a horse of ours (refused, or run in this process)."""
        slot = cls(job, index=index, state=SlotState.ENDED)
        slot.exit = exit_
        slot.started -= exit_.duration     # it ran that long (in this process), or not at all
        slot.ran_from = slot.started
        return slot

    @classmethod
    def asked(cls, job: Job[Any], origin: ForkServer, index: int = -1) -> Slot:
        """A job sent to the fork server, its horse's pid not known yet (:meth:`bind`)."""
        return cls(job, index=index, origin=origin, state=SlotState.ASKED)

    @property
    def state(self) -> SlotState:
        return self._state

    def _enter(self, state: SlotState, *, unanswered: bool = False,
               unread: bool = False) -> None:
        """The one place a slot's state changes, only along :data:`_NEXT` (ASKED ->
        ORPHANED only by :meth:`unanswered`: an unanswered request is asked again, never
        taken for a dead horse by mistake; RUNNING -> ASKED only by :meth:`hand_on`: a job
        its horse never read)."""
        if state not in _NEXT[self._state] or (
                self._state is SlotState.ASKED and state is SlotState.ORPHANED
                and not unanswered) or (
                self._state is SlotState.RUNNING and state is SlotState.ASKED
                and not unread):
            raise SlotStateError(f"the slot of job {self.job.id} cannot go from "
                                 f"{self._state.value} to {state.value}")
        self._state = state

    @property
    def done(self) -> bool:
        """Its horse's end is known, or it had none (ENDED or ORPHANED)."""
        return self._state in _OVER

    def bind(self, pid: int) -> None:
        """ASKED -> RUNNING: the fork server answered, ``pid`` runs the job. A kill asked
        for meanwhile is sent now (its SIGKILL escalation keeps the time it was given)."""
        self._enter(SlotState.RUNNING)
        self.pid = pid
        self.ran_from = time.monotonic()
        if self.kill_at is not None and not self._cancel():
            self.signal_group(signal.SIGTERM)

    def ask_again(self, origin: ForkServer) -> None:
        """ASKED still: the fork server first asked died before it answered, and the
        request went to ``origin`` (launch.py); the wait for an answer starts again."""
        self.origin, self.started, self.asked_again = origin, time.monotonic(), True

    def hand_on(self, origin: ForkServer) -> None:
        """RUNNING -> ASKED: the horse the worker wrote the job to itself (the direct
        path, direct.py) never ran it (it died before reading it, or refused it); the job
        went to ``origin`` as a new request, whose answer binds the new pid (:meth:`bind`
        sends a kill asked for meanwhile)."""
        self._enter(SlotState.ASKED, unread=True)
        self.pid, self.origin, self.started = 0, origin, time.monotonic()

    def adopt(self, own: Slot) -> None:
        """ASKED -> RUNNING: the fork server died before it answered; the worker forked
        ``own`` for the job itself (launch.py), and this slot is that horse's from now on."""
        self._enter(SlotState.RUNNING)
        self.pid, self.fd, self.origin = own.pid, own.fd, None
        if self.kill_at is not None:
            self.signal_group(signal.SIGTERM)

    def moved(self, pid: int) -> None:
        """The job went to the horse ``pid`` instead (a warm horse died before it took
        it): a kill under way goes to the new horse."""
        self.pid = pid
        if self.kill_at is not None:
            self.signal_group(signal.SIGTERM)

    @property
    def forked(self) -> bool:
        """A horse runs (or ran, or is being started for) the job: it can be killed,
        its lease must be renewed."""
        return self.pid > 0 or self._state is SlotState.ASKED

    @property
    def killed(self) -> bool:
        return self.kill_reason is not None

    def wakes_at(self) -> float:
        """The next time the loop must look at this slot (a tick, a kill, an escalation)."""
        return min(self.deadline if self.kill_at is None else self.kill_at, self.lease_until,
                   self.next_tick, math.inf if self.cancel_at is None else self.cancel_at)

    # -- killing (never blocks) -----------------------------------------------------

    def kill(self, reason: str) -> None:
        """SIGTERM the horse's group now; SIGKILL follows at :attr:`kill_at`.

        ``reason`` becomes the attempt's failure reason (a middleware may name its own)."""
        if not self.forked:
            return
        if self.kill_reason is None:
            self.kill_reason = FailureReason.read(reason)
        if self.kill_at is None:
            self.signal_group(signal.SIGTERM)
            self.kill_at = time.monotonic() + KILL_ESCALATION

    def renew(self, until: float, write: Callable[[int, float], None]) -> bool:
        """A renewal of the job's lease reached Redis: its horse may live until ``until``,
        written on the board by ``write`` (the launcher's ``set_deadline``). False: the
        deadline it moves had passed before the new one was written (a parent frozen or
        starved past it): the fork server's watchdog or the horse's own thread may have
        killed it there, so the old deadline stays (the police kill it, and its death
        reads as ``lease``, not as a kill from outside). Checked after the write: a
        watcher that reads the clock, then the board, at or after the old deadline read
        the new one."""
        old = self.lease_until
        write(self.index, until)
        if time.monotonic() < old:
            self.lease_until = until
            return True
        write(self.index, old)
        return False

    def stop(self) -> None:
        """A stop request (``job stop``): the job's task is cancelled if it runs in an
        async horse (its mates run on), and the horse killed at :attr:`cancel_at` if it
        has not ended by then; any other horse is killed now (:meth:`kill`)."""
        if self.kill_reason is None and self.pid > 0 and self._cancel(FailureReason.STOPPED):
            return
        self.kill(FailureReason.STOPPED)

    def _cancel(self, reason: FailureReason | None = None) -> bool:
        """Ask the fork server to cancel this job's task in its async horse (a stop, the
        ``reason``, or one asked for before the pid was known: :meth:`bind`); the kill
        waits until :attr:`cancel_at`. False: not an async horse's job, not a stop, or
        the server could not be asked."""
        if (self.mates is None or self.origin is None or self.pid <= 0
                or (reason or self.kill_reason) != FailureReason.STOPPED
                or not self.origin.cancel(self.index)):
            return False
        self.kill_reason = FailureReason.STOPPED
        self.kill_at, self.cancel_at = None, time.monotonic() + KILL_ESCALATION
        return True

    @property
    def cancel_pending(self) -> bool:
        """A stop asked its task's cancel and the worker has sent its horse no signal
        yet (:meth:`escalate` sends SIGTERM at :attr:`cancel_at`)."""
        return self.cancel_at is not None and self.kill_at is None

    def escalate(self, now: float) -> None:
        """A cancel that did not end the job in time: the horse is killed (SIGTERM); a
        kill that lingers: SIGKILL."""
        if self.cancel_at is not None and now >= self.cancel_at:
            self.cancel_at = None
            if self.kill_at is None and not self.done:
                log.warning("Job %s did not end within %.0f s of its task's cancel (job "
                            "stop): killing its async horse %d (its other jobs go back to "
                            "their queue)", self.job.id, KILL_ESCALATION, self.pid)
                self.signal_group(signal.SIGTERM)
                self.kill_at = now + KILL_ESCALATION
                return
        if self.forked and self.kill_at is not None and now >= self.kill_at:
            self.signal_group(signal.SIGKILL)
            self.kill_at = now + KILL_ESCALATION

    def signal_group(self, sig: int) -> None:
        """Signal the horse's process group (the job's own children in it too), and the
        horse itself: a job may have moved it into another group of its session
        (``setpgid``), out of reach of the first. Nothing while its pid is not known
        (:meth:`bind` sends a kill asked for meanwhile)."""
        if self.pid <= 0:
            return
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, sig)
            except (ProcessLookupError, PermissionError):  # gone; a pgid reused by another
                pass

    def held_loop(self) -> None:
        """Its async horse named this job as holding its event loop: the culprit if the
        horse dies before a report of any of its jobs (:meth:`HorseMates.reported`)."""
        self.blocking = True
        if self.mates is not None:
            self.mates.loop_held = True

    # -- the horse's end --------------------------------------------------------------

    def exited(self, notice: ExitNotice) -> None:
        """RUNNING -> ENDED: the fork server reported this horse's exit (status, report)."""
        self._enter(SlotState.ENDED)
        self._buf.extend(notice.report)
        self._status = notice.status

    def origin_died(self, *, unanswered: bool = False) -> None:
        """RUNNING (or, ``unanswered``, ASKED) -> ORPHANED: the fork server died, its
        horses with it (PDEATHSIG); make sure (nothing is signalled while the pid is not
        known), say why."""
        self._enter(SlotState.ORPHANED, unanswered=unanswered)
        if self.kill_reason is None:
            self.kill_reason = FailureReason.KILLED
        self.signal_group(signal.SIGKILL)
        self._status = signal.SIGKILL

    def unanswered(self, worker: str) -> None:
        """ASKED -> ORPHANED: its fork server died before it said the job's horse started,
        and the request goes to no other (launch.py): a horse it forked for the job died
        with it (PDEATHSIG). Its pid is not known, so nothing is signalled."""
        log.warning("Worker %s: job %s (%s): %s died before starting it; it is started "
                    "nowhere else (it may be what kills them)", worker, self.job.id,
                    self.job.func, "its own fork server" if self.alone else "a second one")
        self.origin_died(unanswered=True)

    def poll_own(self, deliver: Callable[[Job[Any], str], None] | None = None,
                 flood: int = 0) -> bool:
        """A horse forked by the worker itself: read its pipe (progress frames go to
        ``deliver``), reap it once it is gone (RUNNING -> ENDED). True: it ended (now or
        before). ``flood``: the bytes of no report its pipe may hold (protocol.flood_max;
        past them the horse is killed, its job the culprit)."""
        if self.done or self.fd < 0:
            return self.done
        if self._read(deliver, flood):
            self._reap(block=True)
        elif not self._reap(block=False):
            return False
        else:   # a grandchild may hold the pipe open after the horse is gone
            self._read(deliver, flood)
        os.close(self.fd)
        self.fd = -1
        self._enter(SlotState.ENDED)
        return True

    def _read(self, deliver: Callable[[Job[Any], str], None] | None, flood: int) -> bool:
        """Read what the pipe has; True at EOF."""
        eof = read_available(self.fd, self._buf, _READ_CHUNK, limit=flood)
        if flood and len(self._buf) > flood:     # what is no report: its job pays
            if self.kill_reason is None:
                flooded(self.job.id, self.pid, len(self._buf))
                self.kill(FailureReason.KILLED)
            self._buf.clear()
            return eof
        if self._buf and self._buf[0] == FRAME_START:   # progress frames come first
            for update in take_progress(self._buf):
                if deliver is not None:
                    deliver(self.job, update)
        return eof

    def _reap(self, block: bool) -> bool:
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self._status = 0
            return True
        if pid == 0:
            return False
        self._status = status
        return True

    def ran_for(self) -> float:
        """How long the job ran, from its horse's start (:attr:`ran_from`) to the end the
        horse stamped on its report (the same monotonic clock), not to now: a worker held
        up meanwhile (Redis unreachable) read the report late, and a 20 s job was recorded
        as 33 s. A stamp that is no time between the two (job code writing its own
        report; a start read late too) is not used."""
        now = time.monotonic()
        if type(self.end_stamp) is float and self.ran_from <= self.end_stamp <= now:
            return self.end_stamp - self.ran_from
        return now - self.ran_from

    def outcome(self, *, cold: bool) -> HorseExit:
        """How the ended horse's attempt went. A horse killed at or past its lease (by its
        watchdog or by us) died of the lease: the job is given back, not failed; never
        in a cold shutdown, which gives every job back anyway."""
        if self.exit is not None:
            return self.exit
        if self.kill_at is not None:   # a grandchild may keep the pipe of a killed horse
            self.signal_group(signal.SIGKILL)     # (not a cancelled task's: its mates run)
        report, other = self._own_report()
        self.end_stamp = report.ended if report is not None else None
        exit_ = horse_exit(report, self._status or 0, time.monotonic() - self.started,
                           kill_reason=self.kill_reason,
                           timeout=self.job.timeout,
                           lost_server=self._state is SlotState.ORPHANED,
                           unread=len(self._buf) if report is None else 0)
        if other is not None:   # another job's: this one is not to blame
            _taken_over(exit_, other)
        self._died_with_server(exit_)
        if self.mates is not None and report is None and not exit_.ok and not cold:
            self._died_with_mates(exit_)
        if not cold:
            self._died_of_lease(exit_)
        return exit_

    def _own_report(self) -> tuple[HorseReport | None, str | None]:
        """The report read, if it is this job's, and the id of another job a report
        named instead (the horse is then killed: a job of it wrote on its pipe, and is
        not used again). A report naming no job is unreadable."""
        report = HorseReport.decode(self._buf)
        named = report.job if report is not None else first_report_job(self._buf)
        if named == self.job.id or (report is None and named is None):
            return report, None            # its own (or unreadable, naming nobody)
        self.signal_group(signal.SIGKILL)
        return None, named

    def _died_with_server(self, exit_: HorseExit) -> None:
        """Killed because its fork server died: the job's fault if it ran there alone,
        else ``shared`` (any job beside it may have killed it: not counted)."""
        if (self._state is not SlotState.ORPHANED or exit_.ok
                or exit_.reason != FailureReason.KILLED):
            return
        if self.alone and self.pid <= 0:     # it died before it answered for this job
            exit_.error_message = ("the fork server started for this job alone died "
                                   "before it said the job's horse started (the job "
                                   "killed it, or its memory use got it killed)")
        elif self.alone:    # nobody else ran there: this job killed it (or its memory)
            exit_.error_message = ("the fork server this job ran in alone died while "
                                   "it ran (the job killed it, or its memory use got "
                                   "it killed)")
        else:
            exit_.shared = True

    def _died_of_lease(self, exit_: HorseExit) -> None:
        """Killed at or past its lease (by its watchdog or by us): ``lease``, given back."""
        if (not exit_.ok and exit_.reason in (FailureReason.KILLED, FailureReason.LEASE)
                and time.monotonic() >= self.lease_until):
            exit_.reason, exit_.error_type = FailureReason.LEASE, "LeaseExpired"
            exit_.error_message = ("the worker could not renew the job's lease in time "
                                   "(frozen or cut off from Redis): its horse was killed")

    def _died_with_mates(self, exit_: HorseExit) -> None:
        """An async horse died under this job (no report of its own): a mate was the
        culprit -> ``neighbour`` (given back, not counted); no culprit known and it was
        not this one's own kill -> ``shared`` (as a fork server's death, bounded)."""
        now = time.monotonic()
        if self.mates is None or now >= self.lease_until:
            return
        if self.kill_reason == FailureReason.STOPPED:
            return               # stopped on request: its outcome, loop held or not
        asked = self.mates.asked()
        if self.blocking and asked:    # the culprit: its own timeout, or the mates' deadlines
            if exit_.reason != FailureReason.TIMEOUT:
                exit_.reason, exit_.error_type = FailureReason.KILLED, "EventLoopBlocked"
            exit_.error_message = ("the job blocked the event loop of its async horse "
                                   "(a blocking call in async code): the horse was killed")
            return
        if self.kill_reason == FailureReason.TIMEOUT and self.mates.orphan_held:
            exit_.reason, exit_.shared = FailureReason.KILLED, True   # no job held the loop
            exit_.error_message = ("its timeout passed while a task that a finished job "
                                   "of its async horse left held the event loop: the "
                                   "horse was killed with this job in it")
            return
        if self.kill_reason not in (None, FailureReason.TIMEOUT, FailureReason.MEMORY) or (
                self.kill_reason is not None and not self.mates.blocked()):
            return               # its own kill (stop, lease, shutdown), or nobody blocked
        if self.mates.culprit(self, now, asked):
            exit_.reason, exit_.error_type = FailureReason.NEIGHBOUR, "NeighbourKilled"
            exit_.error_message = ("another job of its async horse was killed (it blocked "
                                   "the event loop past its timeout, or was stopped): the "
                                   "horse died with this job in it")
        else:
            exit_.reason, exit_.shared = FailureReason.KILLED, True


def _taken_over(exit_: HorseExit, other: str) -> None:
    """The report read for a job is another job's (the one before it in a warm horse,
    whose job wrote a report of its own first: the horse's true one came late): this
    job is not to blame, so it goes back uncharged (``shared``, bounded as any death)."""
    exit_.reason, exit_.shared = FailureReason.KILLED, True
    exit_.error_type = "HorseTakenOver"
    exit_.error_message = (f"its horse reported for job {other[:64]!r} while it ran this "
                           "one (a job of the horse wrote on its report pipe): the horse "
                           "was killed")
