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


def own_bytes() -> int:
    """This process's own memory, bytes: the pages no other process maps (private clean
    and dirty, ``/proc/self/smaps_rollup``), so not a model the fork server loaded once
    and this horse still shares (0 when /proc cannot say)."""
    total = 0
    try:
        with open("/proc/self/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Private_"):
                    total += int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        return 0
    return total


def over_memory(limit: int) -> bool:
    """This horse holds ``limit`` bytes or more of its own (0: no limit). The resident
    set is read first (one short read): only over it is the own memory read."""
    return bool(limit) and rss() >= limit and own_bytes() >= limit


def has_children() -> bool:
    """A child process of this one exists, running or a zombie (one system call:
    ``waitid`` without waiting, which fails when there is none)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True
