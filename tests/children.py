"""Processes the test run starts die with it.

A test run killed from outside (a CI timeout, a Ctrl-C that turns into
SIGKILL) must not leave workers or Redis servers behind: they would go on
claiming from the shared Redis and load the next run. Every ``Popen`` of a
long-lived process passes ``preexec_fn=die_with_parent()``: the child asks
the kernel (``PR_SET_PDEATHSIG``) for a SIGKILL when its parent ends. A
worker's horses and fork server already die with their worker.

The signal is tied to the *thread* that forked the child, so it is set only
for children started from the main thread (a helper thread's end would kill
its children early).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
from collections.abc import Callable

import psutil

_PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()  # loaded here, never in the child between fork and exec


def _ask_for_sigkill() -> None:  # pragma: no cover - runs in the child before exec
    if _LIBC is not None:
        with contextlib.suppress(OSError, AttributeError):
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with_parent() -> Callable[[], None] | None:
    """The ``preexec_fn`` for a child that must die with this process, or None
    where that cannot be asked (not Linux, or not the main thread)."""
    if _LIBC is None or threading.current_thread() is not threading.main_thread():
        return None
    return _ask_for_sigkill


def fork_servers_of(worker_pid: int) -> list[psutil.Process]:
    """The running fork servers among a worker's children. A child that ended and is not
    reaped yet (a zombie), or one gone as we look, has no command line to read and is
    skipped: a retired server, or the short-lived child that reads the ``--import``
    modules at start."""
    found = []
    for child in psutil.Process(worker_pid).children():
        try:
            if "fork server" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            pass
    return found
