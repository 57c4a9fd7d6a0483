"""The fork server's process: a lean child of the worker that forks the horses.

Started by :class:`~fusionworker.runtime.forkserver.client.ForkServer` as a fresh
interpreter running :func:`serve` (the package's docstring says why and what happens
when a process dies). One :class:`Server` turn: one epoll wait over the worker's socket,
the SIGCHLD wake-up pipe and the report pipes of the running horses; :meth:`Server.receive`
reads what came, :meth:`Server.reap` reaps the horses that exited, :meth:`Server.finish`
reports each ended horse, then every complete :class:`~fusionworker.runtime.protocol.RunRequest`
of the turn is handed to a ready horse (:meth:`Server.start`; an async job's makes an
async horse: asyncpool.py), the answers of the turn go out at once (outcomes before the
next horse is forked), and horses are forked ahead for the next requests.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from ...core.functions import check_allowed
from ...exceptions import FunctionNotAllowed, InvalidFunction
from ..deadlines import DeadlineBoard, LeaseWatchdog
from ..horse.hygiene import close_others, horse_keeps, oom_target, open_fds, raise_oom_score
from ..horse.lease import OwnLease
from ..horse.main import set_pdeathsig, waiting_horse
from ..horse.run import cap_results
from ..horse.warm import cap_of, warm_horse
from ..protocol import (
    MOVES_MAX,
    STAY,
    ExitNotice,
    MovedNotice,
    ProgressNotice,
    RunRequest,
    StartNotice,
    drain,
    flood_max,
    flooded,
    for_horse,
    frame,
    has_report,
    read_available,
    take_frames,
    take_progress,
    unread,
    write_all,
)
from ..slot_device import device_of
from .asyncpool import AsyncHorses
from .handover import Handover, Outgoing
from .modules import REMEMBER_MAX, import_for_horses, remember, reported_ok, resolve_again

#: Horses the server forks ahead at most (as many as the largest batch one turn brought)
READY_MAX = 16

#: Seconds the server, told to exit, waits for horses that reported and are still exiting
#: (flushing their spans), reaping them and their leftovers; below ForkServer.close()'s 2 s
LAST_REAPS = 1.5


class _Running:
    """A horse that got its job: its report pipe and what it wrote so far."""

    def __init__(self, pid: int, fd: int, func: str, job_w: int = -1) -> None:
        self.pid, self.fd, self.func = pid, fd, func
        self.buf = bytearray()
        self.status: int | None = None
        self.job_w = job_w      # a warm horse (--horse-jobs > 1): its job pipe stays open
        self.done, self.idle = 0, False    # a warm horse: jobs it reported; between jobs
        self.request: RunRequest | None = None   # its job (handed on if not taken)
        self.moves = 0          # horses its job was handed to before (MovedNotice)


class _Ready:
    """A horse forked ahead, waiting for its job: its job pipe and its report pipe."""

    def __init__(self, pid: int, job_w: int, report_r: int) -> None:
        self.pid, self.job_w, self.report_r = pid, job_w, report_r

    def retire(self) -> None:
        os.close(self.job_w)          # it reads EOF: it exits
        os.close(self.report_r)


def serve(fd: int, worker_pid: int, allowed: list[str], retryable: list[str],
          preload: bool, otel: dict[str, Any] | None = None, board_fd: int = -1,
          kill_children: bool = True, horse_jobs: int = 1, max_rss_mib: int = 0,
          slots: int = 0, imports: tuple[str, ...] = (),
          max_result_bytes: int = 0, async_per_horse: int = 1) -> NoReturn:
    """Main of the fork server; exits with the worker. ``kill_children``: SIGKILL what a
    job left in its horse's group once it exited; ``otel``: trace the horses' jobs;
    ``board_fd``: the horses' deadlines (deadlines.py), enforced by the lease watchdog;
    ``horse_jobs`` > 1: warm horses (horse/warm.py), retired past ``max_rss_mib``, one
    per worker slot (``slots``); ``imports``: imported before the first horse;
    ``max_result_bytes``: horse/run.py; ``async_per_horse`` > 1: async horses."""
    cap_results(max_result_bytes)
    before = open_fds()
    if otel:
        from ...middleware.otel import setup_horses

        setup_horses(**otel)
    horses_own = tuple(open_fds() - before)   # the exporters' descriptors: the horses keep them
    oom_target()                 # read once here, written for each horse (spawn)
    set_pdeathsig()
    if os.getppid() != worker_pid:          # the worker died before PDEATHSIG was armed
        os._exit(0)
    with contextlib.suppress(OSError):   # a group of its own: the worker's stop signal
        os.setpgid(0, 0)                 # to its group leaves it running
    # read-only here (it only reads): its horses inherit that mapping as their own view
    watchdog = LeaseWatchdog(DeadlineBoard.reading(board_fd)) if board_fd >= 0 else None
    server = Server(fd, tuple(allowed), tuple(retryable), preload=preload, watchdog=watchdog,
                    kill_children=kill_children)
    server.horses_own, server.flood = horses_own, flood_max(max_result_bytes)
    server.horse_jobs, server.max_rss = max(1, horse_jobs), max(0, max_rss_mib) << 20
    server.slots = max(0, slots) if server.horse_jobs > 1 else 0
    server.init_async(async_per_horse if server.horse_jobs > 1 else 1)   # (and the pool)
    server.init_handover(server.horse_jobs > 1)       # the direct path (handover.py)
    if preload:   # before the first horse, fresh or warm: every horse shares this copy
        for module in imports:     # (models loaded once: the worker process never imports them)
            server.preloaded.add(module)
            import_for_horses(module)
        if not imports:            # it would be: forked once the first job's module is here
            server.pool_later, server.slots = server.slots, 0
    server.run()


class Server(AsyncHorses, Handover):
    """The fork server's state and its turn (module docstring)."""

    def __init__(self, fd: int, allowed: tuple[str, ...], retryable: tuple[str, ...], *,
                 preload: bool, watchdog: LeaseWatchdog | None, kill_children: bool) -> None:
        self.fd = fd
        self.sock = socket.socket(fileno=fd)
        self.allowed, self.retryable = allowed, retryable
        self.preload, self.watchdog, self.kill_children = preload, watchdog, kill_children
        #: each horse's own lease watcher, made here once: a fork's copy (horse/lease.py)
        self.own_lease = OwnLease(watchdog.board) if watchdog is not None else None
        self.pid = os.getpid()
        self.running: dict[int, _Running] = {}   # by pid: every horse whose exit is not sent
        self.exiting: set[int] = set()           # horses that reported, not reaped yet
        self.by_fd: dict[int, _Running] = {}     # report pipe -> its horse
        self.ready: list[_Ready] = []            # horses forked ahead
        self.want = 1                            # how many to fork ahead (<= READY_MAX)
        self.preloaded: set[str] = set()
        self.tried: set[str] = set()             # references resolved here once (remember)
        #: job functions resolved here once their module was preloaded (every check of
        #: functions.resolve passed), by reference: a horse is a copy of this process, so
        #: resolving again would walk the same module state to the same answer
        self.resolved: dict[str, Callable[..., Any]] = {}
        self.inbox = bytearray()                 # what the worker sent, not parsed yet
        self.horse_jobs = 1                      # > 1: warm horses (horse/warm.py)
        self.max_rss = self.flood = 0    # a warm horse's memory ceiling; a report pipe's, bytes
        self.idle: dict[int, _Running] = {}      # warm horses between jobs, by pid
        self.slots = 0                           # warm: horses kept alive (fork_ahead)
        self.pool_later = 0                      # warm, no --import: slots from the 1st load
        self.out: list[Outgoing] = []            # notices for the worker, sent once per turn
        self.read_ahead = False                      # send() read requests into the inbox
        self.horses_own: tuple[int, ...] = ()    # a horse's besides its pipes (OpenTelemetry's)
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # shutdown is the worker's business
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.ep = select.epoll()
        self.ep.register(fd, select.EPOLLIN)          # the worker's requests (and its EOF)
        self.ep.register(self.wake_r, select.EPOLLIN)  # SIGCHLD

    # -- the turn ------------------------------------------------------------------------

    def run(self) -> NoReturn:
        gc.freeze()
        self.fork_ahead()          # one fresh horse; with warm horses, the whole pool
        while True:
            # requests read while sending are in the inbox already: no event will say so
            eof, ended = self.receive(self.ep.poll(0 if self.read_ahead else -1))
            self.read_ahead = False
            if self.reaps_due():
                ended += [self.running[pid] for pid in self.reap() if pid in self.running]
            for run in ended:
                self.settle(run)
            if self.out:               # the outcomes go out before the next horse is forked
                eof = not self.send() or eof
            if not eof:    # no new job once the worker is gone: nobody would record it
                self.take_requests()
            if self.out:
                eof = not self.send() or eof
            if eof:
                self.last_reaps()
                os._exit(0)
            self.fork_ahead()

    def fork_ahead(self) -> None:
        """Fork horses for the next requests (as many as :meth:`ahead` says), answering
        the worker first."""
        while len(self.ready) < self.ahead():
            self.ready.append(self.spawn())
            if self.ep.poll(0):
                break

    def receive(self, events: list[tuple[int, int]]) -> tuple[bool, list[_Running]]:
        """What the turn's events brought: whether the worker is gone (EOF), and the
        horses whose report pipe reached its end."""
        eof = False
        ended: list[_Running] = []
        for efd, _ in events:
            if efd == self.wake_r:
                drain(self.wake_r)
            elif efd == self.fd:
                eof = self.read_worker()
            else:
                run = self.by_fd.get(efd)
                if run is None:
                    continue
                if run.idle:               # an idle warm horse wrote or died: retired
                    self.drop_idle(run)
                    continue
                done = read_available(run.fd, run.buf, limit=self.flood)
                self.forward_progress(run)
                if done:
                    self.close_report(run)
                    ended.append(run)
                elif run.job_w >= 0 and run.buf.endswith(STAY) and has_report(run.buf):
                    self.rest(run)
        return eof, ended

    def read_worker(self) -> bool:
        """Everything the worker's socket holds now, into the inbox; True at EOF (the
        worker is gone or done with us). It reads on until the socket would block, so
        requests followed by the worker's end are seen as that end in the same turn: a
        worker killed right after sending them starts no job (nobody would record it)."""
        flags = 0                               # the first read: epoll said it is readable
        while True:
            try:
                chunk = self.sock.recv(1 << 18, flags)
            except BlockingIOError:             # all read, the worker is still there
                return False
            except ConnectionResetError:        # the worker died with data unread: gone
                return True
            if not chunk:
                return True
            self.inbox.extend(chunk)
            flags = socket.MSG_DONTWAIT

    def _read_more(self) -> bool:    # the send, while the socket is full (handover.py)
        self.read_ahead = True       # taken at the next turn, which does not wait for them
        return self.read_worker()

    def take_requests(self) -> None:
        """Start every complete run request of the turn, in order."""
        requests, partial = RunRequest.split(take_frames(self.inbox))
        for request in requests:
            self.start(request)
        self.want = min(READY_MAX, max(self.want, len(requests)))
        if partial is not None:              # a request whose body is still on its way
            self.inbox[:0] = frame(partial)

    # -- horses --------------------------------------------------------------------------

    def spawn(self) -> _Ready:
        """Fork a horse that waits for its job."""
        job_r, job_w = os.pipe()
        read_fd, write_fd = os.pipe()
        # what the horse keeps, worked out here (hygiene.py): no worker socket, no board fd,
        # no other horse's pipe (a copy of a job pipe's write end keeps that horse from EOF)
        keep = horse_keeps((job_r, write_fd, *self.horses_own))
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the horse
            signal.set_wakeup_fd(-1)
            close_others(keep)        # its OOM score: written from here; its lease: made here
            lease = self.own_lease
            if self.horse_jobs > 1:
                warm_horse(job_r, write_fd, self.pid, self.allowed, self.retryable,
                           self.resolved, self.horse_jobs, self.max_rss, lease, self.async_k)
            waiting_horse(job_r, write_fd, self.pid, self.allowed, self.retryable,
                          self.resolved, lease)
        raise_oom_score(pid=pid)      # before it has a job (hygiene.py)
        os.close(job_r)
        os.close(write_fd)
        return _Ready(pid, job_w, read_fd)

    def start(self, request: RunRequest) -> None:
        """Hand one job to a ready horse (a fresh one if none is left or it died); with
        warm horses, to an idle one that may run it if there is one."""
        if self.horse_jobs > 1:
            self.start_warm(request)
            return
        for _ in range(2):
            horse = self.ready.pop(0) if self.ready else self.spawn()
            pid, read_fd = horse.pid, horse.report_r
            try:
                write_all(horse.job_w, for_horse(request))
                sent = True
            except BrokenPipeError:
                sent = False
            os.close(horse.job_w)
            if sent:
                break
            os.close(read_fd)
            read_fd = -1
        self.started(_Running(pid, read_fd, request.func), request)

    def started(self, new: _Running, request: RunRequest, moved_from: int = 0,
                cap: int = 0) -> None:
        """The job went to the horse ``new`` (read_fd -1: it died on the way);
        ``moved_from``: the horse that died before it took the job; ``cap`` > 1: a warm
        sync horse's job (said to the worker: the direct path)."""
        read_fd, pid = new.fd, new.pid
        new.request = request
        if read_fd >= 0:
            if read_fd not in self.by_fd:      # (a warm horse's pipe is registered already)
                os.set_blocking(read_fd, False)
                self.by_fd[read_fd] = new
                self.ep.register(read_fd, select.EPOLLIN)
            if self.watchdog is not None:   # its entry on the board: its worker slot's
                self.watchdog.watch(pid, request.entry)
        self.running[pid] = new
        self.out.append((MovedNotice(moved_from, pid, request.entry) if moved_from
                         else StartNotice(pid, request.entry,
                                          cap=cap if self.direct and cap > 1 else 0)).encode())

    # -- warm horses (horse/warm.py) -------------------------------------------------------

    def cap(self, func: str) -> int:
        """How many jobs a horse running ``func`` may run: 1 (a fresh horse) while its
        module is not imported here, its ``@job(horse_jobs=M)`` could say 1."""
        if func.partition(":")[0] not in sys.modules:
            return 1
        return cap_of(func, self.horse_jobs, self.resolved)

    def hand_on(self, run: _Running, request: RunRequest) -> None:
        """A warm horse died with its job unread in its job pipe (killed while idle,
        the job handed to it meanwhile): the job goes to another horse, nothing ran."""
        del self.running[run.pid]
        if run.fd >= 0:
            self.close_report(run)
        if run.job_w >= 0:
            os.close(run.job_w)
            run.job_w = -1
        if run.status is None:
            self.exiting.add(run.pid)      # reaped later
        if self.watchdog is not None:
            with self.watchdog.lock:
                self.watchdog.forget(run.pid)
        self.start_warm(request, moved_from=run.pid, moves=run.moves + 1)

    def load(self, func: str) -> None:
        """Warm horses: import the module of ``func`` here before its first horse, once
        the reference passed the allow check by name (the worker checked it too), so
        every horse forked from now on has it: no module is ever imported here for a
        job the allow-list refuses (its horse reports the refusal). A module named with
        ``--import`` is here already; one whose import fails is tried once."""
        module = func.partition(":")[0]
        if not self.preload or module in self.preloaded:
            return
        try:
            check_allowed(func, self.allowed)
        except (FunctionNotAllowed, InvalidFunction):
            return
        self.loaded(module)
        if self.pool_later:      # the pool, forked from now on with the module (fork_ahead)
            self.slots, self.pool_later = self.pool_later, 0
        if module in sys.modules and len(self.tried) < REMEMBER_MAX:
            self.tried.add(func)
            remember(self.resolved, func, self.allowed)
            gc.freeze()

    def loaded(self, module: str) -> None:
        """Import ``module`` (once), then what follows a preload: remembered functions
        resolved again, the ready horses (forked before the import) retired."""
        self.preloaded.add(module)
        if module in sys.modules:     # imported already (with another module): no change
            return
        import_for_horses(module)
        resolve_again(self.resolved, self.allowed)   # the import may have rebound them
        gc.freeze()
        for horse in self.ready:     # forked before the preload: retired
            horse.retire()
            self.exiting.add(horse.pid)
        self.ready.clear()

    def start_warm(self, request: RunRequest, moved_from: int = 0, moves: int = 0) -> None:
        """An idle warm horse that ran fewer jobs than the job's cap, the most recently
        used first; else a fresh horse whose job pipe stays open."""
        self.load(request.func)
        cap = self.cap(request.func)
        if cap > 1 and self.runs_async(request.func):      # an async def job (asyncpool.py)
            return self.start_async(request, cap)
        body = frame(for_horse(request))
        device = device_of(request.entry)      # --gpus: a warm horse keeps its device
        for run in reversed(list(self.idle.values())) if cap > 1 else ():
            if run.done >= cap or (run.request is not None
                                   and device_of(run.request.entry) != device):
                continue
            try:
                write_all(run.job_w, body)
            except BrokenPipeError:       # it died while idle (not reaped yet)
                self.drop_idle(run)
                continue
            del self.idle[run.pid]
            run.idle, run.func, run.status, run.moves = False, request.func, None, moves
            self.started(run, request, moved_from, cap)
            return
        for _ in range(2):
            horse = self.ready.pop(0) if self.ready else self.spawn()
            try:
                write_all(horse.job_w, body)
            except BrokenPipeError:
                horse.retire()
                continue
            new = _Running(horse.pid, horse.report_r, request.func, horse.job_w)
            new.moves = moves
            self.started(new, request, moved_from, cap)
            return
        self.started(_Running(horse.pid, -1, request.func), request, moved_from)

    def rest(self, run: _Running) -> None:
        """A warm horse reported and stays: its job's outcome goes out, it waits idle."""
        del run.buf[-len(STAY):]
        if self.watchdog is not None:     # its board entry is another job's from now on
            with self.watchdog.lock:
                self.watchdog.forget(run.pid)
        run.status = 0
        self.finish(run)
        run.done += 1
        if self.direct:         # the worker runs its next jobs itself (handover.py)
            return self.hand_over(run)
        run.idle, run.status = True, None
        self.idle[run.pid] = run

    def drop_idle(self, run: _Running) -> None:
        """Retire an idle warm horse (it died, or wrote when it should not): EOF on its job
        pipe ends it; it is reaped like any exiting horse."""
        self.idle.pop(run.pid, None)
        run.idle = False
        if run.fd >= 0:
            self.close_report(run)
        if run.job_w >= 0:
            os.close(run.job_w)
            run.job_w = -1
        self.exiting.add(run.pid)

    def forward_progress(self, run: _Running) -> None:
        """The progress frames at the front of the horse's pipe data, for the worker."""
        if self.flood and len(run.buf) > self.flood:    # what is no report: the horse dies
            flooded(run.func, run.pid, len(run.buf))
            run.buf, run.status = bytearray(), int(signal.SIGKILL)   # its end, whatever follows
            self._kill_now(run.pid)
            self.exiting.add(run.pid)                            # reaped as any that ended
        entry = run.request.entry if run.request is not None else -1
        for update in take_progress(run.buf):
            self.out.append(ProgressNotice(run.pid, update, entry).encode())

    def close_report(self, run: _Running) -> None:
        self.ep.unregister(run.fd)     # before close: horses forked since hold the pipe too
        del self.by_fd[run.fd]
        os.close(run.fd)
        run.fd = -1

    def settle(self, run: _Running) -> None:
        """A horse whose pipe ended or that was reaped: finish it once its outcome is
        known (a report and a closed pipe, or its exit)."""
        if run.pid not in self.running:
            return                  # listed twice (its pipe closed, then reaped)
        if run.status is None and run.fd < 0 and has_report(run.buf):
            # it closed its pipe after its report (horse/main.py): reaped later, off the path
            self.exiting.add(run.pid)
            run.status = 0
        if run.status is None:
            return
        if run.fd >= 0:   # it exited: everything it wrote is in the pipe already
            read_available(run.fd, run.buf, limit=self.flood)   # (a grandchild may write on)
            self.forward_progress(run)
            self.close_report(run)
        if (run.job_w >= 0 and not run.buf and run.request is not None
                and run.moves < MOVES_MAX and unread(run.job_w)):
            self.hand_on(run, run.request)
            return
        self.finish(run)

    def finish(self, run: _Running) -> None:
        """The horse's outcome is known: report it, preload its module, release it."""
        del self.running[run.pid]
        assert run.status is not None
        self.out.append(ExitNotice(run.pid, run.status, bytes(run.buf),
                                   run.request.entry if run.request is not None else -1).encode())
        if run.job_w >= 0 and not run.idle and run.fd < 0:    # a warm horse that left
            os.close(run.job_w)
            run.job_w = -1
        module = run.func.partition(":")[0]
        if self.preload and module not in self.preloaded and reported_ok(run.buf):
            self.loaded(module)      # fresh horses: only once a job of it ran fine
        if (module in self.preloaded and run.func not in self.tried
                and len(self.tried) < REMEMBER_MAX):
            self.tried.add(run.func)
            remember(self.resolved, run.func, self.allowed)
            gc.freeze()
        # release the report (a 100 MB result) before the next fork: else kept for good
        run.buf = bytearray()

    # -- reaping -------------------------------------------------------------------------

    def reap(self) -> list[int]:
        """Reap every horse that exited: running ones get their status; returns the pids
        reaped. Under the lease watchdog's lock: it never signals a pid reaped here."""
        if self.watchdog is None:
            return self._reap()
        with self.watchdog.lock:
            return self._reap()

    def _reap(self) -> list[int]:
        """``kill_children``: each exited horse is looked at before it is reaped
        (``WNOWAIT``): a zombie keeps its pid, so its process group id still names only
        what it left there (a job's ``subprocess.Popen`` children), which is SIGKILLed;
        then it is reaped. A child that called ``setsid()`` escapes, by design."""
        reaped: list[int] = []
        while True:
            try:
                if self.kill_children:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                    if info is None or not info.si_pid:
                        return reaped
                    pid = info.si_pid
                    _sigkill(pid)
                    status = os.waitpid(pid, 0)[1]
                else:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if not pid:
                        return reaped
            except ChildProcessError:
                return reaped + self._none_left()
            if self.watchdog is not None:
                self.watchdog.forget(pid)
            found = self.running.get(pid)
            if found is not None and found.status is None:
                found.status = status
            elif pid in self.idle:        # died between jobs: nothing was running
                self.drop_idle(self.idle[pid])
            else:
                self.handed_reaped(pid, status)
            self.exiting.discard(pid)
            reaped.append(pid)

    def _none_left(self) -> list[int]:
        """No child is left: every running horse is gone."""
        reaped = []
        for run in self.running.values():
            if run.status is None:
                run.status = 0
                reaped.append(run.pid)
            if self.watchdog is not None:
                self.watchdog.forget(run.pid)
        self.exiting.clear()
        for pid in list(self.handed):
            self.handed_reaped(pid, 0)
        return reaped

    def last_reaps(self) -> None:
        """The worker closed the socket: retire the ready horses, kill what still runs a
        job (it would die with us anyway, PDEATHSIG; its group goes with it), and reap the
        rest so that what their jobs left behind is killed too."""
        for horse in self.ready:
            horse.retire()
        for run in list(self.idle.values()):    # warm horses between jobs: EOF, they exit
            self.drop_idle(run)
        # not reported, or a handed horse owning a board entry: a job still runs; an idle
        # handed one read EOF: it exits, its spans exported, or dies with us after LAST_REAPS
        for pid in [*self.running, *self.busy_handed()]:
            self._kill_now(pid)
        deadline = time.monotonic() + LAST_REAPS
        while time.monotonic() < deadline:
            try:
                if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                    time.sleep(0.01)
                    continue
            except ChildProcessError:
                return                     # no child left
            self.reap()

    def _kill_now(self, pid: int) -> None:   # unreaped: its group, and it (moved out?)
        for kill in ((os.killpg, os.kill) if self.kill_children else (os.kill,)):
            _sigkill(pid, kill)


def _sigkill(pid: int, kill: Callable[[int, int], None] = os.killpg) -> None:
    try:          # its group (kill=os.kill: the process); a plain try: at every reap
        kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
