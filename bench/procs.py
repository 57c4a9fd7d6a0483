"""What the benches do with the worker processes they start."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def lines_in(path: str | os.PathLike[str]) -> int:
    """How many lines the jobs of a bench appended to ``path`` so far (0 before the first:
    each job of ``bench/io_jobs.py`` writes one when it ends)."""
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


def stop_group(proc: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """End a worker started with ``start_new_session=True``: SIGTERM to its process
    group (a warm shutdown), SIGKILL to the group if it is not gone ``grace`` s later."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass
