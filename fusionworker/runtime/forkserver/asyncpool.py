"""The fork server's side of async horses (``worker --async-per-horse K``; design.md,
"Async horses"): which horse runs an ``async def`` job, its report lines, its death.

An async horse (horse/asyncloop.py) runs up to K jobs at once on one event loop; a
sync job never goes to one. The server hands it a job as a warm horse's frame whose
body starts with :data:`ASYNC` (the first one makes a ready horse an async horse);
it answers each job with its own notices (``"e"``: the job's board entry). What the
horse writes is lines (:func:`take_lines`): ``<entry> <progress frame>``,
``<entry> <report>``, ``-`` (it takes no more jobs), ``!<entry> <seconds>`` (that
job holds the loop). After the cap-th job it handed or at ``-`` the horse gets no new
job, and the server closes its job pipe once its last job reported; the horse exits
once its job pipe reached EOF and its last task ended. A horse that died: one exit
notice per job it had not reported (its wait status, no report).

A stop of one job (the worker's :class:`~..protocol.CancelRequest`, design.md, "A stop
of one async job"): a cancel frame (:func:`~..protocol.cancel_for_horse`) down the job
pipe of the horse that runs it, which cancels that task only. The request of a job no
horse runs (it reported: its outcome is on its way), of a horse that died, or whose
job pipe cannot take the frame now, is let be: the worker kills the horse if the job
has not ended at its kill escalation. Crash points: the server dies after the worker
asked (before or after the frame): its horses die with it, the stopped job ends
``stopped``, its mates as at any fork server's death (``shared``); the horse dies after
the frame: one exit notice per unreported job (the stopped one ``stopped``, its mates
``neighbour``); the job's report line came first: the request finds no horse running
it; the frame came before the job's task began: the horse never starts it. Each has
its test in tests/runtime/test_async_stop.py.
"""

from __future__ import annotations

import fcntl
import inspect
import os
import select
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol import (
    BlockedNotice,
    CancelRequest,
    ExitNotice,
    ProgressNotice,
    RunRequest,
    StartNotice,
    cancel_for_horse,
    for_horse,
    frame,
    read_available,
    unread,
    write_all,
)
from ..slot_device import device_of
from .handover import Outgoing
from .modules import REMEMBER_MAX, remember

if TYPE_CHECKING:  # pragma: no cover
    from ..deadlines import LeaseWatchdog

#: the first byte of the body of an async job's frame (a body is a marshalled dict: its
#: first byte is "{", or 0xFB with marshal's reference flag, never "A")
ASYNC = b"A"
#: what an async horse writes when it takes no more jobs (a line of its own)
LEAVING = b"-"
#: the start of an async horse's line naming the job that holds its loop
BLOCKED = b"!"


def coroutine_function(target: Any) -> bool:
    """``target`` (a resolved job function, or its ``@job`` handle) is ``async def``."""
    try:
        return inspect.iscoroutinefunction(inspect.unwrap(target))
    except ValueError:      # a __wrapped__ cycle
        return False


def take_lines(buf: bytearray) -> list[bytes]:
    """Cut every complete line off the front of ``buf`` (without its newline)."""
    end = buf.rfind(b"\n")
    if end < 0:
        return []
    lines = bytes(buf[:end]).split(b"\n")
    del buf[:end + 1]
    return lines


class AsyncHorse:
    """An async horse in the server: its pipes and the jobs it runs now, by entry."""

    def __init__(self, pid: int, job_w: int, fd: int, device: str | None) -> None:
        self.pid, self.job_w, self.fd, self.device = pid, job_w, fd, device
        self.pipe_size = fcntl.fcntl(job_w, fcntl.F_GETPIPE_SZ)   # what its job pipe holds
        self.jobs: dict[int, str] = {}      # entry -> func, handed and not reported
        self.handed = 0                     # jobs it was handed in all
        self.buf = bytearray()
        self.status: int | None = None      # its wait status, once reaped
        #: it takes new jobs; once not (the cap, "-"), its job pipe stays open until its
        #: last job reported: a stop of one of them is a cancel frame on that pipe
        self.taking = True
        #: a job of it holds its loop (it said so; cleared at its next report): no new
        #: job goes to it (its job pipe would fill, and the server block writing to it)
        self.blocked = False

    @property
    def open(self) -> bool:
        """It takes more jobs (its job pipe is open, and it was not retired)."""
        return self.taking and self.job_w >= 0

    def retire(self) -> None:
        """No new job for it: its job pipe closes once its last job reported."""
        self.taking = False
        if not self.jobs:
            self.close_jobs()

    def close_jobs(self) -> None:
        """No more jobs for it: EOF on its job pipe (it exits after its last task)."""
        if self.job_w >= 0:
            os.close(self.job_w)
            self.job_w = -1


