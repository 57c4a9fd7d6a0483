"""A warm horse: a horse of the fork server that runs up to N jobs one after another
(``worker --horse-jobs N``; design.md, "Warm horses").

Only the fork server forks warm horses, and only when N > 1: the default path
(a fresh process per job) is :func:`~.main.waiting_horse`, unchanged. Sequence
(the server S, this horse H)::

    S: fork; H waits on its job pipe for a frame (4-byte length + the job's
       RunRequest body); EOF: S retired it, H exits
    S: a horse that died with its job still in its job pipe (killed while idle,
       just as S handed it the job) never started it: S hands the job to another
       horse and tells the worker (protocol.MovedNotice)
    H: at its first job: its own process group, PDEATHSIG, signals (as main.py)
    H: per job: current_job() begins, run_job (SIGALRM at the job's timeout),
       current_job() ends; the report, then "\\n" if H stays for another job, or
       EOF (pipe closed) and exit if it leaves

H stays only if the job succeeded, fewer than min(N, the function's
``horse_jobs``) jobs ran in it, its own memory is under ``max_horse_memory`` and no
child process of the job is left (what a job left in a fresh horse's group is
killed when the horse exits; a warm horse leaves instead). A report is one
line of JSON (``json.dumps`` escapes newlines), so ``"\\n"`` ends it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from ...core import tracing as _tracing
from .. import progress
from ..protocol import ACCEPT, HEADER, REFUSED, STAY, HorseReport, from_server, job_of, write_all
from ..slot_device import use_slot_device
from . import guard
from .lease import OwnLease
from .main import _flush_job_events, set_pdeathsig
from .run import _csignal, run_job
from .stay import has_children, over_memory, remember


def warm_horse(job_r: int, write_fd: int, server_pid: int, allowed: tuple[str, ...],
               retryable: tuple[str, ...], resolved: Mapping[str, Callable[..., Any]],
               horse_jobs: int, max_rss: int, lease: OwnLease | None = None,
               async_k: int = 1) -> NoReturn:  # pragma: no cover - a child
    """Run jobs from ``job_r`` until one says leave (or EOF); ``max_rss`` in bytes (0:
    no ceiling); ``lease``: its own lease watcher (lease.py); ``async_k`` > 1: an
    ``async def`` job belongs to an async horse (refused here once a sync horse).
    Ends in ``os._exit``."""
    code = 0
    done = 0
    mine = dict(resolved)       # what this horse resolved too: each function once
    #: the functions it ran and stayed after, and their caps (learnt after the first run:
    #: its module is loaded then); the direct path: a verdict for a function not in here
    caps: dict[str, int] = {}
    originals = guard.snapshot()    # what its reports rely on (guard.py)
    try:
        while True:
            frame = _read_frame(job_r)
            if frame is None:
                break
            entry, body = from_server(frame)
            if not done:
                _become_horse(server_pid)
                if body[:1] == b"A":      # an async job: this horse is an async horse
                    from .asyncloop import async_horse

                    async_horse(frame, job_r, write_fd, allowed, retryable, mine, max_rss,
                                lease)
            job = job_of(body)
            if not _judged(write_fd, job.func, done, horse_jobs, mine, allowed, async_k, caps):
                continue                          # refused: nothing ran, it stays idle
            done += 1
            if lease is not None and entry >= 0:
                lease.defer(entry)
            use_slot_device(entry)   # --gpus: the server gives it its first device's slots only
            report, tracing = _run_one(job, write_fd, allowed, retryable, mine)
            if lease is not None:
                lease.idle()
            report, intact = _guarded(report, job.func, originals, mine, allowed)
            stay = intact and _may_stay(report, job.func, done, horse_jobs, mine, max_rss, caps)
            report.job = job.id           # the worker takes it for this job only
            write_all(write_fd, report.encode() + (STAY if stay else b""))
            if not stay:
                os.close(write_fd)     # EOF now: the server goes on while this exits
            if tracing is not None:
                tracing.flush()
            if not stay:
                break
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 70
    finally:
        os._exit(code)


def _judged(write_fd: int, func: str, done: int, horse_jobs: int,
            mine: dict[str, Callable[..., Any]], allowed: tuple[str, ...], async_k: int,
            caps: dict[str, int]) -> bool:
    """The verdict on a job the worker wrote (the direct path), before any of its code
    runs: REFUSED + STAY and False when this horse may not run it (:func:`_refuses`);
    else True, after ACCEPT, the function's cap and a newline if it is a function this
    horse has not run (not in ``caps``; the worker reads the verdict first, design.md)."""
    if _refuses(func, done, horse_jobs, mine, allowed, async_k, caps):
        write_all(write_fd, REFUSED + STAY)
        return False
    if done and func not in caps:
        write_all(write_fd, ACCEPT + b"%d\n" % cap_of(func, horse_jobs, mine))
    return True


def _refuses(func: str, done: int, horse_jobs: int, mine: dict[str, Callable[..., Any]],
             allowed: tuple[str, ...], async_k: int, caps: Mapping[str, int]) -> bool:
    """A job the worker wrote here itself (the direct path) that this horse may not
    run: its function's cap is reached (``@job(horse_jobs=M)``), or it is ``async def``
    and async horses run those. Its function is resolved first (once per horse: its
    module imported, every check of ``functions.resolve``); one that does not resolve
    is run, and fails as it would anywhere. Its first job (``done`` 0) came from the
    fork server, which decided. The worker honours a refusal only as this horse's
    verdict on a function it has not run yet (before ACCEPT would come): written by a
    job, those bytes get its horse killed (direct.py). A function this horse ran
    (``caps``) was a sync one: only its cap is looked at."""
    if not done:
        return False
    known = caps.get(func)
    if known is not None:
        return done >= known
    if func not in mine:
        remember(mine, func, allowed)
    if done >= cap_of(func, horse_jobs, mine):
        return True
    if async_k > 1 and func in mine:
        import inspect

        try:
            return inspect.iscoroutinefunction(inspect.unwrap(mine[func]))
        except ValueError:      # a __wrapped__ cycle
            return False
    return False


def _guarded(report: HorseReport, func: str, originals: guard.Snapshot,
             resolved: dict[str, Callable[..., Any]], allowed: tuple[str, ...]
             ) -> tuple[HorseReport, bool]:
    """The job's report and False if it replaced the framework (it fails, the horse
    retires: the originals are put back); else the report, True, and a function that
    ran well is remembered (resolved once per horse)."""
    changed = guard.replaced(originals)
    if changed:
        guard.restore(originals)
        return guard.replaced_report(changed), False
    if report.ok and func not in resolved:
        remember(resolved, func, allowed)
    return report, True


def _may_stay(report: HorseReport, func: str, done: int, horse_jobs: int,
              resolved: Mapping[str, Callable[..., Any]], max_rss: int,
              caps: dict[str, int]) -> bool:
    """The horse takes another job: this one went well, its cap is not reached, it is
    under its memory ceiling and left no child process behind. The function's cap is
    worked out after its first run here (its module loaded) and kept in ``caps``."""
    if not report.ok:
        return False
    cap = caps.get(func)
    if cap is None:
        cap = caps[func] = cap_of(func, horse_jobs, resolved)
    return done < cap and not over_memory(max_rss) and not has_children()


def _become_horse(server_pid: int) -> None:
    """What horse/main.py's horse_main does before its job, once."""
    os.setpgid(0, 0)
    set_pdeathsig(subreaper=True)
    if os.getppid() != server_pid:
        os._exit(1)
    signal.set_wakeup_fd(-1)
    _csignal.signal(signal.SIGINT, _csignal.SIG_IGN)
    _csignal.signal(signal.SIGTERM, _csignal.SIG_DFL)
    _csignal.signal(signal.SIGCHLD, _csignal.SIG_DFL)


