"""Coroutine job functions for the tests (``tests.async_jobs:...``)."""

from __future__ import annotations

import asyncio
import os
import time


async def add(a, b):
    await asyncio.sleep(0.01)
    return {"sum": a + b, "loop": type(asyncio.get_running_loop()).__name__}


async def boom(message="async boom"):
    await asyncio.sleep(0)
    raise ValueError(message)


async def sleep(seconds):
    await asyncio.sleep(seconds)
    return "woke up"


async def block(seconds):
    """Blocks the event loop itself: the SIGALRM must still end it."""
    time.sleep(seconds)
    return "woke up"


async def touch_on_cancel(path, seconds):
    """Sleeps; when the timeout cancels it, leaves a marker file (cleanup ran)."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
        raise
    return "woke up"
