"""The work horse: one forked child per job.

Sequence (parent P, horse H)::

    P: pipe(); fork()
    H: own process group; PR_SET_PDEATHSIG=SIGKILL (H dies with P, so a job is
       never left running with no parent to record it); SIGINT ignored,
       SIGTERM default; SIGALRM armed at the job timeout (death penalty)
    H: check the allow-list, import, call (a coroutine or other awaitable the
       call returns, e.g. from an ``async def`` job, runs to completion in a
       fresh event loop, under the same death penalty), JSON-encode the result
    H: write one JSON report to the pipe; os._exit(0)
       (before it, while the job runs: progress/meta frames, only if the job
       calls ``current_job().set_progress`` or changes its ``meta``: at most
       one per 0.1 s, RS-framed JSON lines; the report carries the final
       state. Who writes what to Redis, and when: progress.py)
    P: select() on the pipe (and the signal wake-up fd), ticking about once a
       second (heartbeat, lease, memory ceiling, cold shutdown); at
       timeout + grace it kills H's process group (SIGTERM, then SIGKILL)
    P: waitpid(); the report, or the way H died, becomes the outcome

H never talks to Redis: everything it needs was in the parent's memory at
fork time, and everything it produces goes through the pipe.

A horse never outlives its lease (issue 18.2). The lease lives in Redis
(``started`` score = Redis time of the claim/touch + lease); a frozen
(SIGSTOP) or partitioned parent cannot renew it, and once it is over the
reaper hands the job to another worker. So H has a deadline of its own, on
the host's monotonic clock (CLOCK_MONOTONIC is one clock for every process of
the host), in a :class:`DeadlineBoard` (8 bytes of shared memory per slot, a
memfd mapped by the parent and by the fork server S, inherited by every
horse), enforced by a process other than P: S, which forked H::

    P: t0 = monotonic(); send claim.lua (Redis: lease until T0 + lease, T0 >= t0)
    P: board = t0 + lease - margin;   ask S for H    (margin = heartbeat interval)
    S: fork H; LeaseWatchdog.watch(H, slot): one thread of S, for all its horses,
       wakes at the nearest deadline -> SIGKILL H's process group once
       monotonic() >= board (the check and the kill hold the lock S reaps under,
       so the pid is still H's)
    P: every heartbeat: t1 = monotonic(); send touch.lua; only on its reply 1
       (the renewal reached Redis: lease until T1 + lease, T1 >= t1):
       board = t1 + lease - margin
    P: its own tick also kills H once monotonic() >= board (it cannot renew)

Every deadline is computed from the time a renewal was SENT, so it is never
later than the lease Redis holds; ``margin`` absorbs clock-rate differences
and the kill's latency. Crash points: P frozen (SIGSTOP) -> nobody moves the
board, S's watchdog kills H before the lease ends, the reaper re-queues the job
after it (P, resumed, finds its attempt taken back: its give-back is fenced by
the token). S runs in a process group of its own, so a stop signal sent to
P's group (Ctrl-Z in a terminal, ``kill -STOP -PGID``) freezes P, not S. P
partitioned -> touch fails, the board stays, P's tick and S's watchdog both
kill H before the lease ends; P gives the job back (not counted) if Redis
answers again before the reaper, else its give-back is refused. S frozen or
dead -> P's tick kills H (S dead: H dies with it, PDEATHSIG). P renews -> the
lease never ends: P is never reaped. Left open: P and S each stopped on
purpose while H runs (nobody is left to kill H; a cgroup freeze stops H too).

Why S and not a thread in each horse (as this module first had): a thread per
horse cost about 0.5 ms of CPU per job (its creation, its start handshake, its
50 ms polling), for every job, for a deadline that is about a lease away; S's
one thread sleeps until the nearest deadline. It is also stronger: a job that
holds the GIL in C code, ignores signals or breaks its interpreter cannot
delay a watchdog in another process. A horse the worker forks itself (no fork
server: it could not start) runs the thread of its own, :func:`start_watchdog`.
With N horses per worker the board has one slot per horse (``slot``).

If H dies before reporting, the wait status says how: a fatal signal
(SIGSEGV -> ``segfault``, SIGBUS/SIGILL/SIGFPE/SIGABRT -> ``crash``, SIGKILL or
SIGTERM from outside -> ``killed``, e.g. the kernel's OOM killer) or an exit
without a report (``os._exit`` in the job -> ``exit``).
"""

from __future__ import annotations

