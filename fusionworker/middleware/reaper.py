"""The reaper: finds claimed jobs whose worker died and gives them back (invariant 2).

Once per ``reaper_interval`` cluster-wide (the ``<prefix>:reaper`` lock), for each
known queue: the jobs whose lease ran out and whose worker is gone go back to
``pending`` uncounted, or fail as ``abandoned`` (as ``killed``, a job that ran alone
in its worker: runtime/solo.py), by ``requeue.lua`` mode ``reap``, fenced by the
token. The pass also drops dead workers' names and, 50 queues a pass, prunes the
registries. The steps, their cost and what a crash at each one leaves:
docs/design.md, "The reaper's pass".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import redis
from redis.client import NEVER_DECODE

from ..core import workflows
from ..core.config import Settings
from ..core.connection import decoding, server_time, text_hash, texts
from ..core.hooks import Middleware
from ..core.job import FailureReason
from ..core.keys import Keys, QueueKeys
from ..core.queue import known_queues, scripts_for
from ..core.scripts import replies

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient
    from ..core.hooks import WorkerContext
    from ..events.sinks import EventSink

__all__ = ["ReaperMiddleware", "acquire_lock", "prune_workers", "reap_once"]

log = logging.getLogger("fusionworker.reaper")

#: Most started entries looked at per queue and pass (the rest wait for the next pass).
BATCH = 1000
#: Queues whose ``started`` is read in one round trip (step 1).
READ_CHUNK = 500
#: Queues whose upkeep (registry pruning; the outbox and deferred jobs' safety net,
#: core/workflows.py) one pass does at most: the rest in the next passes, in turn.
UPKEEP_QUEUES = 50


def acquire_lock(connection: RedisClient, settings: Settings, owner: str) -> bool:
    """Take the cluster-wide reaper lock for one ``reaper_interval``; True if we got it."""
    px = max(int(settings.reaper_interval * 1000), 100)
    return bool(connection.set(Keys(settings.prefix).reaper_lock, owner, nx=True, px=px))


def _why_dead(worker: dict[str, str], job_id: str, now: float,
              pttl: int | None = None) -> str | None:
    """Why the worker of this job no longer runs it, or None if it still might.

    How long the worker has been silent comes from Redis alone: every
    heartbeat re-arms its key's TTL to ``worker_ttl`` (a hash field), so the age of
    the last heartbeat is ``worker_ttl - PTTL`` on the server's clock, whatever the
    worker host's clock says. ``last_heartbeat`` (the worker's clock) is only the
    fallback for a worker that does not publish ``worker_ttl``.
    """
    if not worker:
        return "worker heartbeat expired"
    current = worker.get("current_job") or ""
    if current != job_id and job_id not in (worker.get("current_jobs") or "").split(","):
        return f"worker now runs {current or 'nothing'}"
    try:
        lease = float(worker.get("lease") or 0)
        age = _silent_for(worker, now, pttl)
    except ValueError:
        return "worker heartbeat unreadable"
    if lease > 0 and age > lease:
        return f"worker silent for {age:.1f} s (lease {lease:g} s)"
    return None


def _silent_for(worker: dict[str, str], now: float, pttl: int | None) -> float:
    """Seconds since the worker's last heartbeat (see :func:`_why_dead`); ValueError for
    a field that is no number."""
    ttl = float(worker.get("worker_ttl") or 0)
    if ttl > 0 and pttl is not None and pttl > 0:
        return ttl - pttl / 1000.0
    return now - float(worker.get("last_heartbeat") or 0)


def prune_workers(connection: RedisClient, settings: Settings) -> list[str]:
    """Drop names from the workers set whose heartbeat key expired; returns them (as
    text). The members are read and removed as the bytes Redis holds: a name that is
    no UTF-8 (written by hand, or by a bug) reads as text with escapes, which would
    never match it again, and the reaper would name it at every pass."""
    keys = Keys(settings.prefix)
    client: Any = connection     # (redis-py's execute_command is not annotated)
    raw = sorted(client.execute_command("SMEMBERS", keys.workers, **{NEVER_DECODE: True}))
    if not raw:
        return []
    base = keys.worker("").encode()
    pipe = connection.pipeline(transaction=False)
    for name in raw:
        pipe.exists(base + name)
    gone = [name for name, alive in zip(raw, pipe.execute()) if not alive]
    if not gone:
        return []
    connection.srem(keys.workers, *gone)
    names = [name.decode("utf-8", "backslashreplace") for name in gone]
    log.info("Reaper: removed %d dead worker(s) from the registry: %s",
             len(names), ", ".join(names))
    return names


def _expired(connection: RedisClient, settings: Settings, queues: list[str], now: float,
             counts: dict[str, Any]) -> dict[str, list[str]]:
    """Step 1 for every queue, READ_CHUNK queues a round trip: queue -> the started job
    ids whose lease ran out (queues with none left out). A queue whose read Redis
    refused (WRONGTYPE...) is skipped this pass and listed in ``refused``."""
    keys = Keys(settings.prefix)
    found: dict[str, list[str]] = {}
    for at in range(0, len(queues), READ_CHUNK):
        chunk = queues[at:at + READ_CHUNK]
        pipe = connection.pipeline(transaction=False)
        for queue in chunk:
            pipe.zrangebyscore(keys.queue(queue).started, "-inf", now, start=0, num=BATCH)
        for queue, reply in zip(chunk, pipe.execute(raise_on_error=False)):
            if isinstance(reply, Exception):
                _refused(counts, queue)
                log.error("Reaper: Redis refused to read queue %s (%s); skipped this pass",
                          queue, reply)
            elif reply:
                found[queue] = texts(reply)
    return found


def upkeep_share(queues: list[str], now: float, interval: float) -> list[str]:
    """The queues whose upkeep this pass does: every queue when there are at most
    UPKEEP_QUEUES, else the ``now // interval``-th of ceil(n / UPKEEP_QUEUES) shares
    (each queue about every that many intervals)."""
    shares = -(-len(queues) // UPKEEP_QUEUES)
    if shares <= 1:
        return queues
    turn = int(now // max(interval, 0.001)) % shares
    return queues[turn::shares]


def _reap_queue(connection: RedisClient, settings: Settings, queue: str, expired: list[str],
                now: float, counts: dict[str, Any], sink: EventSink | None = None) -> None:
    """Steps 2-4 for ``expired``, the started ids of ``queue`` whose lease ran out."""
    keys = Keys(settings.prefix)
    qkeys = keys.queue(queue)
    owners, workers, pttls = _owners(connection, keys, qkeys, expired)
    scripts = scripts_for(connection)
    for job_id, (worker_name, token), worker, pttl in zip(expired, owners, workers, pttls):
        counts["checked"] += 1
        why = _why_dead(worker, job_id, now, pttl) if token else "job has no live attempt"
        if why is None:
            counts["alive"] += 1
            continue
        verdict = replies.requeue(scripts.requeue(
            keys=[qkeys.base], args=[job_id, "reap", token or "", settings.failed_ttl]))
        if verdict.outcome in ("requeued", "abandoned"):
            counts["reaped"].append((queue, job_id, verdict.outcome))
            _emit_reaped(connection, settings, sink, qkeys.job(job_id), verdict.outcome,
                         worker_name or "?", why, verdict.why == "culprit", now)
        _count_verdict(counts, queue, job_id, worker_name or "?", why, verdict)


def _owners(connection: RedisClient, keys: Keys, qkeys: QueueKeys, expired: list[str],
            ) -> tuple[list[Any], list[Any], list[Any]]:
    """Two round trips: each expired job's ``(worker, token)``, then that worker's
    heartbeat hash and its key's PTTL."""
    pipe = connection.pipeline(transaction=False)
    for job_id in expired:
        pipe.hmget(qkeys.job(job_id), "worker", "token")
    owners = pipe.execute()
    pipe = connection.pipeline(transaction=False)
    for worker_name, _ in owners:
        pipe.hgetall(keys.worker(worker_name or "?"))
        pipe.pttl(keys.worker(worker_name or "?"))
    found = pipe.execute()
    return owners, found[::2], found[1::2]


