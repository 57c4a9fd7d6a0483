"""Job functions of the benchmark, importable by both fusionworker and RQ.

fusionworker refuses modules off its allow-list: the bench runs its workers
with ``FUSIONWORKER_ALLOWED_MODULES=bench`` and the repository root on
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import time


def noop() -> None:
    """Does nothing: the whole cost measured is the worker's."""


def stamp(path: str) -> None:
    """Write ``time.time()`` at job start to ``path`` (atomically): pick-up latency probe."""
    now = time.time()
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(repr(now))
    os.replace(tmp, path)
