"""An async horse: a warm horse that runs up to K ``async def`` jobs at once, each a
task of one event loop (``worker --async-per-horse K``; design.md, "Async horses").

A ready horse of the fork server becomes one when its first frame is an async job's
(the body starts with ``A``, forkserver/asyncpool.py); the server then hands it to
the worker (W), which writes its later jobs and reads its lines
(runtime/directasync.py). Sequence::

    H: its own process group, PDEATHSIG, signals (as a warm horse), once
    H: the loop reads its job pipe (non-blocking); per frame a task:
       current_job() of the task (progress.begin_task, a ContextVar),
       OwnLease.watch(entry), the job under asyncio.timeout(job.timeout),
       the report line "<entry> <report>", OwnLease.idle(entry)
    H: a job failed (a timeout too), replaced the framework, left a child, or the
       RSS passed --max-horse-memory: "-" (no more jobs for it); it runs on
    H: its job pipe at EOF (W closed it: the cap, or "-", and every job of it
       reported) and no task left: exit 0

A stop (``job stop``) of one job: W writes a cancel frame (its entry, then ``C``) to
the job pipe; the loop reads it in order with the jobs' frames (design.md, "A stop of
one async job")::

    H: a cancel frame for an entry with no task (it reported): let be
    H: its task not begun (both frames read in one turn): it never runs the job:
       "stopped" ("before it started")
    H: its task runs: its asyncio.timeout scope rescheduled to now (the path of its
       timeout: this task only); the scope expired: "stopped", whatever the job then
       did (raised, returned after swallowing the CancelledError); the job ended
       before the scope fired (it was already returning): its own report
    H: a job that swallows the CancelledError and runs on: W kills H at the kill
       escalation (its mates are given back uncharged); one whose loop is held: the
       same (a held loop cancels nothing)
    H dies after the frame (the job's handler kills it): W ends every unreported
       job of it once the server reaped it; the stopped one ends "stopped", its
       mates "neighbour"

A job that blocks the loop (``time.sleep``, C code) is not cancelled at its
timeout (cancellation needs the loop): the monitor thread names it once it held the
loop for :data:`BLOCKED` seconds (the line ``!<entry> <seconds>``: the worker logs it
and knows the culprit), and the worker kills the horse at a deadline (its mates are
given back, not charged: slot.py). Lines are written whole, one writer at a time.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from ...core import tracing as _tracing
from ...core.functions import resolve
from ...core.job import FailureReason, Job
from ...exceptions import FunctionNotAllowed, InvalidFunction, JobTimeoutError, Retry
from .. import progress
from ..protocol import CANCEL, HorseReport, from_server, job_of, take_frames, write_all
from . import guard
from .lease import OwnLease
from .main import _flush_job_events
from .run import _awaitable, _describe, _format_exc, _result_report, is_retryable
from .stay import has_children, over_memory, remember

#: seconds a job may hold the event loop before the monitor thread names it
BLOCKED = 1.0


class Stop:
    """A job's stop (``job stop``) in its task: asked (the cancel frame came), and the
    ``asyncio.timeout`` scope the job runs under while it runs (a stop reschedules it
    to now: the task is cancelled as at its timeout, and only that task)."""

    __slots__ = ("asked", "scope")

    def __init__(self) -> None:
        self.asked = False
        self.scope: asyncio.Timeout | None = None

    def ask(self) -> None:
        """Cancel the job's task now; before it started, it never starts; a scope that
        expires or was left already (the job ended on its own) is let be."""
        self.asked = True
        if self.scope is not None:
            try:
                self.scope.reschedule(asyncio.get_running_loop().time())
            except RuntimeError:
                pass

    def took(self, scope: asyncio.Timeout) -> bool:
        """The job's scope, entered: True if the stop fired in it (the job is stopped)."""
        return self.asked and scope.expired()