import ctypes
import inspect
import json
import logging
import math
import mmap
import os
import select
import signal
import struct
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import codec
from ..core import tracing as _tracing
from ..core.functions import resolve
from ..core.job import FailureReason, Job, safe_text
from ..exceptions import FunctionNotAllowed, InvalidFunction, JobTimeoutError, Retry
from . import progress
from .forkserver import ForkServer, ForkServerDied

if TYPE_CHECKING:  # pragma: no cover
    from types import FrameType

log = logging.getLogger("fusionworker.horse")

#: the C module ``signal.py`` wraps: its ``signal()`` takes plain ints, without the enum
#: conversions whose pages every horse would copy (copy-on-write faults, horse_main)
_csignal = sys.modules["_signal"]

_PR_SET_PDEATHSIG = 1
_CRASH_SIGNALS = {signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
_READ_CHUNK = 65536

@dataclass
class HorseExit:
    """What became of one horse, before retry policy is applied."""

    ok: bool
    reason: FailureReason | None     # None: the job returned (``ok``)
    result_json: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    retryable: bool = False
    retry_delay: float | None = None
    duration: float = 0.0
    #: the job's final progress/meta (``current_job()``), None if it set none (progress.py)
    progress: dict[str, Any] | None = None


def is_retryable(exc: BaseException, retryable: Iterable[str]) -> bool:
    """Whether ``exc``'s class (or a base class) is named in ``retryable``."""
    names = set(retryable)
    return any(f"{cls.__module__}.{cls.__qualname__}" in names for cls in type(exc).__mro__)


_libc: Any = None


def set_pdeathsig() -> None:
    """Die (SIGKILL) with the parent process. libc is loaded once per process."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the reaper still recovers the job
        pass


def _text(value: Any) -> str | None:
    """A report field as safe text (issue 18.1): a lone surrogate in a job's error,
    traceback or result must not crash the parent when it is encoded for Redis,
    the logs, the events or a webhook. None stays None."""
    return None if value is None else safe_text(str(value))


def _describe(exc: BaseException) -> str:
    """``str(exc)``, even when the exception's own ``__str__`` raises."""
    try:
        return safe_text(str(exc))[:2000]
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the real error
        return f"<{type(exc).__name__} whose str() failed>"


class DeadlineBoard:
    """Deadlines (monotonic seconds, 0 = none) of the horses, in shared memory.

    Created by the worker parent (``DeadlineBoard()``); the fork server maps the
    same memfd (``DeadlineBoard(fd=...)``); horses inherit the mapping by fork.
    """

    _SLOT = struct.Struct("d")

    def __init__(self, slots: int = 1, fd: int | None = None) -> None:
        if fd is None:
            fd = os.memfd_create("fusionworker-deadlines", 0)
            os.ftruncate(fd, self._SLOT.size * slots)
        self.fd = fd
        self.slots = slots
        self._map = mmap.mmap(fd, self._SLOT.size * slots)

    def set(self, deadline: float, slot: int = 0) -> None:
        self._SLOT.pack_into(self._map, self._SLOT.size * slot, deadline)

    def get(self, slot: int = 0) -> float:
        return float(self._SLOT.unpack_from(self._map, self._SLOT.size * slot)[0])

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


#: The board of this process (set in the worker parent and the fork server).
_board: DeadlineBoard | None = None


def attach_board(board: DeadlineBoard | None) -> None:
    global _board
    _board = board


def _watchdog(board: DeadlineBoard, slot: int) -> None:  # pragma: no cover - in the horse
    """Thread of a horse the worker forked itself: SIGKILL the horse's process group at
    its lease deadline."""
    while True:
        deadline = board.get(slot)
        now = time.monotonic()
        if deadline > 0 and now >= deadline:
            try:
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(71)
        time.sleep(0.05 if deadline <= 0 else min(0.05, max(deadline - now, 0.001)))


#: The board entry this horse watches (a worker with N slots forking its own horses
#: sets it before the fork; horses of the fork server are watched by the server).
watch_slot = 0


def start_watchdog(slot: int = 0) -> None:
    """In a horse the worker forked itself: enforce the deadline of ``slot`` (the board
    is attached in the worker only; horses of the fork server are watched by the
    server's :class:`LeaseWatchdog`, so there this does nothing)."""
    if _board is not None:
        threading.Thread(target=_watchdog, args=(_board, slot), daemon=True,
                         name="fusionworker-lease-watchdog").start()


class LeaseWatchdog:
    """In the fork server: one thread that kills each horse at its lease deadline.

    ``watch(pid, slot)`` when a horse gets its job; ``forget(pid)`` when it is
    reaped, under :attr:`lock`: the thread checks and kills under the same lock,
    so it never signals a pid that was reaped (and may have been reused).

    The thread sleeps until the nearest deadline (at most :attr:`CHECK` seconds:
    the parent may turn a 0 into a deadline without a new horse). A deadline only
    moves later (renewals) or to 0 (slot freed), except when its slot gets a new
    horse: :meth:`watch` wakes the thread when that deadline is nearer than its
    sleep. With no horse to watch it sleeps until the next :meth:`watch`.
    """

    CHECK = 1.0

    def __init__(self, board: DeadlineBoard) -> None:
        self.board = board
        self.lock = threading.Lock()
        self._horses: dict[int, int] = {}      # pid -> board entry
        self._wake = threading.Event()
        self._until = math.inf                 # when the thread wakes by itself
        threading.Thread(target=self._run, daemon=True,
                         name="fusionworker-lease-watchdog").start()

    def watch(self, pid: int, slot: int) -> None:
        with self.lock:
            self._horses[pid] = slot
            # idle (sleeping until woken), or this deadline is nearer than its sleep
            early = self._until == math.inf or 0 < self.board.get(slot) < self._until
        if early:
            self._wake.set()

    def forget(self, pid: int) -> None:
        """The horse was reaped (call with :attr:`lock` held, around the waitpid)."""
        self._horses.pop(pid, None)

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
        if not self._horses:
            return None
        nearest = now + self.CHECK
        for pid, slot in list(self._horses.items()):
            deadline = self.board.get(slot)
            if deadline <= 0:
                continue
            if now < deadline:
                nearest = min(nearest, deadline)
                continue
            try:                  # its own group (and the job's children in it)
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):   # not in its own group yet
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            del self._horses[pid]
        return max(nearest - now, 0.0)


