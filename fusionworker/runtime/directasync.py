"""The worker's side of async horses (``--async-per-horse K``; design.md, "Async
horses"): the fork server makes an async horse with an ``async def`` job's first
request and hands it over at once; from then on the worker writes its jobs (up to K
at a time) and the cancel frames of its stops on its job pipe, and reads its lines
in its own ``select()``. The fork server forks, reaps (a GoneNotice says the wait
status) and keeps its lease watchdog on the board entries this side marks as the
horse's; it relays nothing.

A part of :class:`~.direct.DirectHorses` (one per fork server), which provides the
attributes declared in :class:`AsyncDirect`. Who pays for a death is the slots'
business (slot.py, :class:`~.slot.HorseMates`, one per horse here).
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.job import Job
from .gpus import device_of
from .protocol import (
    HOLDS_LOOP,
    LEAVING,
    ExitNotice,
    HandoverNotice,
    RunRequest,
    cancel_for_horse,
    flooded,
    for_async_horse,
    read_available,
    report_of,
    take_lines,
    unread,
)
from .slot import HorseMates, Slot

if TYPE_CHECKING:  # pragma: no cover
    from .deadlines import DeadlineBoard
    from .forkserver.client import ForkServer

log = logging.getLogger(__name__)

#: lines of an async horse kept for jobs whose answer the worker has not read yet (a
#: job the server gave it in the turn it was made can end before its answer is read)
EARLY_MAX = 1024
#: the longest frame of an async job written here (else its request goes to the server,
#: which makes a horse of its own for it): a pipe with room takes it whole at once
ASYNC_FRAME_MAX = 60000


class _Batch:
    """The frames on their way to one async horse in one launch, by index in its jobs."""

    __slots__ = ("count", "frames", "rest", "sent", "size", "waiting")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.waiting: list[int] = []     # the frames' jobs, not written yet
        self.sent: list[int] = []        # written
        self.rest: list[int] = []        # not taken (no room, or the write failed)
        self.size = 0
        self.count = 0                   # frames given to it in all (its load)

    def add(self, data: bytes, i: int) -> None:
        self.frames.append(data)
        self.waiting.append(i)
        self.size += len(data)
        self.count += 1


class AsyncHanded:
    """An async horse handed to the worker: its pipes, the jobs it runs now by entry."""

    __slots__ = ("blocked", "buf", "device", "early", "fd", "handed", "job_w", "jobs", "mates",
                 "pid", "pipe_size", "status", "taking")

    def __init__(self, pid: int, job_w: int, fd: int, device: str | None) -> None:
        self.pid, self.job_w, self.fd, self.device = pid, job_w, fd, device
        self.handed = 0                      # jobs it was given in all (joined or written)
        self.pipe_size = fcntl.fcntl(job_w, fcntl.F_GETPIPE_SZ)   # what its job pipe holds
        self.jobs: dict[int, Slot] = {}      # entry -> slot: written, not reported
        #: lines of jobs the server gave it whose answer is not read yet (EARLY_MAX at most)
        self.early: list[bytes] = []
        self.mates = HorseMates()            # the same slots: who pays for its death
        self.buf = bytearray()
        self.status: int | None = None       # its wait status, once reaped (GoneNotice)
        #: it takes new jobs; once not (its cap, its "-"), its job pipe stays open until
        #: its last job reported: a stop of one of them is a cancel frame on that pipe
        self.taking = True
        #: a job of it holds its loop (it said so; cleared at its next report): no new job
        #: for it (its loop reads nothing: its job pipe would fill)
        self.blocked = False

    def room(self, k: int, cap: int, device: str | None, batch: _Batch | None) -> bool:
        """It may take a job: fewer than K jobs, fewer than ``cap`` handed (``batch``: the
        jobs on their way to it count), the slot's device, not closing, its loop not held
        (its pipe's room: :meth:`write`)."""
        more = batch.count if batch is not None else 0
        return (self.taking and not self.blocked and len(self.jobs) + more < k
                and self.handed + more < cap and self.device == device and self.job_w >= 0)

    def load(self, batches: dict[int, _Batch]) -> int:
        """Its jobs, with those on their way to it."""
        batch = batches.get(self.pid)
        return len(self.jobs) + (batch.count if batch is not None else 0)

    def write(self, data: bytes) -> bool:
        """``data`` (a frame) whole into its job pipe now, or nothing (False: no room, or
        it died). A frame of PIPE_BUF bytes or fewer is written at once or not at all (the
        pipe's own rule: no system call to ask first); a longer one only if the pipe has
        room for all of it now (FIONREAD), so that the worker never blocks on it."""
        if len(data) > select.PIPE_BUF and self.pipe_size - unread(self.job_w) < len(data):
            return False
        try:
            written = os.write(self.job_w, data)
        except BlockingIOError:
            return False
        except BrokenPipeError:      # it died (its EOF and its GoneNotice come)
            self.stop_taking()
            return False
        if written < len(data):      # (cannot be: the room was there) it is not used again
            self.stop_taking()
            return False
        return True

    def stop_taking(self) -> None:
        """No new job for it: its job pipe closes once its last job reported."""
        self.taking = False
        if not self.jobs:
            self.close_jobs()

    def close_jobs(self) -> None:
        """EOF on its job pipe: it exits once its last task ended."""
        if self.job_w >= 0:
            os.close(self.job_w)
            self.job_w = -1


class AsyncDirect:
    """The async horses one fork server handed over (module docstring)."""

    # provided by DirectHorses
    flood_max: int
    origin: ForkServer
    board: DeadlineBoard | None
    deliver: Callable[[Job[Any], str], None]
    ep: select.epoll
    by_fd: dict[int, Any]
    trace: bool
    retiring: bool

    def init_async(self, k: int) -> None:
        self.async_k = max(1, k)
        #: ``async def`` functions (the server's answer said so): their jobs come here, and
        #: how many a horse may be handed in all for each (its cap)
        self.async_funcs: dict[str, int] = {}
        self.async_horses: dict[int, AsyncHanded] = {}     # by pid
        #: gets (entry, seconds): that job holds its horse's loop (the launcher logs it)
        self.on_blocked: Callable[[int, float], None] | None = None
        #: gets an entry: its job was asked of the server and its answer is not read yet
        self.awaited: Callable[[int], bool] = lambda entry: False

    def adopt_async(self, notice: HandoverNotice, job_w: int, fd: int) -> None:
        """A new async horse, its first job (``notice.entry``) written by the server; the
        slots of the jobs the server gave it join it as their answers are read
        (:meth:`join`), the first right after this."""
        os.set_blocking(fd, False)
        os.set_blocking(job_w, False)
        horse = AsyncHanded(notice.pid, job_w, fd, device_of(notice.entry))
        self.async_horses[horse.pid] = horse
        self.by_fd[fd] = horse
        self.ep.register(fd, select.EPOLLIN)
        if self.retiring:
            horse.taking = False       # its job pipe closes once its jobs reported

    def join(self, slot: Slot, pid: int, cap: int) -> None:
        """``slot``'s job is one the server gave the async horse ``pid`` (its answer, of a
        function whose horses may be given ``cap`` jobs): its mates are that horse's, and
        the horse's death is the slot's end. Lines it wrote for the job meanwhile are
        read once the slot is bound (:meth:`drop_early`)."""
        self.async_funcs[slot.job.func] = max(1, cap)
        horse = self.async_horses.get(pid)
        if horse is None:             # (its handover was dropped: the slot stands alone)
            slot.mates = HorseMates()
            slot.mates.slots.append(slot)
            return
        slot.mates = horse.mates
        horse.mates.slots.append(slot)
        horse.jobs[slot.index] = slot
        horse.handed += 1
        if horse.handed >= cap:
            horse.taking = False
        self._own(slot.index, pid)

    def drop_early(self, entry: int, keep: int = 0) -> None:
        """The answer of the job on ``entry`` was read: the lines an async horse wrote for
        it before are read now if it is ``keep`` (its horse's pid), dropped anywhere else."""
        head = b"%d " % entry
        for horse in list(self.async_horses.values()):
            if not horse.early:
                continue
            mine = [line for line in horse.early if line.startswith(head)]
            if mine:
                horse.early = [line for line in horse.early if not line.startswith(head)]
            if horse.pid == keep:
                for line in mine:
                    self._line(horse, line)

    def _own(self, entry: int, pid: int) -> None:
        """The server's watchdog: the board entry is ``pid``'s (0: nobody's)."""
        if self.board is not None:
            self.board.set_owner(entry, pid)

    def take_async(self, jobs: list[tuple[Job[Any], int]]) -> tuple[list[Slot], list[int]]:
        """Write each (job, entry) of a function known as async to the fullest async horse
        with room (the others may retire), the frames of one horse in as few writes as
        PIPE_BUF allows (each wakes its loop once): their slots, bound to their horses,
        and the indexes in ``jobs`` of those no horse took (the server makes a new one)."""
        batches: dict[int, _Batch] = {}
        for i, (job, entry) in enumerate(jobs):
            best = self._fullest(job, entry, batches)
            data = b"" if best is None else for_async_horse(
                entry, RunRequest.of(job, entry, self.trace).body)
            if best is None or len(data) > ASYNC_FRAME_MAX:
                batches.setdefault(0, _Batch()).rest.append(i)
                continue
            batch = batches.setdefault(best.pid, _Batch())
            if batch.size + len(data) > select.PIPE_BUF and batch.frames:
                self._send(best, batch)        # this one's frames first: a batch is atomic
            batch.add(data, i)
        slots: list[Slot] = []
        for pid, batch in batches.items():
            owner = self.async_horses.get(pid)
            if owner is None:                  # (0: the jobs no horse took)
                continue
            if batch.frames:
                self._send(owner, batch)
            slots += [self._bound(owner, *jobs[i]) for i in batch.sent]
        rest = [i for batch in batches.values() for i in batch.rest]
        return slots, sorted(rest)

    def _fullest(self, job: Job[Any], entry: int,
                 batches: dict[int, _Batch]) -> AsyncHanded | None:
        """The async horse with the most jobs (those on their way counted) that may take
        ``job`` on ``entry``: the others may retire."""
        cap, device = self.async_funcs[job.func], device_of(entry)
        best: AsyncHanded | None = None
        for horse in self.async_horses.values():
            if (horse.room(self.async_k, cap, device, batches.get(horse.pid))
                    and (best is None or horse.load(batches) > best.load(batches))):
                best = horse
        return best

    @staticmethod
    def _send(horse: AsyncHanded, batch: _Batch) -> None:
        """The batch's frames, written whole or not at all (not: their jobs are rest)."""
        if horse.write(b"".join(batch.frames)):
            batch.sent += batch.waiting
        else:
            batch.rest += batch.waiting
        batch.frames, batch.waiting, batch.size = [], [], 0

    def _bound(self, horse: AsyncHanded, job: Job[Any], entry: int) -> Slot:
        """The slot of a job written to ``horse``."""
        slot = Slot(job, horse.pid, index=entry, origin=self.origin)
        slot.mates = horse.mates
        horse.mates.slots.append(slot)
        horse.jobs[entry] = slot
        horse.handed += 1
        if horse.handed >= self.async_funcs[job.func]:
            horse.stop_taking()
        self._own(entry, horse.pid)
        return slot

    # -- what the horses write ---------------------------------------------------------

    def read_async(self, horse: AsyncHanded) -> None:
        """The report pipe of an async horse is readable: its lines, then its end."""
        eof = read_available(horse.fd, horse.buf, drained=True, limit=self.flood_max)
        if self.flood_max and len(horse.buf) > self.flood_max:
            self._flooded(horse)
        for line in take_lines(horse.buf):
            self._line(horse, line)
        if eof:
            self._unwatch_async(horse)
            horse.close_jobs()
            if horse.status is not None or not horse.jobs:
                self._async_gone(horse)

    def _line(self, horse: AsyncHanded, line: bytes) -> None:
        """One line: a progress frame, a report, ``-``, or the job that holds the loop."""
        if line == LEAVING:
            horse.stop_taking()
            return
        if line[:1] == HOLDS_LOOP:          # "!<entry> <seconds>"
            self._holds_loop(horse, line[1:])
            return
        head, _, rest = line.partition(b" ")
        try:
            entry = int(head)
        except ValueError:
            return                    # not ours to read: the horse wrote garbage
        slot = horse.jobs.get(entry)
        if slot is None:
            if len(horse.early) < EARLY_MAX and self.awaited(entry):
                horse.early.append(line)  # its answer comes: read then (drop_early)
            return
        if rest[:1] == b"\x1e":
            self.deliver(slot.job, rest[1:].decode("utf-8", "replace"))
            return
        if report_of(slot.job.id) not in rest:   # no report of this job: a job wrote it
            self._forged(horse, slot)
            return
        del horse.jobs[slot.index]
        horse.blocked = False             # its loop turns again
        self._own(slot.index, 0)
        slot.exited(ExitNotice(horse.pid, 0, rest, slot.index))
        horse.mates.reported(slot)        # never a culprit; the loop turned
        if not horse.taking and not horse.jobs:
            horse.close_jobs()            # EOF: it exits (no task is left)

    def _flooded(self, horse: AsyncHanded) -> None:
        """A job of the horse writes on its report pipe what is no line: which one is not
        known, so the horse dies unasked (SIGKILL of its group) and its jobs are given back
        as at any death of no known cause (each runs again apart, where the flood is its
        own: slot.py)."""
        flooded(f"of async horse {horse.pid} (one of {len(horse.jobs)})", horse.pid,
                len(horse.buf))
        _kill_unasked(horse)

    def _forged(self, horse: AsyncHanded, slot: Slot) -> None:
        """A report line on ``slot``'s entry that is not its job's: a job of the horse
        wrote it (which one is not known). The horse dies unasked, as at a flood: its
        jobs go back as at any death of no known cause."""
        log.error("A report of async horse %d for job %s is not that job's (a job of the "
                  "horse wrote on its report pipe): the horse is killed, its %d job(s) go "
                  "back", horse.pid, slot.job.id, len(horse.jobs))
        _kill_unasked(horse)

    def _holds_loop(self, horse: AsyncHanded, rest: bytes) -> None:
        try:
            entry, seconds = rest.split(b" ")
            if entry == b"-":        # a task a finished job left holds it: no job is
                float(seconds)       # to blame (HorseMates.orphan_held)
                horse.blocked = horse.mates.orphan_held = True
                return
            slot, held = horse.jobs.get(int(entry)), float(seconds)
        except ValueError:
            return
        if slot is not None:
            horse.blocked = True
            if self.on_blocked is not None:
                self.on_blocked(slot.index, held)

    def cancel(self, entry: int) -> bool:
        """A stop of the job on ``entry``: a cancel frame to its async horse (if its job
        pipe has room now: a loop held by a job reads nothing, and could not cancel
        anyway). False: no async horse runs it (it reported: its outcome is here)."""
        for horse in self.async_horses.values():
            if entry in horse.jobs:
                if horse.job_w >= 0:     # (not written: it died, its GoneNotice ends it)
                    horse.write(cancel_for_horse(entry))
                return True
        return False

    # -- its end -------------------------------------------------------------------------

    def gone_async(self, pid: int, status: int) -> None:
        """The server reaped ``pid``: an async horse's unreported jobs end now with its
        wait status, once what it wrote before it died was read (any other pid: nothing)."""
        horse = self.async_horses.get(pid)
        if horse is None:
            return
        horse.status = status
        if horse.fd >= 0:
            self.read_async(horse)        # dead: its pipe ends after what it wrote
        if horse.fd >= 0:                 # a child it left holds its pipe open
            self._unwatch_async(horse)
        self._async_gone(horse)

    def _async_gone(self, horse: AsyncHanded) -> None:
        """Its pipe ended: its jobs without a report died with it (reaped), or it had none
        left (it exits; the server reaps it)."""
        horse.close_jobs()
        if horse.status is None and horse.jobs:
            return                        # dead or dying: its status comes (GoneNotice)
        self.async_horses.pop(horse.pid, None)
        for entry, slot in list(horse.jobs.items()):
            self._own(entry, 0)
            slot.exited(ExitNotice(horse.pid, horse.status or 0, b"", entry))
        horse.jobs.clear()

    def _unwatch_async(self, horse: AsyncHanded) -> None:
        if self.by_fd.pop(horse.fd, None) is not None:
            self.ep.unregister(horse.fd)
        os.close(horse.fd)
        horse.fd = -1

    def retire_async(self, closing: bool) -> None:
        """SIGHUP: no new job for any of them (each exits after its last one); ``closing``
        (the worker stops, or their server died with them): every pipe closed now."""
        for horse in list(self.async_horses.values()):
            horse.stop_taking()
            if closing:
                horse.close_jobs()
                if horse.fd >= 0:
                    self._unwatch_async(horse)
                self.async_horses.pop(horse.pid, None)


def _kill_unasked(horse: AsyncHanded) -> None:
    """Nothing more of the horse is read or given: SIGKILL its group (a death nobody
    asked for: slot.py gives its jobs back as at any death of no known cause)."""
    horse.buf.clear()
    horse.stop_taking()
    try:
        os.killpg(horse.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