def _run_one(job: Any, write_fd: int, allowed: tuple[str, ...], retryable: tuple[str, ...],
             resolved: Mapping[str, Callable[..., Any]]) -> tuple[HorseReport, Any]:
    """One job, as horse_main runs it: its own current_job() (meta starts from the job's
    record, never from the previous job), its span if tracing is on. The signals a
    kill relies on are set again if the previous job changed them."""
    if _csignal.getsignal(signal.SIGTERM) != _csignal.SIG_DFL:
        _csignal.signal(signal.SIGTERM, _csignal.SIG_DFL)
    if _csignal.getsignal(signal.SIGINT) != _csignal.SIG_IGN:
        _csignal.signal(signal.SIGINT, _csignal.SIG_IGN)
    progress.begin(job, fd=write_fd)
    tracing = _tracing.horse_tracing
    if tracing is None:
        report = run_job(job, allowed, retryable, resolved)
    else:
        report = HorseReport.from_dict(tracing.run(
            job, lambda: run_job(job, allowed, retryable, resolved).as_dict()))
    final = progress.end()
    if final is not None:
        report.progress = final
    _flush_job_events()
    return report, tracing


def cap_of(func: str, horse_jobs: int, resolved: Mapping[str, Callable[..., Any]]) -> int:
    """How many jobs a horse running ``func`` may run in all: ``horse_jobs`` (the
    worker's), lowered by the function's ``@job(horse_jobs=M)``."""
    registry = sys.modules.get("fusionworker.core.registry")   # loaded if @job/register ran
    handle: Any = registry.lookup(func) if registry is not None else None
    if handle is None:      # (register() leaves the module attribute the plain function)
        handle = resolved.get(func)
    own = getattr(handle, "horse_jobs", None)
    if isinstance(own, int) and not isinstance(own, bool) and own >= 1:
        return min(horse_jobs, own)
    return horse_jobs


def _read_frame(fd: int) -> bytes | None:
    """One length-prefixed frame from the blocking pipe ``fd``; None at EOF."""
    head = _read_exact(fd, HEADER.size)
    if head is None:
        return None
    return _read_exact(fd, HEADER.unpack(head)[0])


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
