"""The I/O-bound job of ``bench/io_bound.py``: sleep, as a provider call would wait.

Standard library only, so every system's worker imports the same thing. The job
appends ``enqueued started ended`` (``time.time()``) as one line to ``path``
(``O_APPEND``: a short write is atomic between processes).
"""

from __future__ import annotations

import os
import time


def _append(path: str, enqueued: float, started: float) -> None:
    line = f"{enqueued!r} {started!r} {time.time()!r}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def io_sleep(path: str, enqueued: float, seconds: float = 0.1) -> None:
    """Blocking sleep (fusionworker, RQ, Celery prefork, Dramatiq threads)."""
    started = time.time()
    time.sleep(seconds)
    _append(path, enqueued, started)


async def io_sleep_aio(path: str, enqueued: float, seconds: float = 0.1) -> None:
    """The same as an ``async def`` job of fusionworker (``fw-a``: async horses)."""
    import asyncio

    started = time.time()
    await asyncio.sleep(seconds)
    _append(path, enqueued, started)


async def io_sleep_async(ctx: dict, path: str, enqueued: float, seconds: float = 0.1) -> None:
    """The same for arq: an asyncio worker waits with ``await`` (a blocking sleep would
    stall its event loop, which is not how anyone runs arq)."""
    import asyncio

    started = time.time()
    await asyncio.sleep(seconds)
    _append(path, enqueued, started)
