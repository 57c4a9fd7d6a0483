"""A horse never outlives its lease: the deadline board and who enforces it.

The lease lives in Redis (``started`` score = Redis time of the claim/touch +
lease); a frozen (SIGSTOP) or partitioned parent cannot renew it, and once it
is over the reaper hands the job to another worker. So a horse H has a
deadline of its own, on the host's monotonic clock (CLOCK_MONOTONIC is one
clock for every process of the host), in a :class:`DeadlineBoard` (8 bytes of
shared memory per entry, one entry per worker slot: a memfd mapped by the
parent P and by the fork server S; each horse maps it read-only), enforced by
a process other than P: S, which forked H (and by H itself)::

    P: t0 = monotonic(); send claim.lua (Redis: lease until T0 + lease, T0 >= t0)
    P: board[entry] = t0 + lease - margin;   ask S for H    (margin = heartbeat interval)
    S: fork H; LeaseWatchdog.watch(H, entry): one thread of S, for all its horses,
       wakes at the nearest deadline -> SIGKILL H's process group once
       monotonic() >= board[entry] (the check and the kill hold the lock S reaps
       under, so the pid is still H's)
    P: every heartbeat: t1 = monotonic(); send touch_many.lua; only on its reply 1
       for the job (the renewal reached Redis: lease until T1 + lease, T1 >= t1):
       board[entry] = t1 + lease - margin, unless board[entry] had passed by then (S or
       H may have killed H there: it stays, P kills H, ``lease``; Slot.renew)
    P: its own police also kills H once monotonic() >= board[entry] (it cannot renew)

Every deadline is computed from the time a renewal was SENT, so it is never
later than the lease Redis holds; ``margin`` absorbs clock-rate differences
and the kill's latency. Crash points: P frozen (SIGSTOP) -> nobody moves the
board, S's watchdog kills H before the lease ends, the reaper re-queues the job
after it (P, resumed, finds its attempt taken back: its give-back is fenced by
the token). S runs in a process group of its own, so a stop signal sent to
P's group (Ctrl-Z in a terminal, ``kill -STOP -PGID``) freezes P, not S. P
partitioned -> touch fails, the board stays, P's police and S's watchdog both
kill H before the lease ends; P gives the job back (not counted) if Redis
answers again before the reaper, else its give-back is refused. S frozen or
dead -> P's police kills H (S dead: H dies with it, PDEATHSIG). P renews -> the
lease never ends: P is never reaped. P and S both stopped -> H's own lease
watcher (horse/lease.py: a thread of H reading its entry of a read-only mapping
of the board) kills H's group at the same deadline: never two at once.

No horse holds the board writable: S maps it read-only only
(:meth:`DeadlineBoard.reading`, from a read-only open; it closes the writable
memfd) and its horses keep that mapping as their view; a horse P forks drops the
writable mapping it inherited and keeps the read-only one P made once from
:meth:`DeadlineBoard.reader_fd` (horse/hygiene.py closes every other descriptor),
so a job cannot move a deadline of its own or of a sibling.

Why S as well as a thread in each horse: a job that holds the GIL in C code,
ignores signals or breaks its interpreter cannot delay a watchdog in another
process. The horse's own thread is the one that holds when every other process
is stopped; it sleeps until its deadline (at most 1 s at a time, a
``_thread`` without a start handshake: no polling of the 0.5 ms per job an
earlier 50 ms-polling ``threading.Thread`` cost).
"""

from __future__ import annotations

import math
import mmap
import os
import signal
import struct
import threading
import time