#: Job functions the fork server resolved once their module was preloaded (every check
#: of functions.resolve passed there), by reference. A horse is a copy of the server, so
#: resolving again would walk the same module state to the same answer
#: (forkserver._remember); a horse the worker forks itself finds this empty.
resolved: dict[str, Callable[..., Any]] = {}


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise JobTimeoutError("job exceeded its timeout")


def run_job(job: Job[Any], allowed: Iterable[str], retryable: Iterable[str]) -> dict[str, Any]:
    """Run the job in this process under the death penalty; return the report.

    Called inside the horse. Never raises: every failure becomes a report.
    """
    _csignal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(job.timeout, 0.001))
    try:
        try:
            func = resolved.get(job.func) or resolve(job.func, allowed)
        except (FunctionNotAllowed, InvalidFunction) as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return {"ok": False, "reason": FailureReason.REFUSED, "error_type": type(exc).__name__,
                    "error_message": str(exc), "traceback": "", "retryable": False}
        result = call(func, job.args, job.kwargs)
        signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            return {"ok": True, "reason": "ok",
                    "result": codec.dumps(result, where="the job's return value")}
        except (TypeError, ValueError) as exc:   # codec.UnsupportedType is a TypeError
            return {"ok": False, "reason": FailureReason.EXCEPTION,
                    "error_type": "ResultNotSerializable",
                    "error_message": str(exc)[:2000], "traceback": "", "retryable": False}
    except JobTimeoutError:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return {"ok": False, "reason": FailureReason.TIMEOUT, "error_type": "JobTimeoutError",
                "error_message": f"job exceeded its timeout of {job.timeout:g} s",
                "traceback": _format_exc(), "retryable": False}
    except BaseException as exc:  # noqa: BLE001 - the horse reports everything, even SystemExit
        signal.setitimer(signal.ITIMER_REAL, 0)
        return {
            "ok": False, "reason": FailureReason.EXCEPTION, "error_type": type(exc).__name__,
            "error_message": _describe(exc), "traceback": _format_exc(),
            "retryable": is_retryable(exc, retryable),
            "retry_delay": exc.delay if isinstance(exc, Retry) else None,
        }


