"""The RQ names of a :class:`~fusionworker.core.job.Job`: ``get_status``,
``is_finished``, ``return_value``, ``cancel``/``requeue``/``delete``, ``save_meta``...

A mixin of ``Job``: each name is a thin layer over what fusionworker has
(``Queue.fetch_job``, ``Queue.cancel``, the job record's fields). docs/from-rq.md
lists them with what differs. The ones that make other jobs (``Job.fetch``,
``fetch_many``, ``exists``, ``fetch_dependencies``) are in job.py, typed ``Job``; the
ones here give back the job itself (``Self``), so this module names no ``Job``.

The ``is_*`` properties and :meth:`JobHabits.get_status` read the status again
from Redis (one ``HGET``) when the job was read through a queue, as RQ's do, so
``while not job.is_finished: ...`` sees the worker's progress. A job built by
hand (no queue) answers from what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, cast

from ..exceptions import JobCanceled, JobFailed, JobWaitTimeout, MetaTooLarge, NoSuchJob
from . import codec
from .derived import Derived
from .vocabulary import JobStatus

if TYPE_CHECKING:  # pragma: no cover
    from .redis_client import RedisClient

#: writes ``meta`` only where the job still exists (a HSET on a gone record would
#: leave a record of one field behind)
#: largest producer-side meta, bytes of its tagged JSON (the limit a job's own meta has)
META_LIMIT = 64 * 1024


@dataclass(frozen=True)
class JobResult:
    """The outcome of a job's last attempt (RQ's ``Result``): see :meth:`JobHabits.latest_result`.

    ``type`` is ``"successful"``, ``"failed"``, ``"stopped"`` or ``"canceled"``. Only the last
    outcome is kept per job (no history of earlier attempts).
    """

    job_id: str
    type: str
    return_value: Any = None
    exc_string: str | None = None
    created_at: datetime | None = None


def call_text(func: str, args: list[Any], kwargs: dict[str, Any], limit: int = 200) -> str:
    """``module:function(arg, key=value)``, cut to ``limit`` characters: the default
    description of a job."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = f"{func}({', '.join(parts)})"
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _StatusIs(Derived["JobHabits", bool]):
    """``job.is_<status>`` (RQ's names): the status read again (:meth:`JobHabits.get_status`)
    is ``status``."""

    def __init__(self, status: JobStatus) -> None:
        self.status = status

    def read(self, obj: JobHabits) -> bool:
        return obj.get_status() == self.status


#: statuses ``Job.wait`` returns (or raises) on (``core.job.DONE_STATUSES``)
DONE_STATUSES = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.STOPPED)


class RQNames:
    """RQ's names for who a job is, on a job and on ``current_job()`` alike."""

    id: str
    queue: str
    func: str

    def get_id(self) -> str:
        """The job's id (RQ's ``job.get_id()``)."""
        return self.id

    @property
    def func_name(self) -> str:
        """``module:function`` (RQ writes ``module.function``)."""
        return self.func

    @property
    def origin(self) -> str:
        """The name of the job's queue."""
        return self.queue