class DeadlineBoard:
    """Deadlines (monotonic seconds, 0 = none) of the horses, in shared memory.

    Created by the worker parent (``DeadlineBoard(entries)``); the fork server maps
    the same memfd read-only (:meth:`reading`); horses inherit the mapping by fork.
    """

    _ENTRY = struct.Struct("d")
    #: after the deadlines, one per entry: the pid of the horse the worker handed that
    #: entry's job to itself (the direct path: the fork server did not see the job), 0:
    #: none; the fork server's watchdog kills that horse at the entry's deadline
    _OWNER = struct.Struct("q")
    #: bytes per entry (its deadline, then, in the second half, its owner)
    SIZE = 16

    def __init__(self, entries: int = 1, fd: int | None = None,
                 read_only: bool = False) -> None:
        if fd is None:
            fd = os.memfd_create("fusionworker-deadlines", 0)
            os.ftruncate(fd, self.SIZE * entries)
        elif entries <= 0:    # the fork server: as many entries as the memfd holds
            entries = max(1, os.fstat(fd).st_size // self.SIZE)
        self.fd = fd
        self.entries = entries
        self._map = mmap.mmap(fd, self.SIZE * entries,
                              access=mmap.ACCESS_READ if read_only else mmap.ACCESS_DEFAULT)
        self._reader = fd if read_only else -1
        #: mapped read-only from a read-only descriptor (:meth:`reading`): a horse forked
        #: from this process may keep the mapping (nothing can write through it)
        self.read_only = read_only

    @classmethod
    def reading(cls, fd: int) -> DeadlineBoard:
        """The fork server's board (it only reads it): mapped ``PROT_READ`` from a
        read-only open of ``fd`` (/proc/self/fd), ``fd`` closed. So this process holds
        nothing that can write a deadline, and the horses it forks inherit that mapping
        as their own read-only view (no mapping to drop, none to make, per horse).
        Without /proc: ``DeadlineBoard(fd=fd)`` (writable, dropped by each horse)."""
        try:
            reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return cls(entries=0, fd=fd)
        os.close(fd)
        return cls(entries=0, fd=reader, read_only=True)

    def set(self, deadline: float, entry: int = 0) -> None:
        """Entry ``entry`` gets ``deadline`` (``inf``: none, written as 0)."""
        if 0 <= entry < self.entries:
            value = 0.0 if math.isinf(deadline) else deadline
            self._ENTRY.pack_into(self._map, self._ENTRY.size * entry, value)

    def get(self, entry: int = 0) -> float:
        return float(self._ENTRY.unpack_from(self._map, self._ENTRY.size * entry)[0])

    def set_owner(self, entry: int, pid: int) -> None:
        """Entry ``entry``'s job went to horse ``pid`` straight from the worker (0: none)."""
        if 0 <= entry < self.entries:
            self._OWNER.pack_into(self._map, self._ENTRY.size * self.entries
                                  + self._OWNER.size * entry, pid)

    def owner(self, entry: int) -> int:
        return int(self._OWNER.unpack_from(self._map, self._ENTRY.size * self.entries
                                           + self._OWNER.size * entry)[0])

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)

    def reader_fd(self) -> int:
        """A read-only descriptor of the board (opened once, close-on-exec): what a horse
        maps to watch its own entry (:class:`BoardView`) without being able to write it."""
        if self._reader < 0:
            self._reader = os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)
        return self._reader

    def detach(self) -> None:
        """In a forked horse: drop this process's writable mapping of the board (a job
        must not be able to write any deadline). The descriptors go with the horse's
        others (horse/hygiene.py)."""
        try:
            self._map.close()
        except (BufferError, ValueError, OSError):
            pass