def call(func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Call the job function; an awaitable it returns (``async def``) is run to the end.

    Each awaited job gets a fresh event loop (``asyncio.run``): a horse runs one
    job, so nothing is shared with another job's loop. SIGALRM (the death
    penalty) interrupts the loop like any other code and the loop is closed.
    """
    result = func(*args, **kwargs)
    if _awaitable(result):
        # imported here, not at the top: the fork server (and so every horse) would map
        # asyncio and ssl, ~6 MiB, for sync jobs too (forkserver._remember imports it once
        # an async def job ran)
        import asyncio

        return asyncio.run(_awaited(result))
    return result


def _awaitable(value: Any) -> bool:
    """What ``await`` accepts: a coroutine, a generator-based coroutine, or an object whose
    type has ``__await__``. ``inspect.isawaitable`` says the same through the Awaitable
    ABC, whose caches every horse would write to (copy-on-write faults, each job)."""
    kind = type(value)
    if kind is types.CoroutineType:
        return True
    if kind is types.GeneratorType:
        return bool(value.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE)
    return getattr(kind, "__await__", None) is not None


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def exit_from_report(report: dict[str, Any], duration: float) -> HorseExit:
    """The :class:`HorseExit` a horse's JSON report stands for."""
    ok = bool(report.get("ok"))
    return HorseExit(
        ok=ok, reason=None if ok else FailureReason.read(str(report.get("reason") or
                                                             FailureReason.EXCEPTION)),
        result_json=_text(report.get("result")), error_type=_text(report.get("error_type")),
        error_message=_text(report.get("error_message")),
        traceback=_text(report.get("traceback")),
        retryable=bool(report.get("retryable")), retry_delay=report.get("retry_delay"),
        duration=duration,
        progress=report["progress"] if isinstance(report.get("progress"), dict) else None,
    )


def _format_exc() -> str:
    try:
        return safe_text(traceback.format_exc())
    except Exception:  # noqa: BLE001 - e.g. a __str__ that raises inside the traceback
        return ""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def horse_main(job: Job[Any], write_fd: int, parent_pid: int, allowed: tuple[str, ...],
               retryable: tuple[str, ...]) -> None:
    """Body of the child. Ends in ``os._exit``: no atexit, no parent cleanup code."""
    code = 0
    try:
        os.setpgid(0, 0)
        set_pdeathsig()
        if os.getppid() != parent_pid:  # the parent died before PDEATHSIG was armed
            os._exit(1)
        signal.set_wakeup_fd(-1)
        _csignal.signal(signal.SIGINT, _csignal.SIG_IGN)     # (_csignal: no enums)
        _csignal.signal(signal.SIGTERM, _csignal.SIG_DFL)
        _csignal.signal(signal.SIGCHLD, _csignal.SIG_DFL)
        start_watchdog(watch_slot)   # a horse never outlives its lease (module docstring)
        progress.begin(job, fd=write_fd)     # current_job() (progress.py)
        tracing = _tracing.horse_tracing   # None: OpenTelemetry off (core/tracing.py)
        if tracing is None:
            report = run_job(job, allowed, retryable)
        else:   # a CONSUMER span around the job (middleware/otel.py)
            report = tracing.run(job, lambda: run_job(job, allowed, retryable))
        final = progress.end()           # no frame after this; the last state goes along
        if final is not None:
            report["progress"] = final
        _flush_job_events()
        _write_all(write_fd, json.dumps(report).encode())
        os.close(write_fd)   # EOF now: the parent goes on while this process exits
        if tracing is not None:   # after the outcome went out, for a bounded time
            tracing.flush()
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 70
    finally:
        os._exit(code)


def _flush_job_events() -> None:
    """Deliver events the job itself produced (e.g. ``queued`` of jobs it enqueued).

    The horse ends in ``os._exit``, which skips atexit and kills the sink's
    delivery thread; only a job that enqueued something has a sink to flush.
    """
    registry = sys.modules.get("fusionworker.events.registry")   # made a sink: imported
    if registry is not None:
        registry.flush_default_sinks(2.0)


