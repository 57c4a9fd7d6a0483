"""Job dependencies: ``enqueue(..., depends_on=[...])``, across queues and Cluster slots.

A dependent job waits ``deferred`` until every dependency (a ref ``"<queue>:<id>"``,
any queue) has ended; each step is one script on one queue's keys. A dependency that
ends leaves a note per dependent in its queue's outbox; :func:`replay_outbox` applies
it with ``dep_done.lua`` (idempotent) and removes it. The enqueue sequence, the keys
and the crash points: docs/design.md, "Dependencies across queues".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ..exceptions import NoSuchJob
from .hooks import Middleware
from .job import DONE_STATUSES
from .keys import Keys, check_queue_name
from .queue_port import queue_class
from .redis_client import text
from .scripts import replies, scripts_for

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .hooks import Outcome, WorkerContext
    from .job import Job
    from .queue_view import QueueView
    from .redis_client import RedisClient

log = logging.getLogger("fusionworker.workflows")

#: statuses of a dependency that has ended (``Job.wait``'s too)
ENDED = DONE_STATUSES


def dependency_ref(queue: str, job_id: str) -> str:
    return f"{queue}:{job_id}"


def split_ref(ref: str) -> tuple[str, str]:
    queue, _, job_id = ref.partition(":")
    return queue, job_id


def normalize_dependencies(queue: str, depends_on: Any) -> list[tuple[str, str]]:
    """``depends_on`` -> ``[(queue, job_id), ...]``: a Job (any queue), a ``(queue, id)``
    pair, or a job id string (a job of ``queue``). Duplicates dropped, order kept."""
    if isinstance(depends_on, Mapping):     # list() would take its keys for job ids
        raise TypeError(f"depends_on takes Jobs, job ids or (queue, id) pairs (or a list of "
                        f"them), not a dict: got {depends_on!r}")
    if isinstance(depends_on, (str, tuple)) or hasattr(depends_on, "queue"):
        items = [depends_on]
    elif isinstance(depends_on, Iterable):
        items = list(depends_on)
    else:
        raise TypeError(f"depends_on takes Jobs, job ids or (queue, id) pairs (or a list of "
                        f"them), got {depends_on!r}")
    if not items:
        raise ValueError("depends_on is empty")
    out: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, str):
            pair = (queue, item)
        elif isinstance(item, tuple) and len(item) == 2:
            pair = (str(item[0]), str(item[1]))
        elif hasattr(item, "queue") and hasattr(item, "id"):
            pair = (item.queue, item.id)
        else:
            raise TypeError(f"depends_on takes Jobs, job ids or (queue, id) pairs, got {item!r}")
        check_queue_name(pair[0])
        if not pair[1] or len(pair[1]) > 200:
            raise ValueError(f"invalid dependency job id {pair[1]!r}")
        if pair not in out:
            out.append(pair)
    return out


def check_dependencies_exist(connection: RedisClient, prefix: str, deps: list[tuple[str, str]]) -> None:
    keys = Keys(prefix)
    for queue, job_id in deps:
        if not connection.exists(keys.queue(queue).job(job_id)):
            raise NoSuchJob(f"dependency {job_id!r} is no job of queue {queue!r}")


def register(q: QueueView, deps: list[tuple[str, str]], dependent_id: str) -> None:
    """Step 2: record D on each dependency's queue (one script per dependency)."""
    ref = dependency_ref(q.name, dependent_id)
    for queue, job_id in deps:
        q.scripts.dep_register(keys=[q.keys.queue(queue).base], args=[job_id, ref])


def recheck(q: QueueView, dependent_id: str, deps: Iterable[tuple[str, str]]) -> list[str]:
    """Step 4 (and the sweep): apply every dependency that has ended (or vanished);
    returns what each note did (``dep_done.lua``'s outcomes)."""
    outcomes: list[str] = []
    for queue, job_id in deps:
        status = q.connection.hget(q.keys.queue(queue).job(job_id), "status")
        status = None if status is None else text(status)
        if status is None or status in ENDED:
            reply = replies.dep_done(q.scripts.dep_done(
                keys=[q.qkeys.base],
                args=[dependent_id, dependency_ref(queue, job_id), status or "missing",
                      q.settings.result_ttl]))
            outcomes.append(reply.outcome)
    return outcomes


def replay_outbox(connection: RedisClient, settings: Settings, queue: str, limit: int = 500,
                  *, callbacks: bool = True) -> int:
    """Replay the notes in ``queue``'s outbox to the dependents' queues; returns how many
    notes were replayed. Safe to run anywhere, any number of times (see module doc).
    ``callbacks=False`` (a producer, whose allow-list may not name the callbacks' modules:
    it would drop them as refused) leaves the callback notes for a worker."""
    keys = Keys(settings.prefix)
    outbox = keys.queue(queue).outbox
    scripts = scripts_for(connection)
    done = left = 0          # left: callback notes kept, ahead of the ones to read
    while done + left < limit:
        notes = connection.lrange(outbox, left, left + min(99, limit - done - left - 1))
        if not notes:
            break
        for note in notes:
            try:
                outcome, dependent, job_id, *callback = json.loads(text(note))
                dq, did = split_ref(dependent)
                check_queue_name(dq)
            except (ValueError, TypeError) as exc:
                log.error("Dropped a malformed dependency note in %s: %s", outbox, exc)
            else:
                if outcome.startswith("callback:") and not callbacks:
                    left += 1
                    continue
                if outcome.startswith("callback:"):   # enqueue(on_success=/on_failure=)
                    _fire_callback(connection, settings, dq, did, outcome[9:], callback)
                elif outcome.startswith("batch:"):  # a job of a batch ended (batch.py)
                    scripts.batch_done(keys=[keys.queue(dq).base],
                                       args=[did, dependency_ref(queue, job_id),
                                             outcome[6:], ""])
                else:
                    scripts.dep_done(keys=[keys.queue(dq).base],
                                     args=[did, dependency_ref(queue, job_id), outcome,
                                           settings.result_ttl])
            connection.lrem(outbox, 1, text(note))
            done += 1
    return done