def _count_verdict(counts: dict[str, Any], queue: str, job_id: str, worker_name: str,
                   why: str, verdict: replies.Requeued) -> None:
    """The requeue script's verdict on a stuck job, counted and logged."""
    what = verdict.outcome
    if what == "requeued":
        counts["requeued"] += 1
        counts["jobs"].append(job_id)
        log.warning("Reaper: job %s on %s was stuck (worker %s: %s); re-queued",
                    job_id, queue, worker_name, why)
    elif what == "abandoned":
        counts["abandoned"] += 1
        counts["jobs"].append(job_id)
        counts["abandoned_jobs"].append((queue, job_id))
        if verdict.why == "culprit":
            log.error("Reaper: job %s on %s ran alone in worker %s, which died (%s): failed "
                      "as the culprit", job_id, queue, worker_name, why)
        else:
            log.error("Reaper: job %s on %s was stuck (worker %s: %s), its worker lost too "
                      "often, failed as abandoned", job_id, queue, worker_name, why)
    else:
        counts["skipped"] += 1
        log.info("Reaper: left job %s on %s alone (%s)", job_id, queue, verdict.why or what)


def _emit_reaped(connection: RedisClient, settings: Settings, sink: EventSink | None,
                 job_key: str, what: str, worker_name: str, why: str,
                 alone: bool = False, when: float | None = None) -> None:
    """The reaper's outcome is an event (``requeued`` or ``abandoned``); never raises.
    ``alone``: the job ran alone in that worker, failed as its death's culprit. ``when``:
    the pass's Redis time, before the script: a worker that claims the requeued job at
    once stamps its claim later, so ``events --job`` lists the two in the order they
    happened (the time of this emit, after that claim, would not)."""
    from ..events.middleware import emit_job_event
    try:
        data = connection.hgetall(job_key)
        if not data:
            return
        fields: dict[str, Any] = {"worker": worker_name, "reason": "worker died" if
                                  what == "requeued" else FailureReason.ABANDONED}
        if when is not None:
            fields["timestamp"] = when
        if alone:
            fields.update(reason=FailureReason.KILLED, error_type="WorkerKilled",
                          error_message=data.get("error_message") or why)
        elif what == "abandoned":
            fields.update(error_type="Abandoned", error_message=f"worker {worker_name}: {why}")
        emit_job_event(sink if sink is not None else settings, what, data,
                       connection=connection, **fields)
    except Exception:  # observability never blocks (docs/design.md)
        log.exception("Reaper: could not emit the %s event of %s", what, job_key)