class LeaseWatchdog:
    """In the fork server: one thread that kills each horse at its lease deadline.

    ``watch(pid, entry)`` when a horse gets its job; ``forget(pid)`` when it is
    reaped, under :attr:`lock`: the thread checks and kills under the same lock,
    so it never signals a pid that was reaped (and may have been reused). An async
    horse runs several jobs: one entry each (``forget(pid, entry)`` when one ended);
    any of them past its deadline kills the horse.

    The thread sleeps until the nearest deadline (at most :attr:`CHECK` seconds:
    the parent may turn a 0 into a deadline without a new horse). A deadline only
    moves later (renewals) or to 0 (entry freed), except when its entry gets a new
    horse: :meth:`watch` wakes the thread when that deadline is nearer than its
    sleep. With no horse to watch it sleeps until the next :meth:`watch`.
    """

    CHECK = 1.0

    def __init__(self, board: DeadlineBoard) -> None:
        self.board = board
        # re-entrant: the reap holds it around waitpid, and an async horse reaped there
        # has its last report lines read and forgotten entry by entry under it
        self.lock = threading.RLock()
        self._horses: dict[int, int] = {}      # pid -> board entry
        self._more: dict[int, set[int]] = {}   # pid -> its other entries (async horses)
        #: horses handed to the worker (the direct path): their entry is the one whose
        #: board owner names them (the worker writes it), looked at every CHECK at most
        self._handed: set[int] = set()
        self._wake = threading.Event()
        self._until = math.inf                 # when the thread wakes by itself
        threading.Thread(target=self._run, daemon=True,
                         name="fusionworker-lease-watchdog").start()

    def watch(self, pid: int, entry: int) -> None:
        with self.lock:
            if pid in self._horses and self._horses[pid] != entry:
                self._more.setdefault(pid, set()).add(entry)
            else:
                self._horses[pid] = entry
            # idle (sleeping until woken), or this deadline is nearer than its sleep
            early = self._until == math.inf or 0 < self.board.get(entry) < self._until
        if early:
            self._wake.set()

    def hand(self, pid: int) -> None:
        """The horse ``pid`` was handed to the worker: the entries whose owner is ``pid``
        are its (under :attr:`lock`)."""
        self._handed.add(pid)
        if self._until == math.inf:
            self._wake.set()

    def forget(self, pid: int, entry: int | None = None) -> None:
        """The horse was reaped, or (``entry``) one job of an async horse ended (call with
        :attr:`lock` held, around the waitpid)."""
        if entry is None:
            self._handed.discard(pid)
        more = self._more.get(pid)
        if entry is None or (more is None and self._horses.get(pid) == entry):
            self._horses.pop(pid, None)
            self._more.pop(pid, None)
        elif more is not None:
            more.discard(entry)
            if self._horses.get(pid) == entry:
                self._horses[pid] = more.pop()
            if not more:
                del self._more[pid]

    def _run(self) -> None:  # pragma: no cover - a thread of the fork server
        while True:
            with self.lock:
                wait = self._check(time.monotonic())
                self._until = math.inf if wait is None else time.monotonic() + wait
                self._wake.clear()
            self._wake.wait(wait)

    def _check(self, now: float) -> float | None:
        """Kill the horses past their deadline; seconds until the next check (None: no
        horse to watch)."""
        if not self._horses and not self._handed:
            return None
        nearest = now + self.CHECK
        for pid, entry in list(self._horses.items()):
            until = _enforce(pid, self._nearest(pid, entry), now)
            if until is None:
                del self._horses[pid]
                self._more.pop(pid, None)
            else:
                nearest = min(nearest, until)
        if self._handed:
            nearest = min(nearest, self._check_handed(now))
        return max(nearest - now, 0.0)

    def _check_handed(self, now: float) -> float:
        """The horses handed to the worker: each entry whose owner is one of them, past
        its deadline, kills it; the nearest deadline to come (inf: none)."""
        nearest = math.inf
        for entry in range(self.board.entries):
            pid = self.board.owner(entry)
            if pid <= 0 or pid not in self._handed:
                continue
            until = _enforce(pid, self.board.get(entry), now)
            if until is None:
                self._handed.discard(pid)       # reaped soon; killed once
            else:
                nearest = min(nearest, until)
        return nearest

    def _nearest(self, pid: int, entry: int) -> float:
        """The nearest deadline of the horse's entries (0: none)."""
        deadline = self.board.get(entry)
        for other in self._more.get(pid, ()):
            value = self.board.get(other)
            if value > 0 and (deadline <= 0 or value < deadline):
                deadline = value
        return deadline


def _enforce(pid: int, deadline: float, now: float) -> float | None:
    """The horse ``pid``'s ``deadline`` (0 or less: none) at ``now``: None when it passed
    (the horse is killed now), else when to look again (inf: never)."""
    if deadline <= 0:
        return math.inf
    if now < deadline:
        return deadline
    _kill(pid)
    return None


def _kill(pid: int) -> None:
    """SIGKILL a horse's own group (and the job's children in it), and the horse itself
    (it may have no group of its own yet, or its job moved it into another one)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
