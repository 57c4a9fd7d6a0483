"""What a worker's heartbeat hash says about its process for the dashboard's
worker page: ``rss_mib`` (resident memory of the worker and every process under
it: fork server, horses, their children) and ``horses`` (how many of those
processes there are), sampled at each heartbeat (``describe``)."""

from __future__ import annotations

import os
from typing import Any

import psutil

from ..core.hooks import Middleware


class WorkerVitals(Middleware):
    """Adds ``rss_mib`` and ``processes`` to the heartbeat hash (one ``/proc`` walk of
    the worker's process tree per heartbeat; nothing on the job path)."""

    def describe(self) -> dict[str, Any]:
        try:
            root = psutil.Process(os.getpid())
            tree = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return {}
        total = 0
        for proc in tree:
            try:
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return {"rss_mib": round(total / 1048576, 1), "processes": len(tree)}
