"""The worker side of the event log: :class:`EventsMiddleware` emits
``processing``, ``progress`` (rate-limited) and every outcome from the worker
parent; :func:`emit_job_event` emits from outside the hooks (the reaper, cron,
admin tools).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Unpack

from ..core.hooks import Middleware
from .registry import default_sink
from .schema import make_event, outcome_event
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

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        if self.sink is not None:
            self.sink.emit(make_event("processing", job, worker=worker.name, host=worker.host,
                                      wait_time=job.wait_time))

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        if self.sink is None or not outcome.recorded:
            return
        event = outcome_event(outcome.status, outcome.reason)
        self.sink.emit(make_event(
            event, job, worker=worker.name, host=worker.host, duration=outcome.duration,
            error_type=outcome.error_type, error_message=outcome.error_message,
            reason=None if event == "completed" else outcome.reason,
        ))

    def on_progress(self, worker: WorkerContext, job: Job[Any], progress: float,
                    message: str | None) -> None:
        """A ``progress`` event per progress write (rate-limited like the writes)."""
        if self.sink is not None:
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
