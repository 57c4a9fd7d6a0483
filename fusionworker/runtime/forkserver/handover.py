"""The fork server's side of the direct path (design.md, "The direct path"): a warm
sync horse that reported its first job and stays is handed to the worker, its pipes
passed over the socket (SCM_RIGHTS); the worker writes its jobs and reads its reports
from then on. The server keeps forking, reaping (a :class:`~..protocol.GoneNotice`
per handed horse) and its lease watchdog (the board's owner of each entry).
"""

from __future__ import annotations

import array
import os
import select
import socket
from typing import TYPE_CHECKING, Any

from ..protocol import GoneNotice, HandoverNotice

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

    def init_handover(self, enabled: bool) -> None:
        #: hand warm sync horses to the worker (False: every job goes through here)
        self.direct = enabled
        #: horses handed to the worker, not reaped yet (they count in the pool)
        self.handed: set[int] = set()

    def hand_over(self, pid: int, job_w: int, report_r: int, entry: int, done: int) -> None:
        """Send the horse ``pid`` (idle: its report was read, nothing is in flight) to the
        worker with its pipe ends; they are closed here once sent (:meth:`send`)."""
        self.ep.unregister(report_r)
        del self.by_fd[report_r]
        self.out.append((HandoverNotice(pid, entry, done).encode(), (job_w, report_r)))
        self.handed.add(pid)
        if self.watchdog is not None:
            with self.watchdog.lock:
                self.watchdog.hand(pid)

    def handed_reaped(self, pid: int, status: int) -> bool:
        """``pid`` was reaped: a handed horse's status goes to the worker (it may have
        died under a job: the worker needs its status). False: not a handed horse."""
        if pid not in self.handed:
            return False
        self.handed.discard(pid)
        self.out.append(GoneNotice(pid, status).encode())
        return True

    def send(self) -> bool:
        """Send this turn's notices, each horse's descriptors with its handover (then
        closed here); False: the worker is gone (it died or closed the socket), which
        ends the server as an EOF does, without a traceback."""
        pending: list[bytes] = []
        to_close: list[int] = []
        ok = True
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
                sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                   array.array("i", fds).tobytes())])
                if sent < len(data):
                    self.sock.sendall(data[sent:])
            if pending:
                self.sock.sendall(b"".join(pending))
        except (BrokenPipeError, ConnectionResetError):
            ok = False
        finally:
            self.out.clear()
            for fd in to_close:
                os.close(fd)
        return ok
