"""The worker side of the event log: :class:`EventsMiddleware` emits
``processing``, ``progress`` (rate-limited) and every outcome from the worker
parent; :func:`emit_job_event` emits from outside the hooks (the reaper, cron,
admin tools).

Where the sink is the plain Redis stream sink of the worker's own prefix on the
worker's own Redis (not a Cluster), the worker's scripts write those events
themselves, in the step that makes each true (:class:`ScriptEvents`:
``claim.lua`` the ``processing`` event, ``finish.lua`` the outcome,
``progress.lua`` the ``progress`` event), and the middleware's hooks emit
none of them. The documents are the same; the stream then holds them in the
order the steps ran, and a worker killed after a step has written its event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

from ..core.connection import is_cluster
from ..core.hooks import Middleware, OutcomeStatus
from ..core.queue import same_server
from .history import HISTORY_COPY_TTL
from .registry import default_sink
from .schema import make_event, outcome_fields, stream_pairs
from .sinks import EventSink, RedisStreamSink, make_sink

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient
    from ..core.emitting import EventFields
    from ..core.hooks import Outcome, WorkerContext
    from ..core.job import Job

log = logging.getLogger("fusionworker.events")


class EventsMiddleware(Middleware):
    """Emits ``processing`` and the outcome of every job from the worker parent.

    The sink is made in ``on_start`` (:func:`make_sink`) unless one is given,
    and closed in ``on_stop`` (flushing for up to ``close_timeout`` seconds).
    Hooks only append to the sink's buffer: nothing here touches the network
    on the job path, and nothing runs in the horse. An outcome the worker
    could not record (``Outcome.recorded`` False: the attempt was taken back
    by the reaper meanwhile) emits nothing; the reaper reports that job.
    """

    def __init__(self, sink: EventSink | None = None, *, close_timeout: float = 5.0) -> None:
        self.sink = sink
        self.close_timeout = close_timeout
        #: what :meth:`script_events` gave the worker: its scripts write processing,
        #: progress and the outcomes of finish.lua, the hooks emit none of them
        self.written: ScriptEvents | None = None

    @property
    def scripted(self) -> bool:
        """The worker's scripts write this middleware's job events (:meth:`script_events`)."""
        return self.written is not None

    def on_start(self, worker: WorkerContext) -> None:
        if self.sink is None:
            try:
                self.sink = make_sink(worker.settings, worker.connection)
            except RuntimeError as exc:  # elasticsearch client missing: keep the events
                log.error("Event log: %s; writing events to the Redis stream instead", exc)
                self.sink = RedisStreamSink(worker.connection, worker.settings.prefix,
                                            maxlen=worker.settings.event_stream_maxlen,
                                            buffer_size=worker.settings.event_buffer)
            log.info("Worker %s: event log to %s", worker.name, self.sink.name)

    def script_events(self, worker: WorkerContext) -> ScriptEvents | None:
        """Where the worker's scripts may write this middleware's job events, or None.

        Only for this very class (a subclass may emit differently) with a sink that
        writes exactly what a script would (``script_stream()``: the plain
        :class:`RedisStreamSink`) to the worker's own stream on the worker's own
        Redis, which is not a Cluster (the stream is on another slot). From then on
        the hooks leave those events to the scripts (:attr:`scripted`)."""
        target = getattr(self.sink, "script_stream", lambda: None)()
        if (type(self) is not EventsMiddleware or target is None
                or target[1] != worker.keys.events or is_cluster(worker.connection)
                or not same_server(target[0], worker.connection)):
            return None
        self.written = ScriptEvents(target[1], int(target[2]), worker.name, worker.host)
        return self.written

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        if self.sink is not None and self.written:   # claim.lua wrote it (or said why not)
            self.sink.written_by_script(lost=_taken(self.written.lost_claims, job.id))
        elif self.sink is not None:
            self.sink.emit(make_event("processing", job, worker=worker.name, host=worker.host,
                                      wait_time=job.wait_time))

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        if self.sink is None or not outcome.recorded:
            return
        if self.scripted and outcome.status != OutcomeStatus.REQUEUED:
            # finish.lua wrote it, or says why not (a give-back: emitted here)
            self.sink.written_by_script(lost=outcome.event_lost is not None)
            return
        event, fields = outcome_fields(outcome)
        fields["worker"], fields["host"] = worker.name, worker.host
        self.sink.emit(make_event(event, job, **fields))

    def on_progress(self, worker: WorkerContext, job: Job[Any], progress: float,
                    message: str | None) -> None:
        """A ``progress`` event per progress write (rate-limited like the writes)."""
        if self.sink is not None and self.written:   # progress.lua wrote it (or said why not)
            self.sink.written_by_script(lost=_taken(self.written.lost_progress, job.id))
        elif self.sink is not None:
            self.sink.emit(make_event("progress", job, worker=worker.name, host=worker.host,
                                      progress=progress, progress_message=message))

    def on_stop(self, worker: WorkerContext) -> None:
        if self.sink is not None:
            self.sink.close(self.close_timeout)

    def describe(self) -> dict[str, Any]:
        """``events_buffered``, ``events_dropped``, ``events_errors`` for the heartbeat hash."""
        if self.sink is None:
            return {}
        stats = self.sink.stats()
        return {"events_buffered": stats["buffered"], "events_dropped": stats["dropped"],
                "events_errors": stats["errors"]}


@dataclass(frozen=True)
class ScriptEvents:
    """The worker's scripts write its job events to ``stream`` (MAXLEN ``maxlen``)
    as ``worker`` on ``host`` (:meth:`EventsMiddleware.script_events`).

    ``lost_claims`` and ``lost_progress``: ids of the jobs whose "processing" event, or
    whose last progress event, the script could not write whole (it said why: a key of
    another type; the stream may hold it, the job's history not); the worker adds them
    before the hook that counts the event runs, which takes them out and counts the
    event dropped, not delivered, as ``finish.lua``'s lost outcome event."""

    stream: str
    maxlen: int
    worker: str
    host: str
    lost_claims: set[str] = field(default_factory=set, compare=False, repr=False)
    lost_progress: set[str] = field(default_factory=set, compare=False, repr=False)

    def block(self, event: str, job: Job[Any], **fields: Unpack[EventFields]) -> list[Any]:
        """The event block of ``finish.lua`` / ``progress.lua`` (``event_block`` of
        ``_lib.lua``): the stream's MAXLEN, ``copy`` | ``keep`` (the history's TTL, as
        the sink's), the number of items, then the document's pairs after
        ``@timestamp`` (the script's clock) as the sink writes them (no None, text)."""
        fields["worker"], fields["host"] = self.worker, self.host
        items = stream_pairs(event, job, fields)
        return [self.maxlen, "copy" if event in HISTORY_COPY_TTL else "keep", len(items),
                *items]


def _taken(found: set[str], job_id: str) -> bool:
    """Whether ``job_id`` was in ``found`` (it is not any more)."""
    if job_id not in found:
        return False
    found.discard(job_id)
    return True


def sink_of(source: Any, connection: RedisClient | None = None) -> EventSink:
    """The sink to use for ``source``: an :class:`EventSink` itself; a worker's
    :class:`EventsMiddleware` sink (else the process default sink of its
    settings); or ``Settings`` (with ``connection``): the process default sink.
    """
    if isinstance(source, EventSink):
        return source
    middleware = getattr(source, "middleware", None)
    if middleware is not None:
        for mw in middleware:
            if isinstance(mw, EventsMiddleware) and mw.sink is not None:
                return mw.sink
        return default_sink(source.settings, connection or source.connection)
    if connection is None:
        raise ValueError("emit_job_event with Settings needs the Redis connection")
    return default_sink(source, connection)


def emit_job_event(source: Any, event: str, job: Any, *, connection: RedisClient | None = None,
                   **fields: Unpack[EventFields]) -> None:
    """Emit one event from outside a worker's hooks (the reaper, admin tools).

    ``source`` is a worker, an :class:`EventSink` or ``Settings`` (then pass
    ``connection``); ``fields`` go to :func:`make_event` (``worker``,
    ``duration``, ``error_type``, ``error_message``, ``reason``, ...). E.g.
    the reaper: ``emit_job_event(worker, "abandoned", job, reason="abandoned",
    error_type="Abandoned", error_message="worker w.1 died")`` or ``"requeued"``
    with ``reason="worker died"``. Never blocks; raises only on an unknown event.
    """
    sink_of(source, connection).emit(make_event(event, job, **fields))
