"""What a worker's heartbeat hash says about its process for the dashboard's
worker page: ``rss_mib`` (resident memory of the worker and every process under
it: fork server, horses, their children) and ``horses`` (how many of those
processes there are), sampled at each heartbeat (``describe``)."""

from __future__ import annotations

import os
from typing import Any

from ..core.hooks import Middleware
from .horse_memory import tree_rss


class WorkerVitals(Middleware):
    """Adds ``rss_mib`` and ``processes`` to the heartbeat hash (one ``/proc`` walk of
    the worker's process tree per heartbeat; nothing on the job path)."""

    def describe(self) -> dict[str, Any]:
        found = tree_rss(os.getpid())
        if found is None:
            return {}
        return {"rss_mib": round(found[0] / 1048576, 1), "processes": found[1]}
