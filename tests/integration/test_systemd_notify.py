"""systemd ``Type=notify`` with live worker processes and a fake ``NOTIFY_SOCKET``.

The test binds an ``AF_UNIX`` datagram socket, as systemd does, and starts a
real worker with ``NOTIFY_SOCKET`` pointing at it and ``WATCHDOG_USEC`` set.
``SO_PASSCRED`` makes the kernel attach the sender's pid to each datagram (that
is how systemd checks ``NotifyAccess=``), so the test also sees *who* spoke.

``WATCHDOG_PID`` is not set: systemd sets it to the main pid, which is unknown
before the spawn; like ``sd_watchdog_enabled()``, ``notify.py`` then takes the
watchdog to be meant for the process that reads the variable.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from fusionworker.core.keys import Keys
from tests.waiting import wait_for

_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid


@dataclass
class Datagram:
    at: float
    pid: int
    fields: list[str]


@dataclass
class NotifySocket:
    """A bound notify socket and a thread collecting what arrives."""

    path: str
    sock: socket.socket
    received: list[Datagram] = field(default_factory=list)

    def _read(self) -> None:
        while True:
            try:
                data, ancdata, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(_UCRED.size))
            except OSError:
                return  # closed at teardown
            pid = -1
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = _UCRED.unpack(payload[:_UCRED.size])[0]
            self.received.append(Datagram(time.monotonic(), pid, data.decode().split("\n")))

    def with_field(self, value: str, since: float = 0.0) -> list[Datagram]:
        return [d for d in list(self.received) if value in d.fields and d.at >= since]

    def wait(self, value: str, count: int = 1, since: float = 0.0, timeout: float = 15) -> list[Datagram]:
        return wait_for(lambda: len(found := self.with_field(value, since)) >= count and found,
                        timeout=timeout)


@pytest.fixture
def notify_socket() -> Iterator[NotifySocket]:
    folder = tempfile.mkdtemp(prefix="fw-notify-")  # short: AF_UNIX paths are <= 107 bytes
    path = os.path.join(folder, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind(path)
    listener = NotifySocket(path, sock)
    reader = threading.Thread(target=listener._read, daemon=True)
    reader.start()
    try:
        yield listener
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        reader.join(5)
        shutil.rmtree(folder, ignore_errors=True)


def _env(notify: NotifySocket) -> dict[str, str]:
    return {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "1000000"}


@pytest.mark.slow
def test_worker_says_ready_pings_the_watchdog_even_while_busy_and_says_stopping(
        processes, queue, r, prefix, notify_socket):
    q = queue()
    proc = processes.worker("--customq", "default", env=_env(notify_socket))
    ready = notify_socket.wait("READY=1")[0]
    assert ready.pid == proc.pid
    assert any(f.startswith("STATUS=Worker ") and "default" in f for f in ready.fields)

    # idle: WATCHDOG_USEC=1 s -> a ping about every second (half the interval, at most)
    notify_socket.wait("WATCHDOG=1", count=3, since=ready.at, timeout=10)

    job = q.enqueue("tests.jobs:sleep", 3.0)
    wait_for(lambda: q.fetch_job(job.id).status == "started", timeout=10)
    busy_from = time.monotonic()
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=15, interval=0.05)
    busy_to = time.monotonic()
    during = [d for d in notify_socket.with_field("WATCHDOG=1", busy_from) if d.at <= busy_to]
    assert len(during) >= 2, f"{len(during)} watchdog pings during a 3 s job"
    busy_status = [f for d in notify_socket.received for f in d.fields
                   if f.startswith("STATUS=") and " busy " in f]
    assert busy_status, "STATUS= should say the worker is busy while the job runs"
    # (no bound on the gaps between pings: under load that would measure the machine)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0, processes.output(proc)
    stopping = notify_socket.wait("STOPPING=1", timeout=5)
    assert {d.pid for d in stopping} == {proc.pid}
    # every datagram came from the worker parent, none from a horse
    assert {d.pid for d in notify_socket.received} == {proc.pid}
    assert not r.smembers(Keys(prefix).workers)


def test_with_processes_only_the_supervisor_notifies(processes, r, prefix, notify_socket):
    proc = processes.worker("--customq", "default", "--processes", "2", env=_env(notify_socket))
    ready = notify_socket.wait("READY=1")[0]
    assert ready.pid == proc.pid
    children = wait_for(lambda: len(names := r.smembers(Keys(prefix).workers)) == 2 and names,
                        timeout=20)
    pids = {int(r.hget(Keys(prefix).worker(n), "pid")) for n in children}
    assert proc.pid not in pids
    notify_socket.wait("WATCHDOG=1", count=3, since=ready.at, timeout=10)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, processes.output(proc)
    notify_socket.wait("STOPPING=1", timeout=5)
    senders = {d.pid for d in notify_socket.received}
    assert senders == {proc.pid}, f"datagrams from {senders}; supervisor {proc.pid}, workers {pids}"
    assert not r.smembers(Keys(prefix).workers)