def _fire_callback(connection: RedisClient, settings: Settings, queue: str, job_id: str,
                   outcome: str, callback: list[Any]) -> None:
    """Enqueue the callback of job ``job_id`` (``func(job_id)``) on its queue, once: its
    id is fixed (``<job_id>:on_success``; after the job was requeued from the failed
    registry, ``<job_id>:on_success:<life>``, life 2, 3...), so a note replayed twice
    enqueues it once while it is live or within the dedup window."""
    if len(callback) not in (1, 2) or not isinstance(callback[0], str):
        raise ValueError(f"callback note of job {job_id} names no function")
    kind = {"finished": "on_success", "stopped": "on_stopped"}.get(outcome, "on_failure")
    life = callback[1] if len(callback) == 2 else 1    # the job's life (requeue.lua)
    if type(life) is int and life > 1:
        kind = f"{kind}:{life}"
    q: QueueView = queue_class()(queue, connection, settings=settings, events=False)
    try:
        q.enqueue_call(callback[0], args=[job_id], job_id=f"{job_id}:{kind}"[:200])
    except RedisError:         # the note stays: replayed once Redis answers
        raise
    except Exception as exc:  # noqa: BLE001 - refused, or its module fails to import
        # (a SyntaxError after a deploy): never will; dropped, or it held every later note
        log.error("The %s callback %s of job %s on %s was not enqueued: %s: %s",
                  kind, callback[0], job_id, queue, type(exc).__name__, exc)


def sweep_deferred(connection: RedisClient, settings: Settings, queue: str, older_than: float,
                   now: float, limit: int = 200) -> int:
    """Re-check the dependencies of deferred jobs enqueued more than ``older_than`` s
    ago (a lost note: a producer that died mid-enqueue, a deleted dependency)."""
    q: QueueView = queue_class()(queue, connection, settings=settings, events=False)
    ids = connection.zrangebyscore(q.qkeys.deferred, "-inf", f"{now - older_than:.6f}",
                                   start=0, num=limit)
    applied = 0
    for job_id in ids:
        job_id = text(job_id)
        refs = [split_ref(text(r)) for r in connection.smembers(q.qkeys.deps(job_id))]
        applied += len(recheck(q, job_id, refs))
    return applied


class DependencyMiddleware(Middleware):
    """Replays the outbox of a queue after one of its jobs ended: at once when the job
    had dependents at claim time, else on the next tick (one ``LLEN`` per queue a
    second, only after jobs ended); and the outboxes of the worker's queues when it
    starts."""

    def __init__(self) -> None:
        self._dirty: set[str] = set()
        self.replayed = 0

    def on_start(self, worker: WorkerContext) -> None:
        """Replay what producers left in the outboxes of the worker's queues (a canceled
        or deleted parent's note): a burst worker started after a cancel sees its
        dependents released or canceled, without waiting for a reaper pass."""
        for queue in worker.queue_names:
            self._replay(worker, queue)

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        if (getattr(job, "has_dependents", False) or getattr(job, "batch", None)
                or getattr(job, "on_success", None) or getattr(job, "on_failure", None)):
            self._replay(worker, job.queue)
        else:
            self._dirty.add(job.queue)

    def on_tick(self, worker: WorkerContext) -> None:
        if not self._dirty:
            return
        queues, self._dirty = sorted(self._dirty), set()
        keys = Keys(worker.settings.prefix)
        try:
            lengths = [worker.connection.llen(keys.queue(q).outbox) for q in queues]
        except Exception as exc:  # noqa: BLE001 - the reaper replays later
            log.warning("Dependency outbox check skipped: %s", exc)
            return
        for queue, length in zip(queues, lengths):
            if length:
                self._replay(worker, queue)

    def _replay(self, worker: WorkerContext, queue: str) -> None:
        try:
            self.replayed += replay_outbox(worker.connection, worker.settings, queue)
        except Exception as exc:  # noqa: BLE001 - notes stay in the outbox for the reaper
            log.warning("Dependency outbox of %s not replayed yet: %s", queue, exc)


def reaper_pass(connection: RedisClient, settings: Settings, queue: str, now: float) -> None:
    """The reaper's share: replay the outbox, then sweep old deferred jobs."""
    replay_outbox(connection, settings, queue)
    sweep_deferred(connection, settings, queue, max(settings.reaper_interval, 1.0), now)

