"""The worker's handle of its fork server (the package docstring says what it is).

:meth:`ForkServer.submit` sends a :class:`~fusionworker.runtime.protocol.RunRequest`
per job and returns at once: the server answers each request, in order, with the
pid of the horse that runs it, read later with everything else the socket brings
(:attr:`ForkServer.on_start`). :meth:`ForkServer.exits` hands over the horses'
exit notices; progress notices go to :attr:`ForkServer.on_update` as they are read.
"""

from __future__ import annotations

import array
import errno
import json
import os
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..protocol import (
    ExitNotice,
    GoneNotice,
    HandoverNotice,
    Notice,
    ProgressNotice,
    RunRequest,
    StartNotice,
    take_notices,
)

if TYPE_CHECKING:  # pragma: no cover
    from ...core.job import Job

# Runs in the fresh interpreter. Importing the package is cheap (its public names are
# imported on first use, PEP 562): the server loads server.py, the horse and what they
# import, not redis or the worker. Job code's ``from fusionworker import Retry`` loads
# that name in its horse only.
_BOOT = """\
# fusionworker fork server
import json, sys
path, args = json.loads(sys.argv[1])
sys.path[:] = path
if "log" in args:   # job code's log records that nothing else takes: the worker's log
    from fusionworker.runtime.horse.joblog import send_unconfigured_to_worker_log
    send_unconfigured_to_worker_log(*args.pop("log"))
from fusionworker.runtime.forkserver.server import serve
serve(**args)
"""


#: ancillary space for the descriptors one read may bring (each handover brings two; the
#: kernel ends a read after the data that carried descriptors)
_FDS_SPACE = socket.CMSG_SPACE(16 * array.array("i").itemsize)
#: the read's flags, an int once (``|`` of two socket flags builds an enum member per call)
_RECV_FLAGS = int(socket.MSG_DONTWAIT) | int(socket.MSG_CMSG_CLOEXEC)
_DIRECT_NOTICES = (HandoverNotice, GoneNotice)


class ForkServerDied(RuntimeError):
    """The fork server went away (killed, crashed) or could not be started."""


