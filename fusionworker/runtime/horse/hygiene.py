"""What a horse holds and how the kernel treats it: only its own descriptors, and
the first place in line for the OOM killer.

A horse is a fork of the fork server (or of the worker, when it has none): at
fork it holds every descriptor of its parent: the worker's socket, the deadline
board's memfd, the SIGCHLD wake-up pipe, the epoll, the pipes of the horses
forked before it (and, forked by the worker, its Redis connections). A job that
writes into them harms every job beside it. :func:`close_others` closes all of
them at the horse's start: it keeps 0, 1 and 2, its job and report pipes and
what its parent declared the horses' own (the descriptors the OpenTelemetry set-up
of the fork server opened for the horses' exporters); whatever the job opens later
is its own.

:func:`raise_oom_score`: a horse's ``oom_score_adj`` is above its parent's
(:func:`oom_target`, computed once in the process that forks), so the kernel's OOM
killer takes a horse (the job that grew) rather than the fork server or the worker,
whose death every running job would share. The fork server writes it for each horse
it forks ahead, before the horse has a job; a horse the worker forks itself (no fork
server) writes its own, before its job starts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

#: a horse's oom_score_adj is at least this (and above its parent's, up to 1000)
OOM_SCORE_MIN = 800

_OOM_PATH = "/proc/self/oom_score_adj"
_FD_MAX = 0x7FFFFFFF

_target: bytes | None = None


def oom_target() -> bytes:
    """The horses' ``oom_score_adj``: the forking process's own + 500, at least
    :data:`OOM_SCORE_MIN`, at most 1000 (read once per process, before its forks)."""
    global _target
    if _target is None:
        try:
            with open(_OOM_PATH, "rb") as fh:
                own = int(fh.read().strip() or b"0")
        except (OSError, ValueError):
            own = 0
        _target = str(min(1000, max(own + 500, OOM_SCORE_MIN))).encode()
    return _target


def raise_oom_score(target: bytes | None = None, pid: int | None = None) -> None:
    """The OOM killer's first pick: this process, or (``pid``) a horse the caller just
    forked, before it has a job (the write costs the parent a few system calls; in the
    fresh fork it also copies each page its code touches). A failed write is ignored:
    the kernel may refuse it, the horse may be gone, or there is no /proc."""
    try:
        fd = os.open(_OOM_PATH if pid is None else f"/proc/{pid}/oom_score_adj", os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, target or oom_target())
    except OSError:
        pass
    finally:
        os.close(fd)


def log_fds() -> list[int]:
    """The descriptors the root logger's stream handlers write to (the worker's
    ``--log-file``, stderr): a job's own logging still reaches them."""
    out = []
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if stream is None:
            continue
        try:
            out.append(stream.fileno())
        except (AttributeError, OSError, ValueError):   # no descriptor (a StringIO)
            pass
    return out


def horse_keeps(own: Iterable[int]) -> tuple[int, ...]:
    """In the process that forks, before the fork: what its horse keeps above 2 (``own``
    and the log's descriptors), sorted, for :func:`close_others` (nothing to work out in
    the horse, whose every first touch of a page is a copy)."""
    return tuple(sorted({fd for fd in (*own, *log_fds()) if fd > 2}))


def close_others(keep: tuple[int, ...]) -> None:
    """Close every descriptor above 2 but ``keep`` (:func:`horse_keeps`: sorted, each
    above 2; one ``close_range`` per gap, nothing else worked out in the fork)."""
    low = 3
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _FD_MAX)


def open_fds() -> set[int]:
    """The descriptors this process holds now (to learn which ones a set-up opened)."""
    try:
        listed = {int(name) for name in os.listdir("/proc/self/fd")}
    except (OSError, ValueError):
        return set()
    return {fd for fd in listed if _is_open(fd)}   # not the listing's own, closed since


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
