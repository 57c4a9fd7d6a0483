"""A horse enforces its own lease: never two at once, whatever freezes.

The worker parent P moves each job's deadline on the deadline board
(runtime/deadlines.py) at every renewal that reached Redis; the fork server S
kills a horse past it (its lease watchdog) and so does P's police. With P and S
both stopped (SIGSTOP, a debugger, a frozen VM page) nobody was left to kill the
horse, and the reaper handed its job to another worker: two horses ran it. So
the horse H watches its own entry as well::

    S: map the board read-only from a read-only open of it (once, at its start;
       it holds no writable mapping nor descriptor: DeadlineBoard.reading)
    P (forking H itself, no S): map it read-only once the same way (BoardView)
    S or P: fork H; H inherits the read-only mapping (a job cannot write a
       deadline: PROT_READ of a read-only open file cannot be made writable);
       forked by P, H drops the writable mapping it inherited; it closes every
       other descriptor (hygiene.py)
    H: at its job (after it has a process group of its own): OwnLease.defer(entry):
       nothing started yet; run.py arms SIGALRM at the job's timeout or, sooner,
       at board[entry] (alarm_after: one setitimer, the one it made anyway)
    H: a job that ends before its deadline ends there (most jobs: no thread, no
       syscall of the lease's own)
    H: SIGALRM at board[entry] (on_alarm): now >= board[entry] (not renewed) ->
       SIGKILL H's own group; else (renewed) the thread starts and SIGALRM is
       armed again at the timeout
    H: the thread (OwnLease.watch, which async horses call at once): read
       board[entry]; now >= it -> SIGKILL H's own group (the job's children too),
       else sleep until it (at most CHECK s: a warm horse's next job may be on
       another entry) and read again
    P: renewals move board[entry] later (deadlines.py): the thread reads the new
       value when it wakes, and sleeps again
    H warm, between jobs: OwnLease.idle(): no entry, nothing to enforce
    H async (--async-per-horse): one entry per running job (watch(entry) as each
       starts, idle(entry) as each ends); the nearest deadline of them kills H

Crash points: P and S stopped -> the board stays, H kills itself at the deadline,
which is before the lease Redis holds ends (it was computed from the time the
renewal was SENT, minus a margin); the reaper re-queues the job once the lease is
over and finds no horse running it. P dies -> S dies with it (PDEATHSIG) and so
does H. S dies -> H dies with it (PDEATHSIG). H's thread cannot run (the job holds
the GIL in C code for the whole lease) -> as before, S's watchdog and P's police
kill it; only with P and S stopped as well does the job outrun its lease. Before
the thread starts, the SIGALRM handler runs when the job is back in Python or its
system call is interrupted (sleep, socket, wait: PEP 475), so only a job sitting in
one C call that ignores signals from its start to its first deadline, with P and S
both stopped, ends when that call returns instead of at the deadline.
The kill is SIGKILL at or past the deadline the worker's slot holds: the worker
records it as a lease kill (``lease``, the job given back, attempt not counted).
"""

from __future__ import annotations

import _thread
import ctypes
import os
import signal
import time
from typing import Protocol

_PROT_READ = 1
_MAP_SHARED = 1
_ENTRY = ctypes.sizeof(ctypes.c_double)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]