def _prune_registries(connection: RedisClient, settings: Settings, queue: str, now: float) -> None:
    qkeys = Keys(settings.prefix).queue(queue)
    pipe = connection.pipeline(transaction=False)
    if settings.failed_ttl > 0:
        pipe.zremrangebyscore(qkeys.failed, "-inf", f"({now - settings.failed_ttl:.6f}")
    if settings.result_ttl > 0:
        pipe.zremrangebyscore(qkeys.finished, "-inf", f"({now - settings.result_ttl:.6f}")
    pipe.execute()


def reap_once(connection: RedisClient, settings: Settings, *, lock_owner: str | None = None,
              sink: EventSink | None = None) -> dict[str, Any]:
    """One reaper pass over every known queue; returns what it did.

    With ``lock_owner`` the pass runs only if it gets the cluster-wide lock
    (``{"locked": False}`` otherwise); without, it runs unconditionally (safe:
    every change is one fenced script, see the module docstring).

    Each job it re-queues or fails emits a ``requeued`` / ``abandoned`` event to
    ``sink`` (default: the process's default sink for ``settings``); ``reaped``
    lists ``(queue, job_id, outcome)``.
    """
    connection = decoding(connection)   # any redis-py client
    counts: dict[str, Any] = {"locked": True, "checked": 0, "alive": 0, "requeued": 0,
                              "abandoned": 0, "skipped": 0, "jobs": [], "abandoned_jobs": [],
                              "reaped": [],
                              "workers_pruned": []}
    if lock_owner is not None and not acquire_lock(connection, settings, lock_owner):
        counts["locked"] = False
        return counts
    now = server_time(connection)
    queues = known_queues(connection, settings.prefix)
    for queue, expired in _expired(connection, settings, queues, now, counts).items():
        _guarded(queue, counts, partial(_reap_queue, connection, settings, queue, expired,
                                        now, counts, sink))
    for queue in upkeep_share(queues, now, settings.reaper_interval):
        _guarded(queue, counts, partial(_upkeep, connection, settings, queue, now))
    counts["workers_pruned"] = prune_workers(connection, settings)
    return counts