class AsyncHorse:
    """The horse's state: its running tasks by board entry, its pipes, its lease."""

    def __init__(self, job_r: int, write_fd: int, allowed: tuple[str, ...],
                 retryable: tuple[str, ...], resolved: Mapping[str, Callable[..., Any]],
                 max_rss: int, lease: OwnLease | None) -> None:
        self.job_r, self.write_fd = job_r, write_fd
        self.allowed, self.retryable, self.max_rss, self.lease = (allowed, retryable,
                                                                  max_rss, lease)
        self.mine = dict(resolved)
        self.originals = guard.snapshot()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.stops: dict[int, Stop] = {}      # each running job's, by entry
        self.inbox = bytearray()
        self.eof = False
        self.leaving = False
        self.beat = time.monotonic()          # the loop's last turn (monitor thread)
        self.io = threading.Lock()            # one writer of a line at a time
        self.flushing = threading.Lock()      # held while the horse's spans are flushed
        self.done: asyncio.Future[None] | None = None
        #: each job's ``current_job()`` holder, by entry; and the holder of the job that
        #: created each task (a task a job left behind keeps its creator's): the monitor
        #: names the owner of a task that holds the loop, or says a finished job's did
        self.holders: dict[int, list[Any]] = {}
        self.owners: weakref.WeakKeyDictionary[asyncio.Future[Any], list[Any]] = (
            weakref.WeakKeyDictionary())
        self._factory = self._task_factory     # one bound method: compared by identity

    def _task_factory(self, loop: asyncio.AbstractEventLoop, coro: Any,
                      **kwargs: Any) -> asyncio.Task[Any]:
        """Every task of the loop, noted with the job whose code created it."""
        task = asyncio.Task(coro, loop=loop, **kwargs)
        holder = progress.task_holder()
        if holder is not None:
            self.owners[task] = holder
        return task

    async def serve(self, first: bytes) -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(self._factory)
        self.done = loop.create_future()
        os.set_blocking(self.job_r, False)
        loop.add_reader(self.job_r, self.readable)
        self.take(first)
        self._tick()
        threading.Thread(target=self.monitor, args=(loop,), daemon=True,
                         name="fusionworker-loop-monitor").start()
        self.readable()
        await self.done
        loop.remove_reader(self.job_r)

    def _tick(self) -> None:
        self.beat = time.monotonic()
        asyncio.get_running_loop().call_later(BLOCKED / 4, self._tick)

    def readable(self) -> None:
        """Read the job pipe: each complete frame a task; EOF: no more jobs."""
        while not self.eof:
            try:
                chunk = os.read(self.job_r, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                asyncio.get_running_loop().remove_reader(self.job_r)
                break
            self.inbox.extend(chunk)
        for data in take_frames(self.inbox):
            self.take(data)
        self.maybe_done()

    def take(self, data: bytes) -> None:
        """A job's frame (its task), or a cancel frame (a stop of a running job's task;
        one that ended or is not here is let be)."""
        entry, body = from_server(data)
        if body == CANCEL:
            stop = self.stops.get(entry)
            if stop is not None:
                stop.ask()
            return
        job = job_of(body[1:])           # the "A" the server put in front
        if self.lease is not None and entry >= 0:
            self.lease.watch(entry)
        self.stops[entry] = stop = Stop()
        # made here, not by the loop's task factory, which a job may have replaced
        self.tasks[entry] = asyncio.Task(self.run(entry, job, stop),
                                         loop=asyncio.get_running_loop())

    def maybe_done(self) -> None:
        if self.eof and not self.tasks and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def write(self, line: bytes) -> None:
        with self.io:
            write_all(self.write_fd, line)

    async def run(self, entry: int, job: Job[Any], stop: Stop) -> None:
        """One job, in its task: its own current_job(), its report line."""
        prefix = b"%d " % entry
        self.holders[entry] = holder = progress.begin_task(
            job, lambda text: self.write(prefix + b"\x1e" + text.encode() + b"\n"))
        tracing = _tracing.horse_tracing   # None: OpenTelemetry off (core/tracing.py)
        try:
            if tracing is None:
                report = await run_async(job, self.allowed, self.retryable, self.mine, stop)
            else:   # its CONSUMER span, in this task's context only
                report = HorseReport.from_dict(
                    await tracing.run_async(job, lambda: self.as_dict(job, stop)))
        finally:
            final = progress.end_task(holder)
            if self.lease is not None:
                self.lease.idle(entry)
        if report.error_type == CANCELLED_FROM_OUTSIDE:   # (run_async's _OUTSIDE)
            os._exit(75)     # the loop is not its own any more: report nothing more
        if final is not None:
            report.progress = final
        report = self._settled(job, report)
        report.job = job.id               # the worker takes the line for this job only
        self.write(prefix + report.encode() + b"\n")
        del self.tasks[entry], self.stops[entry], self.holders[entry]   # a cancel: let be
        if tracing is not None and not self.tasks:
            self.flush(tracing)
        self.maybe_done()

    def _settled(self, job: Job[Any], report: HorseReport) -> HorseReport:
        """The job's report once the horse looked at itself: a job that replaced the
        framework fails; a failure, a framework replaced, a child left or the RSS past
        the ceiling retire the horse ("-", written before the report)."""
        loop = asyncio.get_running_loop()
        factory = loop.get_task_factory() is not self._factory   # a job replaced it
        if factory:      # put back (the horse's own tasks never used it), and retire
            loop.set_task_factory(self._factory)
        changed = guard.replaced(self.originals)
        if changed:      # the job replaced the framework: it fails, the horse retires
            guard.restore(self.originals)
            report = guard.replaced_report(changed)
        elif report.ok and job.func not in self.mine:
            remember(self.mine, job.func, self.allowed)
        if not self.leaving and (changed or factory or not report.ok or has_children()
                                 or over_memory(self.max_rss)):
            self.leaving = True
            self.write(b"-\n")
        return report

    async def as_dict(self, job: Job[Any], stop: Stop) -> dict[str, Any]:
        return (await run_async(job, self.allowed, self.retryable, self.mine, stop)).as_dict()

    def flush(self, tracing: Any) -> None:
        """The horse is idle: export its spans off the loop (a slow collector must not
        hold the next jobs), one flush at a time; busy, the SDK's own thread exports."""
        if self.flushing.acquire(blocking=False):
            def flush() -> None:
                try:
                    tracing.flush()
                finally:
                    self.flushing.release()
            threading.Thread(target=flush, daemon=True, name="fusionworker-span-flush").start()

    def monitor(self, loop: asyncio.AbstractEventLoop) -> None:  # pragma: no cover - thread
        """Name the job whose task holds the loop for BLOCKED seconds (once per block)."""
        said = 0.0
        while True:
            time.sleep(BLOCKED / 4)
            beat = self.beat
            held = time.monotonic() - beat
            if held < BLOCKED or said == beat:
                continue
            said = beat
            line = self._holder_line(asyncio.current_task(loop), held)
            if line and self.io.acquire(timeout=BLOCKED / 4):
                try:         # the loop thread is not writing: it is held by the job
                    write_all(self.write_fd, line)
                except OSError:
                    pass
                finally:
                    self.io.release()

    def _holder_line(self, task: asyncio.Task[Any] | None, held: float) -> bytes:
        """``!<entry> <seconds>``: the job whose task, or a task its code created, holds
        the loop; ``!- <seconds>``: a task of a job that ended holds it (no running job
        is to blame); empty: nothing to say (no task: the loop's own code)."""
        if task is None:
            return b""
        for entry, running in list(self.tasks.items()):
            if running is task:
                return b"!%d %.1f\n" % (entry, held)
        owner = self.owners.get(task)
        if owner is None:     # made while a job's own factory ran: nobody running to blame
            return b"!- %.1f\n" % held
        for entry, holder in list(self.holders.items()):
            if holder is owner:
                return b"!%d %.1f\n" % (entry, held)
        return b"!- %.1f\n" % held


async def run_async(job: Job[Any], allowed: tuple[str, ...], retryable: Any,
                    resolved: Mapping[str, Callable[..., Any]],
                    stop: Stop | None = None) -> HorseReport:
    """:func:`~.run.run_job` for a task: the job under ``asyncio.timeout`` (cancelled
    at its timeout: ``timeout``; at its ``stop``: ``stopped``, whatever it then did,
    swallowed the cancel too); never raises."""
    stop = stop or Stop()
    if stop.asked:              # the cancel came before its task began: never started
        return _stopped("before it started")
    if job.retry_on is not None:
        retryable = job.retry_on
    try:
        func = resolved.get(job.func) or resolve(job.func, allowed)
    except (FunctionNotAllowed, InvalidFunction) as exc:
        return HorseReport(ok=False, reason=FailureReason.REFUSED,
                           error_type=type(exc).__name__, error_message=str(exc),
                           traceback="")
    stop.scope = scope = asyncio.timeout(max(job.timeout, 0.001))
    try:
        async with scope:
            result = func(*job.args, **job.kwargs)
            if _awaitable(result):
                result = await result
    except TimeoutError:
        if stop.took(scope):
            return _stopped("its task was cancelled")
        if not scope.expired():
            return _failed(retryable)
        return HorseReport(ok=False, reason=FailureReason.TIMEOUT, error_type="JobTimeoutError",
                           error_message=f"job exceeded its timeout of {job.timeout:g} s",
                           traceback=_format_exc(),
                           retryable=is_retryable(JobTimeoutError(), retryable))
    except BaseException as exc:  # noqa: BLE001 - the horse reports everything, even SystemExit
        if stop.took(scope):
            return _stopped("its task was cancelled")
        if isinstance(exc, asyncio.CancelledError) and _cancelled_from_outside():
            return _OUTSIDE
        return _failed(retryable)
    if stop.took(scope):        # it swallowed the cancel and returned: stopped all the same
        return _stopped("its task was cancelled (the job caught it and returned)")
    return _result_report(result)     # its JSON, or why not (FUSIONWORKER_MAX_RESULT_BYTES)


#: the error type of a job whose task was cancelled by nothing of its horse's (not its
#: timeout, not its stop): another task of the loop (a mate's job, or one a job left)
#: called ``cancel()`` on it, or the loop is being torn down (a mate stopped it, or
#: raised KeyboardInterrupt out of it). :meth:`AsyncHorse.run` ends the horse then,
#: reporting nothing more: the worker gives every unreported job of it back uncharged
#: (a shared death, slot.py), as for any death a mate may have caused.
CANCELLED_FROM_OUTSIDE = "TaskCancelledFromOutside"
_OUTSIDE = HorseReport(ok=False, reason=FailureReason.EXCEPTION,
                       error_type=CANCELLED_FROM_OUTSIDE,
                       error_message="its task was cancelled by another task of its horse",
                       traceback="")


def _cancelled_from_outside() -> bool:
    """The running task has a cancel() pending: it was cancelled as a task (not a
    CancelledError the job's own code met awaiting something else cancelled)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _stopped(how: str) -> HorseReport:
    """The report of a job stopped on request (``job stop``): never retried."""
    return HorseReport(ok=False, reason=FailureReason.STOPPED, error_type="JobStopped",
                       error_message=f"stopped on request (job stop): {how}; its async "
                                     "horse ran on", traceback="")


def _failed(retryable: Any) -> HorseReport:
    """The report of the exception being handled."""
    import sys

    exc = sys.exc_info()[1]
    assert exc is not None
    return HorseReport(ok=False, reason=FailureReason.EXCEPTION,
                       error_type=type(exc).__name__, error_message=_describe(exc),
                       traceback=_format_exc(), retryable=is_retryable(exc, retryable),
                       retry_delay=exc.delay if isinstance(exc, Retry) else None)


def async_horse(first: bytes, job_r: int, write_fd: int, allowed: tuple[str, ...],
                retryable: tuple[str, ...], resolved: Mapping[str, Callable[..., Any]],
                max_rss: int, lease: OwnLease | None) -> NoReturn:  # pragma: no cover
    """The horse from its first frame (``first``, an async job's) on; ends in
    ``os._exit``."""
    code = 0
    try:
        horse = AsyncHorse(job_r, write_fd, allowed, retryable, resolved, max_rss, lease)
        # not asyncio.run: its teardown cancels every task left and waits for them, so a
        # task a job left that swallows CancelledError kept a retired horse alive for
        # good. Every job reported once serve() returned: what is left is abandoned
        # with the process (and an exception out of the loop ends it at once, as 70)
        asyncio.new_event_loop().run_until_complete(horse.serve(first))
        os.close(write_fd)
        _flush_job_events()
        if _tracing.horse_tracing is not None:   # after the last outcome went out, bounded
            _tracing.horse_tracing.flush()
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 70
    finally:
        os._exit(code)
