"""The fork server's side of the direct path (design.md, "The direct path"): a warm
sync horse that reported its first job and stays is handed to the worker, its pipes
passed over the socket (SCM_RIGHTS); the worker writes its jobs and reads its reports
from then on. An async horse is handed with its first job (asyncpool.py). The server
keeps forking, reaping (a :class:`~..protocol.GoneNotice` per handed horse) and its
lease watchdog (the board's owner of each entry).
"""

from __future__ import annotations

import array
import os
import select
import socket
from typing import TYPE_CHECKING, Any

from ..protocol import GoneNotice, HandoverNotice, RunRequest, send_reading

if TYPE_CHECKING:  # pragma: no cover
    from ..deadlines import LeaseWatchdog

#: what the server sends the worker in one turn: notices, some with descriptors
Outgoing = bytes | tuple[bytes, tuple[int, int]]


class Handover:
    """The horses handed to the worker (by pid) and the sending of the turn's notices."""

    sock: socket.socket
    out: list[Outgoing]
    watchdog: LeaseWatchdog | None
    ep: select.epoll
    by_fd: dict[int, Any]
    running: dict[int, Any]
    exiting: set[int]
    making: dict[str | None, Any]

    def init_handover(self, enabled: bool) -> None:
        #: hand warm sync horses to the worker (False: every job goes through here)
        self.direct = enabled
        #: horses handed to the worker, not reaped yet (they count in the pool)
        self.handed: set[int] = set()

    def reaps_due(self) -> bool:
        """A horse of this server may have exited: the turn reaps."""
        return bool(self.running or self.exiting or self.handed)

    def hand_over(self, run: Any) -> None:
        """Send the horse of ``run`` (server._Running; idle: its report was read, nothing
        is in flight) to the worker with its pipe ends; they are closed here once sent
        (:meth:`send`)."""
        pid, job_w, report_r = run.pid, run.job_w, run.fd
        entry = run.request.entry if run.request is not None else -1
        self.ep.unregister(report_r)
        del self.by_fd[report_r]
        self.out.append((HandoverNotice(pid, entry, run.done, run.func).encode(), (job_w, report_r)))
        self._handed(pid)

    def hand_async(self, pid: int, job_w: int, report_r: int, request: RunRequest,
                   cap: int) -> None:
        """Send a new async horse, its first job (``request``) written to it, to the
        worker with its pipe ends: the answer to that request (closed here once sent)."""
        self.out.append((HandoverNotice(pid, request.entry, 1, request.func, shared=True,
                                        cap=cap).encode(), (job_w, report_r)))
        self._handed(pid)

    def _handed(self, pid: int) -> None:
        """``pid`` is the worker's now: counted in the pool, watched by board owner."""
        self.handed.add(pid)
        if self.watchdog is not None:
            with self.watchdog.lock:
                self.watchdog.hand(pid)

    def busy_handed(self) -> set[int]:
        """The handed horses that run a job now (the board names them owner of an entry:
        the worker clears that once the job ended); without a board, every one."""
        if self.watchdog is None:
            return set(self.handed)
        board = self.watchdog.board
        return {pid for pid in map(board.owner, range(board.entries)) if pid in self.handed}

    def handed_reaped(self, pid: int, status: int) -> None:
        """``pid`` was reaped: a handed horse's status goes to the worker (it may have
        died under a job: the worker needs its status); any other pid: nothing."""
        if pid in self.handed:
            self.handed.discard(pid)
            self.out.append(GoneNotice(pid, status).encode())

    def _read_more(self) -> bool:      # pragma: no cover - the server's (server.py)
        raise NotImplementedError

    def send(self) -> bool:
        """Send this turn's notices, each horse's descriptors with its handover (then
        closed here); while the socket is full the worker's requests are read
        (protocol.send_reading). False: the worker is gone (it died or closed the
        socket), which ends the server as an EOF does, without a traceback."""
        pending: list[bytes] = []
        to_close: list[int] = []
        try:
            for item in self.out:
                if isinstance(item, bytes):
                    pending.append(item)
                    continue
                data, fds = item
                to_close.extend(fds)
                # one write with what came before (the job's exit notice): the worker
                # reads the exit and the horse together, ready for its next job
                data = b"".join([*pending, data])
                pending.clear()
                sent = self._send_fds(data, fds)
                if sent < 0 or not send_reading(self.sock, data[sent:], self._read_more):
                    return False
            return send_reading(self.sock, b"".join(pending), self._read_more)
        finally:
            self.out.clear()
            self.making.clear()      # (asyncpool.py) their job pipes are the worker's now
            for fd in to_close:
                os.close(fd)

    def _send_fds(self, data: bytes, fds: tuple[int, int]) -> int:
        """Send the start of ``data`` with ``fds`` attached: how much went (-1: the
        worker is gone); the rest goes as any notice."""
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        while True:
            try:
                return self.sock.sendmsg([data], rights, socket.MSG_DONTWAIT)
            except BlockingIOError:
                waiting = select.poll()
                waiting.register(self.sock, select.POLLIN | select.POLLOUT)
                if any(mask & (select.POLLIN | select.POLLHUP) for _, mask in waiting.poll()):
                    if self._read_more():
                        return -1
            except (BrokenPipeError, ConnectionResetError):
                return -1
