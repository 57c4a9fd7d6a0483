"""The direct path (design.md, "The direct path"): the warm horses a fork server
handed to the worker. The worker writes their jobs on their job pipes and reads
their reports in its own ``select()``; the fork server only forks them, reaps
them (a :class:`~.protocol.GoneNotice` says a handed horse's wait status) and
keeps its lease watchdog on them (the board's owner of each entry, written here).

One :class:`DirectHorses` per fork server (launch.py). A horse is idle (its
report pipe read to its last report, nothing in its job pipe) or runs one job
(its slot); the async horses are this class's too (directasync.py).
Every handed horse's report pipe is in one epoll from its handover to its
retirement, idle or not: no system call per job to watch it or stop, and an idle
horse that writes or dies wakes the worker's ``select()`` like a running one,
and is retired (:meth:`DirectHorses.poll`); one that dies between that look and
its next job fails the job's write (EPIPE) or leaves the job unread in its pipe,
which is handed on.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ..core.job import FailureReason, Job
from .directasync import AsyncDirect, AsyncHanded
from .gpus import device_of
from .protocol import (
    ACCEPT,
    REFUSED,
    STAY,
    ExitNotice,
    HandoverNotice,
    RunRequest,
    flood_max,
    flooded,
    for_horse,
    frame,
    has_report,
    read_available,
    take_progress,
    unread,
)
from .slot import Slot

if TYPE_CHECKING:  # pragma: no cover
    from .deadlines import DeadlineBoard
    from .forkserver.client import ForkServer

#: A job frame longer than this goes through the fork server: an idle horse's empty
#: pipe takes it whole without blocking the worker (a pipe holds 64 KiB).
DIRECT_MAX = 60000


class DirectHorse:
    """A horse handed to the worker: its pipe ends, its jobs so far, its job now."""

    __slots__ = ("buf", "device", "done", "fd", "funcs", "job_w", "pid", "refused", "slot",
                 "status", "verdict")

    def __init__(self, pid: int, job_w: int, fd: int, done: int, device: str | None) -> None:
        self.pid, self.job_w, self.fd, self.done, self.device = pid, job_w, fd, done, device
        self.buf = bytearray()
        self.slot: Slot | None = None       # the job it runs (None: idle)
        self.status: int | None = None      # its wait status, once reaped (GoneNotice)
        #: it wrote a refusal where none was owed: killed, the job handed on once gone
        self.refused = False
        #: the functions it ran (no verdict owed for their jobs: horse/warm.py)
        self.funcs: set[str] = set()
        #: its job now is of a function it has not run: its first bytes are its verdict,
        #: ACCEPT (and the cap) or REFUSED, written before any of the job's code ran
        self.verdict = False


class DirectHorses(AsyncDirect):
    """The horses one fork server handed over (module docstring)."""

    def __init__(self, origin: ForkServer, board: DeadlineBoard | None,
                 deliver: Callable[[Job[Any], str], None]) -> None:
        self.origin, self.board, self.deliver = origin, board, deliver
        self.trace = bool(origin.otel)
        #: the server process that handed them (a server started again in place is
        #: another: these died with the first)
        self.pid = origin.proc.pid if origin.proc is not None else 0
        self.idle: list[DirectHorse] = []            # the most recently used last
        self.by_pid: dict[int, DirectHorse] = {}
        #: by report pipe, until retired (an async horse's too: directasync.py)
        self.by_fd: dict[int, Any] = {}
        #: every handed horse's report pipe: the loop's select() waits on this one
        #: descriptor, and a turn reads only the pipes that have something (not every one)
        self.ep = select.epoll()
        #: by function: jobs a warm sync horse running it may run, as the server's answer
        #: or a handed horse's verdict said (1: its jobs go to the server: async, or fresh
        #: horses); unknown: --horse-jobs, and the horse says (verdict)
        self.caps: dict[str, int] = {}
        self.horse_jobs = (origin.warm or {}).get("horse_jobs", 1)
        #: modules a job of which went through the server (which imported the module
        #: then, so the horses it forks from then on have it): only their jobs come here
        self.modules: set[str] = set()
        #: its fork server was replaced (SIGHUP): no horse comes back to ``idle``
        self.retiring = False
        self.flood_max = flood_max(origin.result_cap)
        self.init_async((origin.warm or {}).get("async_per_horse", 1))

    def adopt(self, notice: HandoverNotice, job_w: int, fd: int) -> None:
        """A horse the server handed over (idle, its first job reported; an async one
        with its first job: directasync.py)."""
        if notice.shared:
            self.adopt_async(notice, job_w, fd)
            return
        if self.retiring:
            os.close(job_w)
            os.close(fd)
            return
        os.set_blocking(fd, False)
        os.set_blocking(job_w, False)
        horse = DirectHorse(notice.pid, job_w, fd, notice.done, device_of(notice.entry))
        if notice.func:
            horse.funcs.add(notice.func)
        self.by_pid[horse.pid] = horse
        self.by_fd[fd] = horse
        self.ep.register(fd, select.EPOLLIN)
        self.idle.append(horse)

    # -- a job goes to a horse ---------------------------------------------------------

    def take(self, job: Job[Any], entry: int) -> Slot | None:
        """Write ``job`` to an idle horse that may run it (fewer jobs than the function's
        cap, the slot's device): its slot, bound to that pid. None: none may (the job goes
        to the fork server)."""
        cap = self.caps.get(job.func, self.horse_jobs)
        if cap <= 1 or not self.idle or job.func.partition(":")[0] not in self.modules:
            return None
        device = device_of(entry)
        data = b""              # the frame, made once a horse fits (else the server's)
        for i in range(len(self.idle) - 1, -1, -1):     # the most recently used first
            horse = self.idle[i]
            if horse.done >= cap or horse.device != device:
                continue
            if not data:
                data = frame(for_horse(RunRequest.of(job, entry, self.trace)))
                if len(data) > DIRECT_MAX:
                    return None
            if not self._write(horse, data):
                self.retire(horse)         # it died idle
                continue
            del self.idle[i]
            slot = horse.slot = Slot(job, horse.pid, index=entry, origin=self.origin)
            horse.buf = bytearray()
            horse.verdict = job.func not in horse.funcs
            if self.board is not None:     # the fork server's watchdog: whose entry
                self.board.set_owner(entry, horse.pid)
            return slot
        return None

    @staticmethod
    def _write(horse: DirectHorse, data: bytes) -> bool:
        """The whole frame into the horse's empty job pipe; False: it is gone (EPIPE)."""
        try:
            written = os.write(horse.job_w, data)
            if written < len(data):        # a pipe smaller than the frame: the rest waits
                os.set_blocking(horse.job_w, True)
                try:
                    view = memoryview(data)[written:]
                    while view:
                        view = view[os.write(horse.job_w, view):]
                finally:
                    os.set_blocking(horse.job_w, False)
        except (BrokenPipeError, BlockingIOError):
            return False
        return True

    # -- reports and deaths ------------------------------------------------------------

    def waitables(self) -> list[Any]:
        return [self.ep] if self.by_fd else []

    def _unwatch(self, horse: DirectHorse) -> None:
        """Its report pipe is no longer read (it reached EOF, or the horse is retired)."""
        if self.by_fd.pop(horse.fd, None) is not None:
            self.ep.unregister(horse.fd)

    def poll(self, readable: Collection[Any] | None) -> list[Slot]:
        """Read the running horses' report pipes (``readable``: what select() found; None:
        all): progress goes to its job, a report ends its slot. Returns the slots whose
        horse died with their job unread in its job pipe: to be handed on."""
        moved: list[Slot] = []
        if readable is not None and self.ep not in readable:
            return moved
        for fd, _ in self.ep.poll(0):
            horse = self.by_fd.get(fd)
            if horse is None:
                continue
            if isinstance(horse, AsyncHanded):
                self.read_async(horse)
                continue
            if horse.slot is None:        # idle: it wrote when it should not, or died
                self.retire(horse)
                continue
            moved += self._read(horse, fd)
        return moved

    def _read(self, horse: DirectHorse, fd: int) -> list[Slot]:
        """What a running horse wrote: its verdict, progress, its report, its end."""
        moved: list[Slot] = []
        # report + STAY: one write; at most flood_max bytes of what is no report
        eof = read_available(fd, horse.buf, drained=True, limit=self.flood_max)
        if self.flood_max and len(horse.buf) > self.flood_max and horse.slot is not None:
            if not horse.slot.killed:
                flooded(horse.slot.job.id, horse.pid, len(horse.buf))
                horse.slot.kill(FailureReason.KILLED)     # its job's own doing: it pays
            horse.buf.clear()
            return moved
        if horse.verdict and not self._verdict(horse, eof):
            if horse.slot is not None:          # it declined: nothing of the job ran
                moved.append(self._declined(horse, eof))
            return moved
        self._progress(horse)
        if horse.refused:
            horse.buf.clear()         # what a refusing horse writes: never a report
        elif horse.buf == REFUSED + STAY and horse.slot is not None:
            self._refuse(horse)
        elif has_report(horse.buf) and horse.buf.endswith(STAY):
            self._finish(horse, 0, bytes(horse.buf[:-len(STAY)]))
            if eof:
                self.retire(horse)
            else:
                self._rest(horse)
            return moved
        if eof:
            self._unwatch(horse)
            moved += self._ended(horse)
        return moved

    def _progress(self, horse: DirectHorse) -> None:
        if horse.slot is not None and horse.buf[:1] == b"\x1e":
            for update in take_progress(horse.buf):
                self.deliver(horse.slot.job, update)

    def _verdict(self, horse: DirectHorse, eof: bool) -> bool:
        """The horse's verdict on a function it has not run, at the front of what it
        wrote: True once it may run it (the cap it said is learnt), or while the verdict
        is still on its way; False: it declined (REFUSED). Anything else is no verdict,
        and what follows is read as any report (a broken horse's job fails)."""
        buf = horse.buf
        if buf[:1] == ACCEPT:
            end = buf.find(b"\n")
            if end < 0 and not eof:
                return True                 # the rest of the line comes
            if end < 0:
                end = len(buf) - 1          # cut off by its death
            slot = horse.slot
            if slot is not None and buf[1:end].isdigit():
                self.caps[slot.job.func] = max(1, int(buf[1:end]))
                horse.funcs.add(slot.job.func)
            del buf[:end + 1]
        elif buf.startswith(REFUSED + STAY):
            return False
        elif not buf and not eof:
            return True                     # nothing yet
        horse.verdict = False
        return True

    def _declined(self, horse: DirectHorse, eof: bool) -> Slot:
        """The horse may not run the job it was written (its function's cap, or async),
        and said so before any of the job's code ran: the function's next jobs go to the
        server, the horse is idle again, the job goes to the server now."""
        slot = horse.slot
        assert slot is not None
        self.caps[slot.job.func] = 1
        self._release(horse)
        horse.verdict = False
        if eof:
            self.retire(horse)
        else:
            self._idle_again(horse)
        return slot

    def _refuse(self, horse: DirectHorse) -> None:
        """A refusal where no verdict was owed: the job wrote those bytes itself (its
        horse never refuses a job whose verdict it gave). The horse is killed, and the
        job handed on only once the server reaped it (:meth:`gone`): it must not run
        twice at once."""
        slot = horse.slot
        assert slot is not None
        horse.refused = True
        slot.signal_group(signal.SIGKILL)

    def _rest(self, horse: DirectHorse) -> None:
        """It reported and stays: idle again (retired if its server was replaced)."""
        horse.done += 1
        self._idle_again(horse)

    def _idle_again(self, horse: DirectHorse) -> None:
        """Back in ``idle`` for its next job (retired if its server was replaced)."""
        horse.buf = bytearray()
        if self.retiring:
            self.retire(horse)
        else:
            self.idle.append(horse)

    def _ended(self, horse: DirectHorse) -> list[Slot]:
        """Its report pipe reached EOF (no stay): it left after its report (status 0, the
        server reaps it), or it died: the job unread in its pipe is handed on; else its
        slot ends with its wait status (now, or once the server's notice says it)."""
        slot = horse.slot
        if horse.refused and slot is not None:
            if horse.status is None:
                return []      # its pipe's end is not its death: wait for the reap (gone)
            self._release(horse)          # reaped: its job goes to the server
            self.retire(horse)
            return [slot]
        if has_report(horse.buf):
            self._finish(horse, 0, bytes(horse.buf))
        elif slot is not None and not horse.buf and unread(horse.job_w):
            self._release(horse)
            self.retire(horse)
            return [slot]
        elif horse.status is not None:
            self._finish(horse, horse.status, bytes(horse.buf))
        else:
            return []           # its status comes (gone)
        self.retire(horse)
        return []

    def gone(self, pid: int, status: int) -> list[Slot]:
        """The server reaped a handed horse: an idle one is dropped; a running one's slot
        ends with its status once its pipe was read (or its job is handed on)."""
        horse = self.by_pid.get(pid)
        if horse is None:
            self.gone_async(pid, status)
            return []
        horse.status = status
        if horse.slot is None:
            self.retire(horse)
            return []
        if horse.fd in self.by_fd:      # dead: what it wrote is in the pipe already
            self._unwatch(horse)
            read_available(horse.fd, horse.buf, limit=self.flood_max)
        if horse.verdict and not self._verdict(horse, True):
            return [self._declined(horse, True)]      # it declined, then died: none ran
        self._progress(horse)
        if has_report(horse.buf) and horse.buf.endswith(STAY):
            del horse.buf[-len(STAY):]
        return self._ended(horse)

    def _finish(self, horse: DirectHorse, status: int, report: bytes) -> None:
        """The job's outcome is known: its slot ends as a relayed one would."""
        slot = horse.slot
        if slot is None:
            return
        self._release(horse)
        slot.exited(ExitNotice(horse.pid, status, report, slot.index))

    def _release(self, horse: DirectHorse) -> None:
        slot, horse.slot = horse.slot, None
        if slot is not None and self.board is not None:
            self.board.set_owner(slot.index, 0)

    def retire(self, horse: DirectHorse) -> None:
        """Close the worker's ends: an idle horse reads EOF and exits (its server reaps
        it); one that runs a job is dying with it (close) or dead already."""
        if horse in self.idle:
            self.idle.remove(horse)
        self._unwatch(horse)
        if self.by_pid.get(horse.pid) is horse:
            del self.by_pid[horse.pid]
        self._release(horse)
        if horse.job_w >= 0:
            os.close(horse.job_w)
            os.close(horse.fd)
            horse.job_w = horse.fd = -1

    def retire_idle(self) -> None:
        """SIGHUP: the idle horses go now, the running ones after their job."""
        self.retiring = True
        for horse in list(self.idle):
            self.retire(horse)
        self.retire_async(closing=False)

    def close(self) -> None:
        """Every horse goes (the worker stops, or their server died with them)."""
        self.retiring = True
        for horse in list(self.by_pid.values()):
            self.retire(horse)
        self.retire_async(closing=True)
        self.ep.close()
