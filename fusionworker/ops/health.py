"""Health check for systemd, Docker ``HEALTHCHECK`` and orchestrators.

Healthy means: Redis answers, and for each queue asked about, at least one
live worker serves it and no job of it is stuck past its lease deadline.

A worker is *live* when its heartbeat hash exists and its last heartbeat is
younger than its lease (a worker that stopped heartbeating for a whole lease
is as good as dead: its job would be taken back by the reaper). A job is
*stuck* when its deadline in the queue's ``started`` ZSET is before the Redis
server's clock: nobody renewed its lease and the reaper has not recovered it
yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

from ..core import admin
from ..core.connection import decoding, eviction_warning

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: Lease assumed for a worker whose heartbeat hash does not say (older versions).
DEFAULT_LEASE = admin.DEFAULT_LEASE

__all__ = ["DEFAULT_LEASE", "Health", "check", "check_host", "check_queues",
           "eviction_warning", "live_workers"]


@dataclass
class Health:
    """Result of :func:`check`: ``ok`` and one line saying why (or what is fine)."""

    ok: bool
    message: str
    workers: dict[str, list[str]] = field(default_factory=dict)  # queue -> live worker names


def live_workers(connection: RedisClient, prefix: str, now: float,
                 workers: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """Workers (``info`` schema) whose heartbeat is younger than their lease (not
    ``silent``: ``admin.shown_state``); ``workers``: the heartbeat hashes, read already."""
    hashes = admin.workers(connection, prefix) if workers is None else workers
    described = (admin.describe_worker(data, now) for data in hashes)
    return [w for w in described if w["heartbeat_age"] is not None and w["state"] != "silent"]


def check(connection: RedisClient, prefix: str = "fw", queues: Iterable[str] = (),
          host: str | None = None) -> Health:
    """Check Redis and, for every queue in ``queues``, its workers and stuck jobs; with
    ``host``, that host's own workers too (:func:`check_host`).

    Raises :class:`redis.ConnectionError` (or a subclass) when Redis does not
    answer; the caller turns that into the one-line "unhealthy" verdict.
    """
    connection = decoding(connection)   # any redis-py client
    connection.ping()
    queues = list(queues)
    # both parts read the same workers: once (a probe runs every few seconds)
    workers = admin.workers(connection, prefix) if queues and host is not None else None
    health = check_queues(connection, prefix, queues, workers)
    if health.ok and host is not None:
        health = check_host(connection, prefix, host, health, workers)
    warning = eviction_warning(connection)
    if warning:    # not unhealthy (restarting workers would not help), but loud
        health.message += f"; WARNING: {warning}"
    return health


def check_host(connection: RedisClient, prefix: str, host: str, found: Health,
               workers: list[dict[str, str]] | None = None) -> Health:
    """``found`` (healthy so far), or unhealthy when no worker of ``host`` (this host:
    the caller runs here) is live, or one of them is ``silent`` (no heartbeat for its
    lease) while its process still runs here: frozen or hung. A silent one whose
    process is gone died, and its key lingers until ``worker_ttl``: a restarted worker
    took over, so it is passed over. What a liveness probe of that host (a pod) asks,
    where ``--queue`` asks about the whole fleet. ``workers``: the heartbeat hashes,
    read already (:func:`check` reads them once for both parts)."""
    now = admin.server_time(connection)
    hashes = admin.workers(connection, prefix) if workers is None else workers
    mine = [(data, admin.describe_worker(data, now)) for data in hashes
            if data.get("host") == host]
    live = [w for _, w in mine if w["state"] != "silent"]
    stuck = [w["name"] for data, w in mine if w["state"] == "silent" and _runs_here(data)]
    if stuck:
        return Health(False, f"unhealthy: worker {stuck[0]} of this host is silent: no "
                             "heartbeat for its lease while its process runs (frozen or "
                             "hung)", found.workers)
    if not live:
        return Health(False, f"unhealthy: no live worker on this host ({host})",
                      found.workers)
    found.message += f"; this host: {len(live)} live worker(s)"
    return found


def _runs_here(data: dict[str, str]) -> bool:
    """The heartbeat's process runs on this host: its pid exists, started no later than
    the worker was born (the kernel gives a dead worker's pid again only to a process
    started after it: that one is not it)."""
    try:
        pid, birth = int(data.get("pid") or 0), float(data.get("birth") or 0)
        started = psutil.Process(pid).create_time() if pid > 0 else None
    except (ValueError, psutil.Error):
        return False
    return started is not None and (not birth or started <= birth + 2.0)


def check_queues(connection: RedisClient, prefix: str, queues: list[str],
                 workers: list[dict[str, str]] | None = None) -> Health:
    """The queue part of :func:`check` (``workers``: the heartbeat hashes, read already)."""
    if not queues:
        return Health(True, "ok: Redis answers")
    now = admin.server_time(connection)
    live = live_workers(connection, prefix, now, workers)
    served: dict[str, list[str]] = {}
    for q in queues:
        names = [w["name"] for w in live if q in w["queues"]]
        served[q] = names
        if not names:
            return Health(False, f"unhealthy: no live worker serves queue {q}", served)
        stuck = admin.stuck_jobs(connection, q, prefix, now)
        if stuck:
            more = f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else ""
            return Health(False, f"unhealthy: job {stuck[0]}{more} of queue {q} is stuck past "
                                 "its lease deadline", served)
    detail = ", ".join(f"{q}: {len(n)} worker(s)" for q, n in served.items())
    return Health(True, f"ok: Redis answers; {detail}; no stuck jobs", served)