class ForkServer:
    """The worker's handle of its fork server (started lazily, restarted if it dies)."""

    def __init__(self, allowed: Sequence[str], retryable: Sequence[str],
                 otel: dict[str, Any] | None = None, board_fd: int = -1,
                 kill_children: bool = True, warm: dict[str, int] | None = None,
                 imports: Sequence[str] = (), result_cap: int = 0,
                 log: tuple[str, str] | None = None) -> None:
        self.board_fd = board_fd        # the worker's DeadlineBoard (deadlines.py), shared
        #: the server kills what a job left in its horse's group (FUSIONWORKER_KILL_JOB_CHILDREN)
        self.kill_children = kill_children
        self.allowed = tuple(allowed)
        self.retryable = tuple(retryable)
        self.otel = otel
        #: ``{"horse_jobs": N, "max_rss_mib": M, "async_per_horse": K}`` with N > 1: warm
        #: horses (horse/warm.py), K > 1: async horses (forkserver/asyncpool.py)
        self.warm = warm if warm and warm.get("horse_jobs", 1) > 1 else None
        self.imports = list(imports)    # imported by the server before its first horse
        self.result_cap = result_cap    # FUSIONWORKER_MAX_RESULT_BYTES: checked by the horses
        self.log = log                  # (level, format): job code's otherwise lost lines
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._exits: dict[int, ExitNotice] = {}     # by board entry
        self._inbox = bytearray()       # what was read of the socket, not parsed yet
        #: gets (entry, frame) for every progress frame of a job (progress.py); None: dropped
        self.on_update: Callable[[int, str], None] | None = None
        #: gets (entry, to): a warm horse died before it took its job, ``to`` runs it
        self.on_move: Callable[[int, int], None] | None = None
        #: gets each answer as it is read, in the order of the requests (warm horses: a
        #: pid seen again; an async horse's, ``shared``: a pid running other jobs too)
        self.on_start: Callable[[StartNotice], None] | None = None
        #: gets a board entry: cancel the task of that job in its async horse (the worker
        #: writes to the horses it was handed itself); False: no async horse runs it
        self.on_cancel: Callable[[int], bool] | None = None
        #: gets (notice, job pipe's write end, report pipe's read end): a warm horse the
        #: server handed over (the direct path); None: its descriptors are closed
        self.on_handover: Callable[[HandoverNotice, int, int], None] | None = None
        #: gets (pid, wait status): a handed horse was reaped
        self.on_gone: Callable[[int, int], None] | None = None
        self._fds: deque[int] = deque()    # descriptors received, not taken by a notice

    def start(self) -> None:
        """Start the server process (a fresh interpreter; about 30 ms, once)."""
        ours, theirs = socket.socketpair()
        args = {"fd": theirs.fileno(), "worker_pid": os.getpid(), "allowed": list(self.allowed),
                "retryable": list(self.retryable), "preload": bool(self.allowed),
                "board_fd": self.board_fd, "kill_children": self.kill_children}
        if self.otel:
            args["otel"] = self.otel
        if self.warm:
            args.update(self.warm)
        if self.imports:
            args["imports"] = self.imports
        if self.result_cap:
            args["max_result_bytes"] = self.result_cap
        if self.log:
            args["log"] = list(self.log)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps([sys.path, args])],
                pass_fds=[theirs.fileno()] + ([self.board_fd] if self.board_fd >= 0 else []),
                stdin=subprocess.DEVNULL, close_fds=True,
            )
        except OSError as exc:
            ours.close()
            raise ForkServerDied(f"cannot start the fork server: {exc}") from exc
        finally:
            theirs.close()
        self.sock = ours

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def submit(self, jobs: Sequence[Job[Any]], entries: Sequence[int] | None = None) -> None:
        """Ask for one horse per job (``entries``: each job's deadline board entry) and
        return without waiting: each answer (its horse's pid) goes to :attr:`on_start`
        when it is read, in the order of the requests. Raises ForkServerDied when the
        requests cannot be sent (a server that died before is started again first)."""
        if not self.alive:
            self.close()
            self.start()
        assert self.sock is not None
        entries = entries or [0] * len(jobs)
        trace = bool(self.otel)
        data = b"".join(RunRequest.of(job, entry, trace).encode()
                        for job, entry in zip(jobs, entries))
        try:
            self.sock.sendall(data)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
            self.close()
            raise ForkServerDied("the fork server went away") from None

    def cancel(self, entry: int) -> bool:
        """Cancel the task of the job on board entry ``entry`` in its async horse (a stop
        of that job; the horse and its other jobs run on): :attr:`on_cancel` writes the
        horse's cancel frame. False: the server is gone (its horses died with it), or no
        async horse of it runs that job."""
        if not self.alive or self.on_cancel is None:
            return False
        return self.on_cancel(entry)

    def exits(self) -> tuple[dict[int, ExitNotice], bool]:
        """Every exit notice the server sent so far (read without blocking), by entry,
        each handed over once; and whether the server is gone (its other horses then
        die with it: PDEATHSIG)."""
        died = False
        try:
            while self.sock is not None and self._read():
                pass
        except ForkServerDied:
            died = True
        out, self._exits = self._exits, {}
        return out, died or self.sock is None

    def _read(self) -> bool:
        """Read what the socket holds, without waiting, and deal with every complete
        notice in the order sent: an answer's pid goes to :attr:`on_start`, an exit
        notice is kept for :meth:`exits`, a progress notice goes to :attr:`on_update`, a
        moved notice to :attr:`on_move` (before the new horse's notices). One ``recv``
        reads many notices. False: nothing was there. Raises ForkServerDied at EOF or on
        a socket error (the server is gone)."""
        assert self.sock is not None
        try:
            chunk, ancillary, _, _ = self.sock.recvmsg(1 << 16, _FDS_SPACE, _RECV_FLAGS)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            chunk, ancillary = b"", []
        if ancillary:
            self._take_fds(ancillary)
        if not chunk:
            self.close()
            raise ForkServerDied("the fork server went away")
        self._inbox.extend(chunk)
        for notice in take_notices(self._inbox):
            self._dispatch(notice)
        return True

    def _dispatch(self, notice: Notice) -> None:
        """One notice to whom it concerns (:meth:`_read`)."""
        if isinstance(notice, StartNotice):     # the commonest first
            if self.on_start is not None:
                self.on_start(notice)
        elif isinstance(notice, ExitNotice):
            self._exits[notice.entry] = notice
        elif isinstance(notice, ProgressNotice):
            if self.on_update is not None:
                self.on_update(notice.entry, notice.update)
        elif isinstance(notice, _DIRECT_NOTICES):
            self._direct(notice)
        elif self.on_move is not None:     # MovedNotice
            self.on_move(notice.entry, notice.to)

    def _take_fds(self, ancillary: list[tuple[int, int, bytes]]) -> None:
        """Descriptors that came with a read (a handed horse's pipes, close-on-exec)."""
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
                self._fds.extend(fds)

    def _direct(self, notice: HandoverNotice | GoneNotice) -> None:
        """A horse handed over (its two descriptors came before or with its notice, in
        order) or a handed horse reaped. An async horse's handover is also the answer to
        its first job's request (:attr:`on_start`, once the horse was handed)."""
        if isinstance(notice, GoneNotice):
            if self.on_gone is not None:
                self.on_gone(notice.pid, notice.status)
            return
        if len(self._fds) < 2:     # cannot be: they come with the notice's first byte
            return
        job_w, report_r = self._fds.popleft(), self._fds.popleft()
        if self.on_handover is None:
            os.close(job_w)        # EOF: the horse exits (the server reaps it)
            os.close(report_r)
        else:
            self.on_handover(notice, job_w, report_r)
        if notice.shared and self.on_start is not None:
            self.on_start(StartNotice(notice.pid, notice.entry, shared=True, cap=notice.cap))

    def close(self) -> None:
        """Stop the server (closing the socket is its signal to exit)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._inbox.clear()          # a server started again answers from the start
        while self._fds:
            os.close(self._fds.popleft())
        if self.proc is not None:
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