class AsyncHorses:
    """The server's async horses (a part of ``server.Server``, which provides the
    attributes declared below)."""

    # provided by Server
    out: list[Outgoing]
    ep: select.epoll
    watchdog: LeaseWatchdog | None
    resolved: dict[str, Callable[..., Any]]
    tried: set[str]
    allowed: tuple[str, ...]
    exiting: set[int]
    horse_jobs: int
    slots: int
    ready: list[Any]
    spawn: Callable[[], Any]

    def init_async(self, k: int) -> None:
        """K async jobs per horse; the pool (``slots`` horses) shrinks to the horses C
        async jobs need (C/K): sync jobs beyond them get horses forked on demand."""
        self.async_k = max(1, k)
        if self.async_k > 1:
            self.slots = -(-self.slots // self.async_k)
        self.async_horses: dict[int, AsyncHorse] = {}     # by pid
        self.async_fds: dict[int, AsyncHorse] = {}        # report pipe -> its horse
        self.is_async: dict[str, bool] = {}               # func -> async def (once known)

    def runs_async(self, func: str) -> bool:
        """An ``async def`` job that goes to an async horse (its function resolved here,
        so its module was allowed and loaded: warm rule)."""
        if self.async_k <= 1:
            return False
        known = self.is_async.get(func)
        if known is None:
            if (func not in self.resolved and func not in self.tried
                    and len(self.tried) < REMEMBER_MAX):   # its module is loaded (warm rule)
                self.tried.add(func)
                remember(self.resolved, func, self.allowed)
            target = self.resolved.get(func)
            if target is None:           # not resolved here (refused, import failed)
                return False
            known = self.is_async[func] = coroutine_function(target)
        return known

    def start_async(self, request: RunRequest, cap: int) -> None:
        """Hand ``request`` to an async horse with room (the fullest first: the others
        may retire), else make one of a ready horse (forked now if none is)."""
        device = device_of(request.entry)
        body = frame(for_horse(RunRequest(request.func, request.entry,
                                          ASYNC + request.body)))
        best = self._fullest_with_room(device, cap, len(body))
        if best is not None:
            try:
                write_all(best.job_w, body)
            except BrokenPipeError:      # it died (not reaped yet): no more jobs for it
                best.close_jobs()
                best = None
        if best is None:
            best = self._new_async_horse(body, device)
        best.jobs[request.entry] = request.func
        best.handed += 1
        if best.handed >= cap:
            best.retire()
        if self.watchdog is not None:
            self.watchdog.watch(best.pid, request.entry)
        self.out.append(StartNotice(best.pid, request.entry, shared=True).encode())

    def _fullest_with_room(self, device: str | None, cap: int,
                           size: int) -> AsyncHorse | None:
        """The open async horse on ``device`` with the most jobs that still takes one,
        and whose job pipe takes ``size`` bytes now: a loop held by a job reads nothing,
        and a write the pipe cannot take would block the server, and every job with it."""
        best: AsyncHorse | None = None
        for horse in self.async_horses.values():
            if (horse.open and not horse.blocked and len(horse.jobs) < self.async_k
                    and horse.device == device
                    and horse.handed < cap and (best is None or len(horse.jobs) > len(best.jobs))
                    and horse.pipe_size - unread(horse.job_w) >= size):
                best = horse
        return best

    def _new_async_horse(self, body: bytes, device: str | None) -> AsyncHorse:
        """A ready horse (forked now if none is) given ``body``, its first job: an async
        horse from now on, its report pipe watched. One that died meanwhile retires."""
        while True:
            fresh = self.ready.pop(0) if self.ready else self.spawn()
            try:
                write_all(fresh.job_w, body)
            except BrokenPipeError:
                fresh.retire()
                self.exiting.add(fresh.pid)
                continue
            horse = AsyncHorse(fresh.pid, fresh.job_w, fresh.report_r, device)
            os.set_blocking(horse.fd, False)
            self.async_horses[horse.pid] = horse
            self.async_fds[horse.fd] = horse
            self.ep.register(horse.fd, select.EPOLLIN)
            return horse

    def async_read(self, fd: int) -> None:
        """The report pipe of an async horse is readable: its lines, forwarded."""
        horse = self.async_fds.get(fd)
        if horse is None:
            return
        eof = read_available(fd, horse.buf)
        for line in take_lines(horse.buf):
            self.async_line(horse, line)
        if eof:
            self.ep.unregister(fd)
            del self.async_fds[fd]
            os.close(fd)
            horse.fd = -1
            horse.close_jobs()
            if horse.status is not None or not horse.jobs:
                self.async_gone(horse)

    def async_line(self, horse: AsyncHorse, line: bytes) -> None:
        """One line of an async horse: a progress frame, a report, or ``-``."""
        if line == LEAVING:
            horse.retire()
            return
        if line[:1] == BLOCKED:          # "!<entry> <seconds>": that job holds the loop
            self.async_blocked(horse, line[1:])
            return
        head, _, rest = line.partition(b" ")
        try:
            entry = int(head)
        except ValueError:
            return                    # not ours to read: the horse wrote garbage
        if entry not in horse.jobs:
            return
        if rest[:1] == b"\x1e":
            self.out.append(ProgressNotice(horse.pid, rest[1:].decode("utf-8", "replace"),
                                           entry).encode())
            return
        del horse.jobs[entry]
        horse.blocked = False             # its loop turns again
        if not horse.taking and not horse.jobs:
            horse.close_jobs()            # EOF: it exits (no task is left)
        if self.watchdog is not None:
            with self.watchdog.lock:
                self.watchdog.forget(horse.pid, entry)
        self.out.append(ExitNotice(horse.pid, 0, rest, entry).encode())

    def cancel(self, request: CancelRequest) -> None:
        """A stop of the job on ``request.entry``: a cancel frame to the async horse that
        runs it. Nothing when no horse runs it (it reported: its outcome is on its way;
        a sync job's: the worker kills that horse), when the horse died (its exit notices
        come), or when its job pipe cannot take the frame now (its loop is held: it could
        not cancel anyway): the worker's kill escalation ends what a cancel does not."""
        for horse in self.async_horses.values():
            if request.entry not in horse.jobs or horse.job_w < 0:
                continue
            data = cancel_for_horse(request.entry)
            if horse.pipe_size - unread(horse.job_w) >= len(data):
                try:
                    write_all(horse.job_w, data)
                except BrokenPipeError:      # it died (not reaped yet)
                    horse.close_jobs()
            return

    def async_blocked(self, horse: AsyncHorse, rest: bytes) -> None:
        try:
            entry, seconds = rest.split(b" ")
            notice = BlockedNotice(horse.pid, int(entry), float(seconds))
        except ValueError:
            return
        if notice.entry in horse.jobs:
            horse.blocked = True
            self.out.append(notice.encode())

    def async_reaped(self, pid: int, status: int) -> bool:
        """A reaped pid: True if it was an async horse (its unreported jobs end now)."""
        horse = self.async_horses.get(pid)
        if horse is None:
            return False
        horse.status = status
        if horse.fd >= 0:          # what it wrote before it died is in its pipe
            self.async_read(horse.fd)
        if horse.fd >= 0:
            self.ep.unregister(horse.fd)
            del self.async_fds[horse.fd]
            os.close(horse.fd)
            horse.fd = -1
        self.async_gone(horse)
        return True

    def async_gone(self, horse: AsyncHorse) -> None:
        """The horse's pipe ended: its jobs without a report died with it (reaped), or
        it had none left (reaped later, as any exiting horse)."""
        horse.close_jobs()
        if horse.status is None:       # EOF, no job left: it is exiting
            self.exiting.add(horse.pid)
            self.async_horses.pop(horse.pid, None)
            return
        for entry in list(horse.jobs):
            self.out.append(ExitNotice(horse.pid, horse.status, b"", entry).encode())
        horse.jobs.clear()
        self.async_horses.pop(horse.pid, None)

    def async_none_left(self) -> None:
        """No child is left: every async horse is gone (with its unreported jobs)."""
        for pid in list(self.async_horses):
            self.async_reaped(pid, 0)

    def async_kill_all(self, kill: Callable[[int], None]) -> None:
        """The worker is gone: every async horse still running a job is killed."""
        for horse in list(self.async_horses.values()):
            horse.close_jobs()
            if horse.jobs:
                kill(horse.pid)
