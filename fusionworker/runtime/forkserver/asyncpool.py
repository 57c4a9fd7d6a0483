"""The fork server's side of async horses (``worker --async-per-horse K``; design.md,
"Async horses"): which job is an async horse's, and the making of one.

An async horse (horse/asyncloop.py) runs up to K jobs at once on one event loop; a
sync job never goes to one. The server only makes them: an ``async def`` job's
request (its function resolved here: the warm rule) goes to a ready horse (forked
now if none is) as a frame whose body starts with ``ASYNC``, which makes it an
async horse, and the horse is handed to the worker at the end of the turn with its
pipes (handover.py; its :class:`~..protocol.HandoverNotice` is the answer to that
request). The later async requests of the same turn (the worker does not know a
function is async before the first answer: a burst of C jobs comes here whole) go
to that horse while it has room (K, the cap, its pipe), each answered by a shared
:class:`~..protocol.StartNotice` after the handover. From then on the worker
writes its jobs and cancel frames, reads its lines and decides when it takes no
more (runtime/directasync.py); the server reaps it (a
:class:`~..protocol.GoneNotice`) and keeps its lease watchdog on the board entries
the worker marks as that horse's. Crash points: the horse dies before the worker
read the handover: the worker's first read of its pipe is EOF, and the GoneNotice
ends its job; the server dies after the write, before the send: the horse dies
with it (PDEATHSIG), the request is asked again of a new server (launch.py), the
job never ran.
"""

from __future__ import annotations

import fcntl
import inspect
from collections.abc import Callable
from typing import Any

from ..protocol import RunRequest, StartNotice, for_async_horse, unread, write_all
from ..slot_device import device_of
from .handover import Outgoing
from .modules import REMEMBER_MAX, remember


def coroutine_function(target: Any) -> bool:
    """``target`` (a resolved job function, or its ``@job`` handle) is ``async def``."""
    try:
        return inspect.iscoroutinefunction(inspect.unwrap(target))
    except ValueError:      # a __wrapped__ cycle
        return False


class _Making:
    """An async horse made in this turn, not sent yet: its job pipe, its jobs so far."""

    __slots__ = ("handed", "job_w", "pid", "pipe_size")

    def __init__(self, pid: int, job_w: int) -> None:
        self.pid, self.job_w, self.handed = pid, job_w, 1
        self.pipe_size = fcntl.fcntl(job_w, fcntl.F_GETPIPE_SZ)

    def takes(self, k: int, cap: int, size: int) -> bool:
        return (self.handed < min(k, cap)
                and self.pipe_size - unread(self.job_w) >= size)


class AsyncHorses:
    """The server's making of async horses (a part of ``server.Server``, which provides
    the attributes declared below)."""

    # provided by Server
    resolved: dict[str, Callable[..., Any]]
    tried: set[str]
    allowed: tuple[str, ...]
    exiting: set[int]
    slots: int
    want: int
    ready: list[Any]
    idle: dict[int, Any]
    running: dict[int, Any]
    handed: set[int]
    spawn: Callable[[], Any]
    out: list[Outgoing]
    hand_async: Callable[[int, int, int, RunRequest, int], None]    # handover.py

    def init_async(self, k: int) -> None:
        """K async jobs per horse; the pool (``slots`` horses) shrinks to the horses C
        async jobs need (C/K): sync jobs beyond them get horses forked on demand."""
        self.async_k = max(1, k)
        if self.async_k > 1:
            self.slots = -(-self.slots // self.async_k)
            # asyncio and the async horse's code, imported once here for every horse
            # (each imported them itself: 3 MiB of memory of its own)
            from ..horse import asyncloop  # noqa: F401
        self.is_async: dict[str, bool] = {}               # func -> async def (once known)
        #: the async horses made this turn, by device: sent at its end (handover.py)
        self.making: dict[str | None, _Making] = {}

    def ahead(self) -> int:
        """How many horses the server keeps ready (``Server.fork_ahead``). Fresh horses:
        as many as the largest batch of requests seen (<= READY_MAX). Warm horses: one
        per worker slot, ready, running or idle (a prefork pool; a retired one is
        replaced). Async horses (K > 1): one beyond those in use, up to the pool's C / K:
        a horse takes K jobs, so a pool forked whole would hold, at most paces, horses
        no job reaches (2.9 MiB of PSS each); a turn that needs more forks them then."""
        if not self.slots:
            return self.want
        room = self.slots - len(self.idle) - len(self.running) - len(self.handed)
        return min(room, 1) if self.async_k > 1 else room

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
        """The async horse made this turn for the job's device, if it has room; else a
        ready horse (forked now if none is) gets ``request`` as its first async job and
        goes to the worker (``cap``: the jobs it may be handed in all for this
        function). One that died before the write retires; the next is tried."""
        body = for_async_horse(request.entry, request.body)
        device = device_of(request.entry)
        made = self.making.get(device)
        if made is not None and made.takes(self.async_k, cap, len(body)):
            try:
                write_all(made.job_w, body)
            except BrokenPipeError:      # it died: the worker's read of its pipe says so
                del self.making[device]
            else:
                made.handed += 1
                self.out.append(StartNotice(made.pid, request.entry, True, cap).encode())
                return
        while True:
            fresh = self.ready.pop(0) if self.ready else self.spawn()
            try:
                write_all(fresh.job_w, body)
            except BrokenPipeError:
                fresh.retire()
                self.exiting.add(fresh.pid)
                continue
            self.hand_async(fresh.pid, fresh.job_w, fresh.report_r, request, cap)
            self.making[device] = _Making(fresh.pid, fresh.job_w)
            return
