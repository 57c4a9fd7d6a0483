"""The horse's process: one forked child per job.

Sequence (whoever forked it, F: the fork server, or the worker itself when it
has none; the horse H)::

    F: pipe(); fork()          (the fork server forks ahead: H waits on a job
                                pipe for its one job, :func:`waiting_horse`)
    H: own process group; PR_SET_PDEATHSIG=SIGKILL (H dies with F, so a job is
       never left running with nobody to record it); SIGINT ignored,
       SIGTERM default; SIGALRM armed at the job timeout (death penalty, run.py)
    H: check the allow-list, import, call, JSON-encode the result (run.py)
    H: write one JSON report to the pipe (protocol.HorseReport); close it;
       os._exit(0). Before it, while the job runs: progress/meta frames, only
       if the job calls ``current_job().set_progress`` or changes its
       ``meta`` (progress.py)
    F: the report, or the way H died (its wait status), becomes the outcome
       (runtime/exits.py, in the worker)

H never talks to Redis: everything it needs was in its parent's memory at
fork time or came with its job, and everything it produces goes through the
pipe. Before its job it drops whatever of its parent it holds (hygiene.py:
``close_others`` in a fork of F, :func:`settle_in` in a fork of the worker's own);
its lease deadline is watched by F and by H itself (runtime/deadlines.py, lease.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from ...core import tracing as _tracing
from .. import progress
from ..deadlines import DeadlineBoard
from ..protocol import HorseReport, from_server, job_of, write_all
from ..slot_device import use_slot_device
from .hygiene import close_others, raise_oom_score
from .lease import BoardView, OwnLease
from .run import _csignal, run_job

if TYPE_CHECKING:  # pragma: no cover
    from ...core.job import Job

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

_libc: Any = None


def set_pdeathsig(subreaper: bool = False) -> None:
    """Die (SIGKILL) with the parent process. libc is loaded once per process.
    ``subreaper``: a warm horse's: what its job's children leave when they exit (a
    double fork's grandchild, a daemon) becomes its child, not init's, so the horse
    sees it (horse/stay.py: retired) instead of running its next job beside a process
    of the last one holding its pipes."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(_PR_SET_PDEATHSIG, _csignal.SIGKILL, 0, 0, 0)
        if subreaper:
            _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the reaper still recovers the job
        pass


def settle_in(board: DeadlineBoard | None, keep: tuple[int, ...],
              view: BoardView | None = None) -> OwnLease | None:
    """In a fresh fork of the worker that becomes a horse (the fork server does its own
    part from outside, forkserver/server.py): the OOM killer's first pick; a read-only
    view of the board for its own lease (lease.py): ``board`` itself when the parent
    mapped it read-only (:meth:`DeadlineBoard.reading`), else ``view`` (made once by the
    parent), the writable mapping dropped; every descriptor closed but ``keep``
    (:func:`~.hygiene.horse_keeps`, worked out by the parent before the fork: the log's
    are in it). Never raises."""
    raise_oom_score()
    lease = None
    if board is not None:
        if board.read_only:
            lease = OwnLease(board)
        else:
            lease = OwnLease(view) if view is not None else None
            board.detach()
    close_others(keep)
    return lease


def horse_main(job: Job[Any], write_fd: int, parent_pid: int, allowed: tuple[str, ...],
               retryable: tuple[str, ...], *,
               resolved: Mapping[str, Callable[..., Any]] | None = None,
               lease: OwnLease | None = None, entry: int = -1) -> NoReturn:
    """Body of the child. Ends in ``os._exit``: no atexit, no parent cleanup code.

    ``lease``: the horse's own lease watcher (lease.py), on board entry ``entry`` (made
    by the fork server before the fork, or by :func:`settle_in`); ``resolved``: the fork
    server's resolved functions."""
    code = 0
    try:
        os.setpgid(0, 0)     # its own group: what a kill of it signals (slot.py)
        set_pdeathsig()
        if os.getppid() != parent_pid:  # the parent died before PDEATHSIG was armed
            os._exit(1)
        signal.set_wakeup_fd(-1)
        _csignal.signal(_csignal.SIGINT, _csignal.SIG_IGN)   # (_csignal: plain ints, no enums)
        _csignal.signal(_csignal.SIGTERM, _csignal.SIG_DFL)
        _csignal.signal(_csignal.SIGCHLD, _csignal.SIG_DFL)
        if lease is not None and entry >= 0:   # never outlives its lease, whatever freezes
            lease.defer(entry)
        use_slot_device(entry)               # --gpus: this slot's device only (slot_device.py)
        progress.begin(job, fd=write_fd)     # current_job() (progress.py)
        tracing = _tracing.horse_tracing   # None: OpenTelemetry off (core/tracing.py)
        if tracing is None:
            report = run_job(job, allowed, retryable, resolved)
        else:   # a CONSUMER span around the job (middleware/otel.py), over the report's dict
            report = HorseReport.from_dict(tracing.run(
                job, lambda: run_job(job, allowed, retryable, resolved).as_dict()))
        final = progress.end()           # no frame after this; the last state goes along
        if final is not None:
            report.progress = final
        report.job = job.id
        _flush_job_events()
        write_all(write_fd, report.encode())
        os.close(write_fd)   # EOF now: the parent goes on while this process exits
        if tracing is not None:   # after the outcome went out, for a bounded time
            tracing.flush()
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 70
    finally:
        os._exit(code)


def waiting_horse(job_r: int, write_fd: int, server_pid: int, allowed: tuple[str, ...],
                  retryable: tuple[str, ...], resolved: Mapping[str, Callable[..., Any]],
                  lease: OwnLease | None = None) -> NoReturn:  # pragma: no cover
    """A horse the fork server forked ahead: wait for its one job on ``job_r`` (its board
    entry and a :class:`~fusionworker.runtime.protocol.RunRequest`'s body,
    :func:`~fusionworker.runtime.protocol.for_horse`), then run it.

    EOF without a job (the server retired it, or died): exit. It joins its own
    process group only with its job (:func:`horse_main`), so an idle one is no horse yet.
    """
    try:
        chunks = []
        while True:
            chunk = os.read(job_r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(job_r)
        if not chunks:
            os._exit(0)
        entry, body = from_server(b"".join(chunks))
        job = job_of(body)
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        os._exit(70)
    horse_main(job, write_fd, server_pid, allowed, retryable, resolved=resolved,
               lease=lease, entry=entry)


def _flush_job_events() -> None:
    """Deliver events the job itself produced (e.g. ``queued`` of jobs it enqueued).

    The horse ends in ``os._exit``, which skips atexit and kills the sink's
    delivery thread; only a job that enqueued something has a sink to flush.
    """
    registry = sys.modules.get("fusionworker.events.registry")   # made a sink: imported
    if registry is not None:
        registry.flush_default_sinks(2.0)
