"""Batches with callbacks: a callback job enqueued exactly once when every job ended.

    with Batch(on_success="app.tasks:done", on_complete=..., on_failure=..., queue="reports",
               connection=r) as batch:
        for row in rows:
            q.enqueue("app.tasks:import_row", row, batch=batch)
    batch.status()   # {"total": ..., "ended": ..., "failed": ..., "progress": 0.42, ...}

Keys on the batch's queue Q: ``Q:batch:<id>`` (HASH) and ``Q:batch:<id>:ended``
(SET of the refs of its jobs that ended); a job of the batch carries ``batch`` =
``"Q:<id>"``. Its ending script leaves a note in its queue's outbox, replayed into
``batch_done.lua``, which fires the callbacks once the batch is sealed
(``__exit__``) and all its jobs ended. The sequence and the crash points:
docs/design.md, "Batches".
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import ResponseError

from .keys import QueueKeys
from .queue_names import known_queues
from .queue_port import queue_class
from .redis_client import text_hash, texts

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .job import Job
    from .queue_view import QueueView
    from .redis_client import RedisClient


class Batch:
    """Jobs whose end fires callbacks. Use as a context manager; sealed on exit."""

    def __init__(
        self,
        on_success: str | Callable[..., Any] | None = None,
        on_complete: str | Callable[..., Any] | None = None,
        on_failure: str | Callable[..., Any] | None = None,
        queue: str | QueueView = "default",
        *,
        connection: RedisClient | None = None,
        settings: Settings | None = None,
        batch_id: str | None = None,
    ) -> None:
        queue_type = queue_class()
        self.queue: QueueView = queue if isinstance(queue, queue_type) else queue_type(
            cast("str", queue), connection, settings=settings, events=False)
        self.id = batch_id or uuid.uuid4().hex
        if not isinstance(self.id, str) or not self.id or ":" in self.id or len(self.id) > 100:
            raise ValueError("batch_id must be 1-100 characters without ':'")
        #: kind -> [callback job id, its encoded fields] (JSON in the batch hash)
        self._callbacks: dict[str, tuple[str, list[str]]] = {}
        for kind, func in (("on_success", on_success), ("on_complete", on_complete),
                           ("on_failure", on_failure)):
            if func is not None:
                p = self.queue.prepare_call(func, [self.id])
                self._callbacks[kind] = (p.id, p.fields)
        self.total = 0
        self.sealed = False
        self._key = self.queue.qkeys.batch(self.id)

    @property
    def ref(self) -> str:
        """What a job of this batch carries in its ``batch`` field."""
        return f"{self.queue.name}:{self.id}"

    def callback_ids(self) -> dict[str, str]:
        return {kind: cb[0] for kind, cb in self._callbacks.items()}

    def __enter__(self) -> Batch:
        self.queue._register()
        self.queue.connection.hset(self._key, mapping={
            "callbacks": json.dumps(self._callbacks, separators=(",", ":")),
            "total": 0, "sealed": 0, "failed": 0, "created_at": repr(time.time()),
        })
        self.queue.connection.zadd(self.queue.qkeys.batches, {self.id: time.time()})
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seal()

    def _added(self, n: int) -> None:
        if self.sealed:
            raise RuntimeError(f"batch {self.id} is sealed: no job can be added")
        self.total += n

    def seal(self) -> None:
        """No more jobs: the callbacks fire once every job counted so far has ended."""
        if self.sealed:
            return
        self.sealed = True
        self.queue.scripts.batch_done(keys=[self.queue.qkeys.base],
                                      args=[self.id, "", "", self.total])

    def status(self) -> dict[str, Any]:
        """Counts and progress (``ended / total``) read from Redis."""
        return batch_status(self.queue.connection, self.queue.qkeys, self.id)

    # -- a callback's view (Celery's chord: the callback reads its group's results) --

    @staticmethod
    def job_ids(batch_id: str, connection: RedisClient | None = None, *,
                queue: str | None = None, settings: Settings | None = None) -> list[str]:
        """The ids of the batch's jobs that ended (all of them once its callbacks fired),
        in enqueue order. ``queue``: the batch's queue (default: looked up among the known
        queues). A callback, given the batch id, reads its batch with it."""
        return [job.id for job in Batch.jobs(batch_id, connection, queue=queue,
                                             settings=settings)]

    @staticmethod
    def jobs(batch_id: str, connection: RedisClient | None = None, *,
             queue: str | None = None, settings: Settings | None = None) -> list[Job[Any]]:
        """The batch's ended jobs (read now; a job whose record is gone, ``result_ttl=0``,
        is left out), in enqueue order. ``NoSuchJob`` when no queue holds the batch."""
        return _ended_jobs(batch_id, connection, queue, settings)[0]

    @staticmethod
    def results(batch_id: str, connection: RedisClient | None = None, *,
                queue: str | None = None, settings: Settings | None = None) -> list[Any]:
        """The results of the batch's ended jobs, in enqueue order (None for one that
        failed). ``NoSuchJob`` when a job that ended has no record any more (its
        ``result_ttl`` ran out before the batch ended): a shorter list would put the
        other results at the wrong places."""
        found, gone = _ended_jobs(batch_id, connection, queue, settings)
        if gone:
            from ..exceptions import NoSuchJob
            shown = ", ".join(gone[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
            raise NoSuchJob(
                f"batch {batch_id!r}: {len(gone)} of its {len(found) + len(gone)} ended jobs "
                f"have no record any more ({shown}): their results are gone, so the list "
                "would be short and out of place. Give the batch's jobs a result_ttl longer "
                "than the batch lasts (FUSIONWORKER_RESULT_TTL, default 500 s)")
        return [job.return_value(refresh=False) for job in found]


def _ended_jobs(batch_id: str, connection: RedisClient | None, queue: str | None,
                settings: Settings | None) -> tuple[list[Job[Any]], list[str]]:
    """The batch's ended jobs that still have a record, in enqueue order, and the refs
    (``queue:id``) of those that have none."""
    q = _batch_queue(batch_id, connection, queue, settings)
    refs = sorted(texts(q.connection.smembers(q.qkeys.batch_ended(batch_id))))
    found: list[Job[Any]] = []
    gone: list[str] = []
    queue_type = queue_class()
    for ref in refs:
        name, _, job_id = ref.partition(":")
        job = (q if name == q.name else queue_type(
            name, q.connection, settings=q.settings, events=False)).fetch_job(job_id)
        if job is None:
            gone.append(ref)
        else:
            found.append(job)
    return sorted(found, key=lambda j: (j.enqueued_at or 0.0, j.seq)), gone


def _batch_queue(batch_id: str, connection: RedisClient | None, queue: str | None,
                 settings: Settings | None) -> QueueView:
    """The queue holding batch ``batch_id`` (``queue``, or found among the known ones)."""
    from ..exceptions import NoSuchJob
    queue_type = queue_class()
    probe: QueueView = queue_type(queue or "default", connection, settings=settings, events=False)
    names = [queue] if queue else known_queues(probe.connection, probe.settings.prefix)
    for name in names:
        q: QueueView = queue_type(name, probe.connection, settings=probe.settings,
                                  events=False)
        if q.connection.exists(q.qkeys.batch(batch_id)):
            return q
    raise NoSuchJob(f"no batch {batch_id!r} in {queue or 'any queue'!r}")


def batch_status(connection: RedisClient, keys: QueueKeys | str,
                 batch_id: str) -> dict[str, Any]:
    """The batch's counts and progress; ``keys``: its queue's keys (or their ``base``)."""
    if isinstance(keys, str):
        keys = QueueKeys.from_base(keys)
    try:
        data = text_hash(connection.hgetall(keys.batch(batch_id)))
        if not data:
            return {"id": batch_id, "exists": False}
        ended = int(connection.scard(keys.batch_ended(batch_id)))
    except ResponseError as exc:      # a key of another type, written by another program
        return unreadable_batch(batch_id, exc)
    return batch_doc(batch_id, data, ended)


def unreadable_batch(batch_id: str, error: Exception) -> dict[str, Any]:
    """The document of a batch whose hash or set of ended jobs Redis refuses to read (a
    key of another type): nothing counted, ``unreadable`` what Redis answered (and
    ``malformed``, as a batch with unreadable fields). A listing or a job's page shows
    it, never fails on it."""
    doc = batch_doc(batch_id, {"total": "0"}, 0)
    doc["unreadable"] = str(error)[:200]
    doc["malformed"] = f"Redis refused to read it: {doc['unreadable']}"
    return doc


def batch_doc(batch_id: str, data: dict[str, str], ended: int) -> dict[str, Any]:
    """The batch's counts and progress from its hash (``data``, as text; empty: gone)
    and the count of its jobs that ended. A field that cannot be read (written by
    something else) counts as absent and the document says ``malformed``: a listing
    shows the batch, never fails on it."""
    if not data:
        return {"id": batch_id, "exists": False}
    bad: list[str] = []
    total = _count(data, "total", bad)
    failed = _count(data, "failed", bad)
    callbacks = _callbacks(data.get("callbacks"), bad)
    doc = {
        "id": batch_id, "exists": True, "sealed": data.get("sealed") == "1",
        "total": total, "ended": ended, "finished": max(0, ended - failed), "failed": failed,
        "pending": max(0, total - ended), "progress": (ended / total) if total else None,
        "fired": data.get("fired") == "1",
        "callbacks": callbacks,
        "created_at": _stamp(data, "created_at", bad),
        "ended_at": _stamp(data, "ended_at", bad),
    }
    if bad:
        doc["malformed"] = "unreadable field(s): " + ", ".join(bad)
    return doc


def _count(data: dict[str, str], name: str, bad: list[str]) -> int:
    try:
        return max(0, int(data.get(name) or 0))
    except ValueError:
        bad.append(name)
        return 0


def _stamp(data: dict[str, str], name: str, bad: list[str]) -> float | None:
    try:
        found = float(data[name]) if data.get(name) else None
    except ValueError:
        found = None
    if found is not None and math.isfinite(found):
        return found
    if data.get(name):
        bad.append(name)
    return None


def _callbacks(value: str | None, bad: list[str]) -> dict[str, Any]:
    try:
        found = json.loads(value or "{}")
        return {str(kind): cb[0] for kind, cb in found.items()}
    except (ValueError, RecursionError, TypeError, AttributeError, KeyError, IndexError):
        bad.append("callbacks")
        return {}