def _upkeep(connection: RedisClient, settings: Settings, queue: str, now: float) -> None:
    _prune_registries(connection, settings, queue, now)
    workflows.reaper_pass(connection, settings, queue, now)  # dependency notes


def _guarded(queue: str, counts: dict[str, Any], work: Callable[[], None]) -> None:
    """``work`` on ``queue``: a refusal or bad data there skips that queue this pass, the
    other queues go on; Redis unreachable ends the pass (the caller logs it)."""
    try:
        work()
    except (redis.ConnectionError, redis.TimeoutError):
        raise
    except redis.ResponseError as exc:
        # a refusal on one queue (WRONGTYPE, OOM) must not stop the other queues' reaping
        _refused(counts, queue)
        log.error("Reaper: Redis refused work on queue %s (%s); skipped this pass",
                  queue, exc)
    except Exception:   # data of this queue it cannot use: the other queues are reaped
        _refused(counts, queue)
        log.exception("Reaper: could not reap queue %s; skipped it this pass", queue)


def _refused(counts: dict[str, Any], queue: str) -> None:
    """List ``queue`` once among the pass's refused queues (its reaping and its upkeep
    may both be refused)."""
    refused = counts.setdefault("refused", [])
    if queue not in refused:
        refused.append(queue)


class ReaperMiddleware(Middleware):
    """Runs :func:`reap_once` about every ``reaper_interval`` seconds in every worker.

    The lock makes it one pass per interval cluster-wide, whichever worker wins.
    A pass that fails (Redis unreachable) is logged and tried again next interval.
    """

    def __init__(self, settings: Settings) -> None:
        self.interval = settings.reaper_interval
        self._next = time.monotonic() + self.interval * 0.5
        self.passes = 0
        self.reaped = 0

    def on_tick(self, worker: WorkerContext) -> None:
        now = time.monotonic()
        if self.interval <= 0 or now < self._next:
            return
        self._next = now + self.interval
        try:
            counts = reap_once(worker.connection, worker.settings, lock_owner=worker.name,
                               sink=_sink_of(worker))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("Reaper pass of %s skipped: Redis unreachable (%s)", worker.name, exc)
            return
        except redis.ResponseError as exc:   # the lock's SET refused (OOM, a read-only replica)
            log.warning("Reaper pass of %s skipped: Redis refused it (%s)", worker.name, exc)
            return
        if counts["locked"]:
            self.passes += 1
            self.reaped += counts["requeued"] + counts["abandoned"]
            self._notify_reaped(worker, counts["reaped"])

    def _notify_reaped(self, worker: WorkerContext, reaped: list[tuple[str, str, str]]) -> None:
        """Call every middleware's ``on_job_reaped`` hook, each guarded alike."""
        from ..core.job import Job

        if not reaped:
            return
        keys = Keys(worker.settings.prefix)
        for queue, job_id, outcome in reaped:
            try:
                data = worker.connection.hgetall(keys.queue(queue).job(job_id))
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("Reaper: job %s reaped, hooks not called (Redis: %s)", job_id, exc)
                continue
            if not data:
                continue
            job = Job.from_hash(text_hash(data))
            for mw in worker.middleware:
                try:
                    mw.on_job_reaped(worker, job, outcome)
                except Exception:  # a broken middleware must not stop jobs
                    log.exception("middleware %s.on_job_reaped failed", type(mw).__name__)


def _sink_of(worker: WorkerContext) -> Any:
    from ..events.middleware import sink_of
    try:
        return sink_of(worker)
    except Exception:  # noqa: BLE001 - no sink: the default one is used
        return None
