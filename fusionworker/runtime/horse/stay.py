"""Whether a warm horse stays for another job (warm.py, asyncloop.py): its memory,
the children a job left, and the functions it resolved once."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...core.functions import resolve


def remember(mine: dict[str, Callable[..., Any]], ref: str, allowed: tuple[str, ...]) -> None:
    """A function that ran fine here is resolved once more (every check of
    ``functions.resolve``), then found in ``mine`` by the next jobs."""
    try:
        mine[ref] = resolve(ref, allowed)
    except Exception:  # noqa: BLE001 - it resolved a moment ago; if not, run_job says why
        pass


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss() -> int:
    """This process's resident set, bytes (0 when /proc cannot say)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def has_children() -> bool:
    """A child process of this one exists, running or a zombie (one system call:
    ``waitid`` without waiting, which fails when there is none)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True