class Horse:
    """Parent-side handle of one forked horse."""

    def __init__(self, job: Job[Any], *, allowed: Iterable[str] = (),
                 retryable: Iterable[str] = (), server: ForkServer | None = None,
                 kill_children: bool = True,
                 on_update: Callable[[int, str], None] | None = None) -> None:
        self.job = job
        #: gets (pid, frame) for each progress frame of a horse of our own (a fork
        #: server's horses' frames come through ForkServer.on_update)
        self.on_update = on_update
        #: after the horse exits, SIGKILL what is left of its process group (issue 18.9)
        self.kill_children = kill_children
        self.allowed = tuple(allowed)
        self.retryable = tuple(retryable)
        self.server = server            # set: the fork server forks (and reaps) the horse
        self._lost_server = False
        self.pid = 0
        self._fd = -1
        self._buffer = bytearray()
        self._status: int | None = None
        self._kill_reason: FailureReason | None = None
        self._started = 0.0

    def start(self, before_fork: Callable[[], None] | None = None,
              while_forking: Callable[[], None] | None = None) -> int:
        """Fork the horse (through the fork server when there is one); returns its pid.

        ``while_forking`` runs while the fork server forks (or after a fork of our own):
        work of the parent that needs no pid overlaps the fork.
        """
        done: list[bool] = []

        def once() -> None:
            if while_forking is not None and not done:
                done.append(True)
                while_forking()

        if self.server is not None and before_fork is None:
            self._started = time.monotonic()
            try:
                self.pid = self.server.run(self.job, once)
                return self.pid
            except ForkServerDied as exc:
                log.warning("fork server unavailable (%s): forking job %s from the worker",
                            exc, self.job.id)
                self.server = None
        read_fd, write_fd = os.pipe()
        parent_pid = os.getpid()
        if before_fork:
            before_fork()
        self._started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os.close(read_fd)
            horse_main(self.job, write_fd, parent_pid, self.allowed, self.retryable)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.pid, self._fd = pid, read_fd
        once()
        return pid

    # -- parent side -----------------------------------------------------------

    def kill(self, reason: FailureReason | str) -> None:
        """Kill the horse's process group (SIGTERM now, SIGKILL if it lingers).

        ``reason`` becomes the attempt's failure reason (a middleware may name its own).
        """
        if self._kill_reason is None:
            self._kill_reason = FailureReason.read(reason)
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if self._reap(block=False):
                break
            time.sleep(0.02)
        else:
            self._signal_group(signal.SIGKILL)
        # a job's own children may outlive the horse: take the group down with it
        self._signal_group(signal.SIGKILL)

    def _kill_leftovers(self) -> None:
        """The job's own children (``subprocess.Popen`` in a job) outlive the horse in its
        process group: kill them with it, once the horse itself is gone (it may still be
        flushing, e.g. its spans, after its report). A child that called ``setsid()`` (or
        ``start_new_session=True``) left the group and escapes, by design. A horse of the
        fork server: the server does it as it reaps the horse (forkserver._reap), with no
        ``/proc`` read and no race with the pid's reuse."""
        if self.kill_children and self.pid > 0 and self.server is None:
            _leftovers.append(self.pid)
            kill_leftovers()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # pgid reused by someone else: signal the horse only
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _reap(self, block: bool) -> bool:
        if self._status is not None:
            return True
        if self.server is not None:
            return self._reap_from_server(block)
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self._status = 0
            return True
        if pid == 0:
            return False
        self._status = status
        return True

    def _reap_from_server(self, block: bool) -> bool:
        """The fork server reaps our horse and sends its status and report."""
        assert self.server is not None
        try:
            msg = self.server.poll_exit(block)
        except ForkServerDied:
            # the horse dies with the server (PDEATHSIG); make sure of it, say why
            self._lost_server = True
            if self._kill_reason is None:
                self._kill_reason = FailureReason.KILLED
            self._signal_group(signal.SIGKILL)
            self._status = signal.SIGKILL
            return True
        if msg is None:
            return False
        self._buffer.extend(msg.get("report", "").encode())
        self._status = int(msg["status"])
        return True

    def _read(self) -> bool:
        """Read what the pipe has; True at EOF."""
        if self._fd < 0:      # fork-server horse: the report comes with the exit message
            return True
        eof = progress.read_available(self._fd, self._buffer, _READ_CHUNK)
        if self._buffer and self._buffer[0] == progress.FRAME_START:   # frames come first
            for frame in progress.take_frames(self._buffer):
                if self.on_update is not None:
                    self.on_update(self.pid, frame)
        return eof

    def supervise(
        self,
        *,
        kill_after: float,
        tick: Callable[[], str | None] | None = None,
        tick_interval: float = 1.0,
        first_tick: float | None = None,
        wake_fd: int | None = None,
    ) -> HorseExit:
        """Wait for the horse to report and exit, enforcing the hard limit.

        ``tick`` runs about every ``tick_interval`` seconds and whenever ``wake_fd``
        is readable (a signal arrived), the first time after ``first_tick`` seconds
        (default ``tick_interval``); a non-None return kills the horse with that reason.
        """
        hard_deadline = self._started + kill_after
        next_tick = time.monotonic() + (tick_interval if first_tick is None else first_tick)
        watch = self.server.fileno() if self.server is not None else self._fd
        fds = [watch] + ([wake_fd] if wake_fd is not None else [])
        eof = False
        try:
            while not eof:
                now = time.monotonic()
                if now >= hard_deadline and self._kill_reason is None:
                    self.kill(FailureReason.TIMEOUT)
                wait = max(0.0, min(next_tick, hard_deadline) - now)
                readable, _, _ = select.select(fds, [], [], wait)
                if watch in readable:
                    eof = self._reap(block=False) if self.server is not None else self._read()
                woke = wake_fd is not None and wake_fd in readable
                if wake_fd is not None and woke:
                    drain(wake_fd)
                if woke or time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + tick_interval
                    reason = tick() if tick else None
                    if reason and self._kill_reason is None:
                        self.kill(reason)
                    # a grandchild may hold the pipe open after the horse is gone
                    if not eof and self._reap(block=False):
                        eof = self._read() or True
            self._reap(block=True)
            self._kill_leftovers()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
        return self._outcome(time.monotonic() - self._started)

    def _outcome(self, duration: float) -> HorseExit:
        report: dict[str, Any] | None = None
        if self._buffer and self._buffer[0] != progress.FRAME_START:   # not a cut-off frame
            try:
                report = json.loads(self._buffer.decode())
            except ValueError:
                report = None
        if self._kill_reason is not None and not (report and report.get("ok")):
            return self._killed_exit(duration, report)
        if report is not None:
            return exit_from_report(report, duration)
        status = self._status or 0
        if os.WIFSIGNALED(status):
            sig = signal.Signals(os.WTERMSIG(status))
            if sig == signal.SIGSEGV:
                reason, what = FailureReason.SEGFAULT, "segmentation fault"
            elif sig in _CRASH_SIGNALS:
                reason, what = FailureReason.CRASH, "crashed"
            else:
                reason, what = FailureReason.KILLED, "killed from outside (OOM killer?)"
            return HorseExit(ok=False, reason=reason, error_type="HorseDied",
                             error_message=f"work horse died of {sig.name} ({what})",
                             duration=duration)
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return HorseExit(ok=False, reason=FailureReason.EXIT, error_type="HorseExited",
                         error_message=f"work horse exited with status {code} before reporting "
                                       "a result (os._exit() in the job?)",
                         duration=duration)

    def _killed_exit(self, duration: float, report: dict[str, Any] | None) -> HorseExit:
        reason = self._kill_reason or FailureReason.KILLED
        messages = {
            FailureReason.TIMEOUT: (
                "JobTimeoutError",
                f"job exceeded its timeout of {self.job.timeout:g} s and was killed"),
            FailureReason.MEMORY: ("HorseMemoryExceeded",
                                   "work horse exceeded the memory ceiling and was killed"),
            FailureReason.LOST: ("JobLost",
                                 "the job was taken back (reaped or deleted) while it ran"),
            FailureReason.SHUTDOWN: ("WorkerShutdown",
                                     "cold shutdown of the worker interrupted the job"),
            FailureReason.LEASE: ("LeaseExpired",
                                  "the worker could not renew the job's lease in time (frozen "
                                  "or cut off from Redis): its horse was killed"),
        }
        error_type, message = messages.get(reason, ("HorseKilled", f"killed: {reason}"))
        if self._lost_server:
            error_type, message = "HorseKilled", "the fork server died while the job ran"
        if report and report.get("reason") == FailureReason.TIMEOUT:
            error_type, message = report["error_type"], report["error_message"]
        return HorseExit(ok=False, reason=reason, error_type=_text(error_type),
                         error_message=_text(message),
                         traceback=_text((report or {}).get("traceback")), duration=duration)


#: process groups of finished horses whose leftovers are killed once the horse is gone
_leftovers: list[int] = []


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:
        return True


def kill_leftovers(wait: float = 0.0) -> None:
    """SIGKILL the process groups of finished horses that have exited (the worker calls
    this every loop turn; ``wait``: give a horse still exiting that long)."""
    deadline = time.monotonic() + wait
    while _leftovers:
        for pgid in list(_leftovers):
            if _running(pgid):
                continue
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _leftovers.remove(pgid)
        if not _leftovers or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, InterruptedError):
        pass
