"""Deployment-wide operations on Redis: suspend/resume, worker listing."""

from __future__ import annotations

import time
from typing import Any

from .keys import Keys


def suspend(connection: Any, prefix: str = "fw", duration: float | None = None) -> None:
    """Every worker finishes its current job, then claims nothing until :func:`resume`."""
    keys = Keys(prefix)
    if duration:
        connection.set(keys.suspended, str(time.time()), px=int(duration * 1000))
    else:
        connection.set(keys.suspended, str(time.time()))
    connection.publish(keys.control, "suspend")


def resume(connection: Any, prefix: str = "fw") -> None:
    keys = Keys(prefix)
    connection.delete(keys.suspended)
    connection.publish(keys.control, "resume")


def is_suspended(connection: Any, prefix: str = "fw") -> bool:
    return bool(connection.exists(Keys(prefix).suspended))


def workers(connection: Any, prefix: str = "fw") -> list[dict[str, str]]:
    """Heartbeat hashes of live workers; names whose key expired are dropped from the set."""
    keys = Keys(prefix)
    names = sorted(connection.smembers(keys.workers))
    pipe = connection.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.worker(name))
    live = []
    for name, data in zip(names, pipe.execute()):
        if data:
            live.append(data)
        else:
            connection.srem(keys.workers, name)
    return live