class JobHabits(RQNames):
    """RQ's names on a job (mixed into :class:`~fusionworker.core.job.Job`, which the
    methods return as ``Self``: job.py imports this module)."""

    # the fields of Job this mixin reads (declared for the type checker)
    id: str
    queue: str
    func: str
    args: list[Any]
    kwargs: dict[str, Any]
    status: JobStatus
    result: Any
    error_type: str | None
    error_message: str | None
    traceback: str | None
    ended_at: float | None
    enqueued_at: float | None
    depends_on: list[str] | None
    meta: dict[str, Any]
    attempts: int
    max_retries: int
    _description: str | None
    _queue: Any

    if TYPE_CHECKING:  # pragma: no cover - the methods of Job (job.py) this mixin calls
        def refresh(self) -> Self: ...

        def wait(self, timeout: float | None = None) -> Self: ...

    # -- names RQ users reach for ------------------------------------------------

    @property
    def description(self) -> str:
        """The description given at enqueue, else ``module:function(args, kwargs)``."""
        return self._description or call_text(self.func, self.args, self.kwargs)

    @property
    def connection(self) -> RedisClient:
        """The Redis client of the queue the job was read through (AttributeError for a
        job built by hand, so that ``getattr(job, "connection", None)`` works)."""
        if self._queue is None:
            raise AttributeError("connection: this Job was not read through a Queue")
        return cast("RedisClient", self._queue.connection)

    def _queue_for(self, what: str) -> Any:
        if self._queue is None:
            raise ValueError(f"{what}: this Job was not read through a Queue: use "
                             "Job.fetch(id, connection) or queue.fetch_job(id)")
        return self._queue

    @property
    def exc_info(self) -> str | None:
        """The traceback of the last failure (RQ's name), or None. As ``result``, read
        again first while the job has not ended (RQ's reads it each time)."""
        self._read_unless_ended()
        return self.traceback

    @property
    def dependency_ids(self) -> list[str]:
        """Ids of the jobs this one waits on (``depends_on``; RQ's name)."""
        return [ref.partition(":")[2] for ref in (self.depends_on or [])]

    @property
    def dependent_ids(self) -> list[str]:
        """Ids of the jobs still waiting on this one (RQ's name), read now: once this job
        ended they were released (or canceled) and none is left waiting."""
        from .redis_client import texts

        q = self._queue_for("dependent_ids")
        refs = texts(q.connection.smembers(q.qkeys.dependents(self.id)))
        return sorted(ref.partition(":")[2] for ref in refs)

    @property
    def created_at(self) -> float | None:
        """When the job was enqueued (RQ's name; epoch seconds, as every time here)."""
        return self.enqueued_at

    def get_call_string(self) -> str:
        """``module:function(args, key=value)`` (RQ's), each argument by its ``repr``,
        cut at 200 characters."""
        parts = [repr(a) for a in self.args or []]
        parts += [f"{k}={v!r}" for k, v in (self.kwargs or {}).items()]
        call = f"{self.func}({', '.join(parts)})"
        return call if len(call) <= 200 else call[:197] + "..."

    def dependencies_are_met(self) -> bool:
        """Every job this one waits on has finished (read now; a gone one has not)."""
        q = self._queue_for("dependencies_are_met")
        refs = [ref.partition(":") for ref in self.depends_on or []]
        if not refs:
            return True
        pipe = q.connection.pipeline(transaction=False)
        for queue, _, job_id in refs:
            pipe.hget(q.keys.queue(queue).job(job_id), "status")
        return all(status == "finished" for status in pipe.execute())

    # -- status ------------------------------------------------------------------

    def get_status(self, refresh: bool = True) -> JobStatus:
        """The job's status, read again from Redis (one ``HGET``) unless
        ``refresh=False``. Raises :class:`~fusionworker.exceptions.NoSuchJob`
        once the record is gone (deleted, expired), as RQ raises."""
        if refresh and self._queue is not None:
            q = self._queue
            value = q.connection.hget(q.qkeys.job(self.id), "status")
            if value is None:
                raise NoSuchJob(f"job {self.id!r} of queue {self.queue!r} no longer exists")
            status = JobStatus.read(value)
            if status in DONE_STATUSES and status != self.status:
                # ended since it was read: what the end wrote comes too (RQ's idiom
                # ``if job.is_finished: job.result`` read None: ``result`` trusts an
                # ended job's fields and reads nothing again); not ``meta``, which
                # RQ's get_status leaves alone (an unsaved local change stays)
                meta = self.meta
                self.refresh()
                self.meta = meta
            self.status = status
        return self.status

    def get_meta(self, refresh: bool = True) -> dict[str, Any]:
        """``job.meta``, read again from Redis (one ``HGET``) unless ``refresh=False``."""
        if refresh and self._queue is not None:
            q = self._queue
            raw = q.connection.hget(q.qkeys.job(self.id), "meta")
            found = codec.loads(raw) if raw else {}
            self.meta = found if isinstance(found, dict) else {}
        return self.meta

    def get_position(self) -> int | None:
        """Place of the job in its queue's run order (0 runs next), or None when it
        is not queued (or was not read through a queue)."""
        if self._queue is None:
            return None
        return cast("int | None", self._queue.get_job_position(self.id))

    is_queued = _StatusIs(JobStatus.QUEUED)
    is_scheduled = _StatusIs(JobStatus.SCHEDULED)
    is_deferred = _StatusIs(JobStatus.DEFERRED)
    is_started = _StatusIs(JobStatus.STARTED)
    is_finished = _StatusIs(JobStatus.FINISHED)
    is_failed = _StatusIs(JobStatus.FAILED)
    is_canceled = _StatusIs(JobStatus.CANCELED)
    is_stopped = _StatusIs(JobStatus.STOPPED)

    # -- results -----------------------------------------------------------------

    def _refreshed(self) -> None:
        if self._queue is not None:
            self.refresh()

    def _read_unless_ended(self) -> None:
        """RQ's ``result`` and ``exc_info`` read Redis each time: a job read through a
        queue that has not ended is read again (an ended one changes no more; a gone
        one keeps what was read)."""
        if self._queue is not None and self.status not in DONE_STATUSES:
            try:
                self.refresh()
            except NoSuchJob:
                pass

    @property
    def retries_left(self) -> int:
        """RQ's ``job.retries_left``, from what was read: the retries the job may still
        get, ``max_retries`` less its failed attempts; 0 once it failed for good or was
        stopped."""
        if self.status in (JobStatus.FAILED, JobStatus.STOPPED):
            return 0
        # the last attempt of a started or finished job did not fail
        failed = self.attempts - (self.status in (JobStatus.STARTED, JobStatus.FINISHED))
        return max(0, self.max_retries - max(0, failed))

    def return_value(self, refresh: bool = True) -> Any:
        """What the function returned once the job is finished, else None."""
        if refresh:
            self._refreshed()
        return self.result if self.status == "finished" else None

    def latest_result(self, timeout: float | None = None) -> JobResult | None:
        """The outcome of the last attempt (:class:`~fusionworker.core.job.JobResult`),
        or None while the job has none (queued, started, deferred, scheduled, held). Its
        ``type`` is ``"successful"``, ``"failed"``, ``"stopped"`` (``job.stop()``, as
        RQ's ``STOPPED``) or ``"canceled"``.

        ``timeout``: wait up to that many seconds for an outcome first (no
        polling: :meth:`~fusionworker.core.job.Job.wait`); None after it too.
        """
        if timeout is not None:
            try:
                self.wait(timeout)
            except (JobFailed, JobCanceled, JobWaitTimeout):
                pass       # the outcome (or its absence) is read below
        self._refreshed()
        kind = {"finished": "successful", "failed": "failed", "stopped": "stopped",
                "canceled": "canceled"}.get(self.status)
        if kind is None:
            return None
        when = (datetime.fromtimestamp(self.ended_at, UTC)
                if self.ended_at is not None else None)
        error = None
        if kind != "successful":
            error = self.traceback or (f"{self.error_type}: {self.error_message}"
                                       if self.error_type else None)
        return JobResult(job_id=self.id, type=kind,
                         return_value=self.result if kind == "successful" else None,
                         exc_string=error, created_at=when)

    # -- changing it ---------------------------------------------------------------

    def cancel(self) -> Self:
        """Cancel the job (queued, scheduled or deferred; see ``Queue.cancel``); self, updated."""
        self._queue_for("cancel").cancel(self.id)
        return self._updated()

    def stop(self) -> Self:
        """Stop the job: a running one is killed by its worker and ends ``stopped``; a
        queued one is canceled (see ``Queue.stop``); self, updated."""
        self._queue_for("stop").stop(self.id)
        return self._updated()

    def hold(self) -> Self:
        """Set the queued or scheduled job aside: never claimed until :meth:`release`
        (see ``Queue.hold``); self, updated."""
        self._queue_for("hold").hold(self.id)
        return self._updated()

    def release(self) -> Self:
        """Give a held job back its place in its queue (see ``Queue.release``); self,
        updated."""
        self._queue_for("release").release(self.id)
        return self._updated()

    def requeue(self) -> Self:
        """Put a failed job back on its queue (see ``Queue.requeue``); self, updated."""
        self._queue_for("requeue").requeue(self.id)
        return self._updated()

    def delete(self) -> None:
        """Delete the job and every reference to it (see ``Queue.delete``)."""
        self._queue_for("delete").delete(self.id)

    def _updated(self) -> Self:
        return self.refresh()

    def save_meta(self) -> None:
        """Write ``job.meta`` to the job's record (the producer's side of RQ's
        ``job.meta[...] = ...; job.save_meta()``).

        The job sees it as ``current_job().meta`` when an attempt starts. Values
        are what job arguments may be (tagged JSON); a value that is not, or a
        meta over 64 KiB of JSON, raises before anything is written. While an
        attempt runs, the job's own meta writes win (the worker writes the
        whole meta). Raises :class:`~fusionworker.exceptions.NoSuchJob` when the
        record is gone.
        """
        from .scripts import replies  # redis: not loaded with a job's module

        q = self._queue_for("save_meta")
        if not all(isinstance(k, str) for k in self.meta):
            raise TypeError("meta keys must be strings")
        encoded = codec.dumps(dict(self.meta))
        if len(encoded.encode("utf-8")) > META_LIMIT:
            raise MetaTooLarge(f"the meta is {len(encoded)} bytes of JSON; the limit is "
                               f"{META_LIMIT}")
        if not replies.changed(q.scripts.save_meta(keys=[q.qkeys.base], args=[self.id, encoded])):
            raise NoSuchJob(f"job {self.id!r} of queue {self.queue!r} no longer exists")

    def __repr__(self) -> str:
        return (f"Job({self.id!r}, queue={self.queue!r}, func={self.func!r}, "
                f"status={str(self.status)!r})")