class BoardView:
    """The deadline board, read-only, in a horse: a ``PROT_READ`` shared mapping of
    ``fd`` (opened read-only, :meth:`DeadlineBoard.reader_fd`); the descriptor is not
    kept (the caller's is closed with the horse's others)."""

    def __init__(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        self.entries = size // (2 * _ENTRY)   # deadlines, then owners (deadlines.py)
        addr = _libc.mmap(None, max(size, 1), _PROT_READ, _MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "cannot map the deadline board")
        self._addr: int = addr

    def get(self, entry: int) -> float:
        """Entry ``entry``'s deadline (monotonic seconds; 0: none)."""
        if not 0 <= entry < self.entries:
            return 0.0
        return float(ctypes.c_double.from_address(self._addr + _ENTRY * entry).value)


class Readable(Protocol):
    """A read-only board: :class:`BoardView`, or the fork server's board itself
    (``DeadlineBoard.reading``: mapped read-only, inherited by its horses)."""

    entries: int

    def get(self, entry: int) -> float: ...


class OwnLease:
    """The horse's own lease watcher (module docstring): one thread, started at the
    first job."""

    #: seconds the thread sleeps at most between two reads of the board
    CHECK = 1.0

    def __init__(self, view: Readable) -> None:
        self.view = view
        self.entry = -1         # the running job's board entry; -1: no job
        self.more: set[int] = set()    # an async horse's other running jobs' entries
        self._started = False

    def watch(self, entry: int) -> None:
        """A job runs on board entry ``entry`` (call once the horse has its own
        process group: the kill is that group's); the thread runs from now. An async
        horse's next job: one more entry watched (the nearest deadline counts)."""
        if self.entry >= 0 and entry != self.entry:
            self.more.add(entry)
        else:
            self.entry = entry
        if not self._started:
            self._started = True
            _thread.start_new_thread(self._run, ())

    def defer(self, entry: int) -> None:
        """As :meth:`watch`, the thread started only if the job is still running at its
        deadline (run.py's SIGALRM, :func:`alarm_after`, :func:`on_alarm`): a thread
        costs a horse more CPU than a short job (module docstring)."""
        global _deferred
        self.entry = entry
        _deferred = None if self._started else self

    def deadline(self) -> float:
        """The running job's deadline (monotonic seconds; 0: none)."""
        entry = self.entry
        return self.view.get(entry) if 0 <= entry < self.view.entries else 0.0

    def idle(self, entry: int | None = None) -> None:
        """The job ended (a warm horse waits for its next): nothing to enforce; or
        (``entry``) one job of an async horse ended, its others still run."""
        if entry is None or (entry == self.entry and not self.more):
            self.entry = -1
            self.more.clear()
        elif entry == self.entry:
            self.entry = self.more.pop()
        else:
            self.more.discard(entry)

    def nearest(self) -> tuple[int, float]:
        """(an entry, its deadline): the running job's, or the nearest of an async
        horse's jobs (0: no deadline)."""
        entry, deadline = self.entry, self.deadline()
        for other in tuple(self.more):
            value = self.view.get(other) if 0 <= other < self.view.entries else 0.0
            if value > 0 and (deadline <= 0 or value < deadline):
                entry, deadline = other, value
        return entry, deadline

    def _run(self) -> None:  # pragma: no cover - a thread of the horse
        while True:     # the clock first: a deadline moved since is read (Slot.renew)
            now = time.monotonic()
            entry, deadline = self.nearest()
            if deadline > 0 and now >= deadline and (entry == self.entry or entry in self.more):
                expire()
            time.sleep(self.CHECK if deadline <= 0 else max(0.001, min(self.CHECK, deadline - now)))


#: the lease whose thread waits for its job's deadline (:meth:`OwnLease.defer`), if any
_deferred: OwnLease | None = None
#: when the job's timeout comes (monotonic): :func:`on_alarm` tells the two alarms apart
_timeout_at = 0.0


def alarm_after(timeout: float) -> float:
    """Seconds after which run.py arms SIGALRM for a job of ``timeout`` seconds: its
    timeout, or sooner the deadline of a deferred lease (:meth:`OwnLease.defer`)."""
    global _timeout_at, _deferred
    now = time.monotonic()
    _timeout_at = now + timeout
    own = _deferred
    if own is None:
        return timeout
    deadline = own.deadline()
    if deadline <= 0:                 # no deadline written: the thread watches for one
        _deferred = None
        own.watch(own.entry)
        return timeout
    return max(0.001, min(timeout, deadline - now))


def on_alarm() -> bool:
    """SIGALRM came (run.py): True when it was a deferred lease's deadline, not the job's
    timeout. Past the deadline (no renewal reached the board): the horse ends here;
    renewed: the thread takes over and SIGALRM is armed again for the timeout."""
    global _deferred
    own = _deferred
    now = time.monotonic()
    if own is None or now >= _timeout_at:
        return False
    _deferred = None
    deadline = own.deadline()
    if 0 < deadline <= now:
        expire()
    own.watch(own.entry)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, _timeout_at - now))
    return True


def expire() -> None:  # pragma: no cover - in the horse
    """The lease is over: SIGKILL this horse's process group (the job's children in it
    too); exit if the kill did not end us. The group is named by the horse's pid (it
    made it at its start), not 0: a job that moved its horse into another group (the
    fork server's) would have had that group killed."""
    try:
        os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    finally:
        os._exit(71)
