"""sd_notify client and middleware, against a real AF_UNIX datagram socket."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from fusionworker.middleware.notify import NotifyMiddleware, SystemdNotifier


class Receiver:
    def __init__(self, sock: socket.socket, env_address: str) -> None:
        self.sock = sock
        self.env_address = env_address

    def messages(self) -> list[str]:
        """Every datagram received so far."""
        out = []
        while True:
            try:
                out.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return out


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    try:
        yield Receiver(sock, str(path))
    finally:
        sock.close()


def test_messages_arrive_on_a_path_socket(receiver: Receiver) -> None:
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": receiver.env_address})
    assert notifier.enabled
    assert notifier.ready("Worker sms.1 idle")
    assert notifier.status("busy:\n  job 7f3")
    assert notifier.watchdog()
    assert notifier.stopping()
    assert receiver.messages() == [
        "READY=1\nSTATUS=Worker sms.1 idle",
        "STATUS=busy: job 7f3",  # a status stays one line
        "WATCHDOG=1",
        "STOPPING=1",
    ]


def test_abstract_namespace_socket() -> None:
    name = f"fw-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"


def test_without_socket_everything_is_a_noop() -> None:
    notifier = SystemdNotifier.from_env({})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog() is False
    assert notifier.stopping() is False
    assert notifier.status("x") is False
    assert notifier.watchdog_interval() is None


def test_unsupported_address_is_disabled() -> None:
    assert not SystemdNotifier("relative/path").enabled
    assert not SystemdNotifier("vsock:2:1234").enabled


def test_send_failure_never_raises_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = SystemdNotifier(str(tmp_path / "nobody-listens.sock"))
    with caplog.at_level(logging.DEBUG, logger="fusionworker.notify"):
        assert notifier.ready() is False
        assert notifier.watchdog() is False
        assert notifier.stopping() is False
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].levelno == logging.DEBUG


def test_watchdog_interval_respects_usec_and_pid(receiver: Receiver) -> None:
    env = {"NOTIFY_SOCKET": receiver.env_address, "WATCHDOG_USEC": "60000000"}
    assert SystemdNotifier.from_env(env).watchdog_interval() == 60.0
    mine = {**env, "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier.from_env(mine).watchdog_interval() == 60.0
    other = {**env, "WATCHDOG_PID": str(os.getpid() + 1)}
    assert SystemdNotifier.from_env(other).watchdog_interval() is None
    for bad in ("0", "-5", "soon", ""):
        assert SystemdNotifier.from_env({**env, "WATCHDOG_USEC": bad}).watchdog_interval() is None
    assert SystemdNotifier.from_env({"WATCHDOG_USEC": "60000000"}).watchdog_interval() is None


def test_watchdog_pid_is_checked_at_call_time_so_a_forked_child_is_excluded(
    receiver: Receiver,
) -> None:
    notifier = SystemdNotifier.from_env({
        "NOTIFY_SOCKET": receiver.env_address, "WATCHDOG_USEC": "1000000",
        "WATCHDOG_PID": str(os.getpid()),
    })
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write_fd, b"none" if notifier.watchdog_interval() is None else b"some")
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    assert os.read(read_fd, 16) == b"none"
    os.close(read_fd)
    assert notifier.watchdog_interval() == 1.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_worker(state: str = "idle") -> SimpleNamespace:
    return SimpleNamespace(name="host.123", queues=["sms", "email"], state=state)


def test_middleware_lifecycle(receiver: Receiver) -> None:
    clock = FakeClock()
    notifier = SystemdNotifier.from_env({
        "NOTIFY_SOCKET": receiver.env_address, "WATCHDOG_USEC": "10000000",  # 10 s
        "WATCHDOG_PID": str(os.getpid()),
    })
    middleware = NotifyMiddleware(notifier, clock=clock)
    worker = make_worker()

    middleware.on_start(worker)
    assert receiver.messages() == [
        "READY=1\nSTATUS=Worker host.123 idle on queues sms,email",
        "WATCHDOG=1",
    ]

    # Ticks every second for 12 s: a ping at most every interval/2 = 5 s.
    for _ in range(12):
        clock.now += 1
        middleware.on_tick(worker)
    assert receiver.messages() == ["WATCHDOG=1", "WATCHDOG=1"]

    worker.state = "busy"
    clock.now += 1
    middleware.on_tick(worker)
    assert receiver.messages() == ["STATUS=Worker host.123 busy on queues sms,email"]

    middleware.on_stop(worker)
    assert receiver.messages() == ["STOPPING=1\nSTATUS=Worker host.123 stopping"]
    assert middleware.describe() == {"systemd_watchdog": 10.0}


def test_middleware_without_watchdog_sends_no_pings(receiver: Receiver) -> None:
    middleware = NotifyMiddleware(SystemdNotifier(receiver.env_address), clock=FakeClock())
    worker = make_worker()
    middleware.on_start(worker)
    for _ in range(5):
        middleware.on_tick(worker)
    middleware.on_stop(worker)
    messages = receiver.messages()
    assert messages[0].startswith("READY=1\n")
    assert "WATCHDOG=1" not in messages
    assert messages[-1].startswith("STOPPING=1")


def test_middleware_outside_systemd_is_silent() -> None:
    middleware = NotifyMiddleware(SystemdNotifier(None))
    worker = make_worker()
    middleware.on_start(worker)
    middleware.on_tick(worker)
    middleware.on_stop(worker)
    assert middleware.describe() == {}
