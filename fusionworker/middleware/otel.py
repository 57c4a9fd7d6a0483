"""OpenTelemetry: the queue.* instruments, and traces from the producer to the job.

The public face (``from fusionworker import otel``): :func:`instrument`,
:func:`uninstrument` and :class:`OtelMiddleware`. The producer side (set-up,
PRODUCER span, trace context) is in ``core/tracing.py`` (``Queue`` needs it);
the worker side (the middleware, the horse's CONSUMER span) is here.

Optional (``pip install 'fusionworker[otel]'``). Importing this module imports
no OpenTelemetry package; nothing is imported, created or recorded until
instrumentation is switched on (``FUSIONWORKER_OTEL=on`` or :func:`instrument`).
Switched off, the hot paths pay next to nothing: ``Queue.enqueue_call`` is
the plain method (:func:`instrument` swaps in the traced one) plus one call
of :func:`trace_fields` that returns ``[]``, ``Queue()`` one dict lookup of
the setting, and the horse one test of ``tracing.horse_tracing`` (``None``).

Where each value is recorded so that it is right across processes, why
``queue.depth`` is observable (aggregate it with ``max``, not ``sum``), and what a
horse killed before its export leaves: docs/design.md, "OpenTelemetry across
processes".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..core import tracing
from ..core.hooks import Middleware
from ..core.job import FailureReason
from ..core.queue import Queue
from ..core.tracing import (
    SCOPE,
    SYSTEM,
    OtelUnavailable,
    Producer,
    _bounded,
    _require,
    _version,
    band_of,
    configure_sdk,
    trace_fields,
    traced_enqueue,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.hooks import Outcome, WorkerContext
    from ..core.job import Job

__all__ = ["HorseTracing", "OtelMiddleware", "OtelUnavailable", "Producer", "band_of",
           "configure_sdk", "ensure_producer", "instrument", "setup_horses", "trace_fields",
           "traced_enqueue", "uninstrument"]

log = logging.getLogger("fusionworker.otel")


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> Producer:
    """Trace and count every ``Queue.enqueue`` of this process (core/tracing.py).

    Without arguments the global providers are used (those the application
    configured; with none, the OpenTelemetry API's no-op ones). Called by
    ``Queue`` itself when ``FUSIONWORKER_OTEL=on``. Returns the instrumentation.
    """
    return tracing.instrument(tracer_provider, meter_provider, queue_class=Queue)


def uninstrument() -> None:
    """Stop tracing/counting enqueues (back to the plain ``Queue.enqueue_call``)."""
    tracing.uninstrument(Queue)


def ensure_producer() -> None:
    """``FUSIONWORKER_OTEL=on`` in a producer: instrument once with the global providers."""
    tracing.ensure_producer(Queue)


# --------------------------------------------------------------------------- horse


class HorseTracing:
    """The consumer span of one job, in its horse (see the module docstring)."""

    def __init__(self, flush_timeout: float, tracer_provider: Any = None) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace, self.context = trace, context
        self.Status, self.StatusCode = Status, StatusCode
        self.propagator = TraceContextTextMapPropagator()
        self.provider = tracer_provider or trace.get_tracer_provider()
        self.tracer = trace.get_tracer(SCOPE, _version(), tracer_provider=self.provider)
        self.flush_timeout = flush_timeout

    def run(self, job: Any, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run ``body`` (the job) inside a CONSUMER span; record its report on the span."""
        started = self._start(job)
        if started is None:
            return body()
        span, token = started
        try:
            report = body()
        finally:
            self.context.detach(token)
        self._end(span, report)
        return report

    async def run_async(self, job: Any,
                        body: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """:meth:`run` for one task of an async horse: the span is attached to the task's
        own context, so the jobs running beside it on the loop are not inside it."""
        started = self._start(job)
        if started is None:
            return await body()
        span, token = started
        try:
            report = await body()
        finally:
            self.context.detach(token)
        self._end(span, report)
        return report

    def _start(self, job: Any) -> tuple[Any, Any] | None:
        """The job's span, started and made current; None if that failed (the job runs
        untraced: tracing must never stop a job)."""
        try:
            carrier = {k: v for k, v in (("traceparent", getattr(job, "traceparent", None)),
                                         ("tracestate", getattr(job, "tracestate", None))) if v}
            parent = self.propagator.extract(carrier) if carrier else None
            span = self.tracer.start_span(
                f"process {job.queue}", context=parent, kind=self.trace.SpanKind.CONSUMER,
                attributes={"messaging.system": SYSTEM, "messaging.operation.type": "process",
                            "messaging.operation.name": "process",
                            "messaging.destination.name": job.queue,
                            "messaging.message.id": job.id,
                            "fusionworker.job.function": job.func,
                            "fusionworker.job.attempt": int(getattr(job, "attempts", 0) or 0),
                            "fusionworker.job.priority": int(getattr(job, "priority", 0) or 0)})
            return span, self.context.attach(self.trace.set_span_in_context(span))
        except Exception:
            log.debug("starting the job span failed", exc_info=True)
            return None

    def _end(self, span: Any, report: dict[str, Any]) -> None:
        """Record the job's report on its span and end it (never raises)."""
        try:
            reason = str(report.get("reason") or FailureReason.EXCEPTION)
            span.set_attribute("fusionworker.job.outcome", reason)
            if not report.get("ok"):
                error_type = report.get("error_type") or "Error"
                message = report.get("error_message") or ""
                span.set_attribute("error.type", error_type)
                span.set_attribute("fusionworker.job.retryable", bool(report.get("retryable")))
                # the exception event of the semantic conventions, from the horse's report
                # (the job's exception was caught and formatted inside run_job)
                span.add_event("exception", {"exception.type": error_type,
                                             "exception.message": message,
                                             "exception.stacktrace": report.get("traceback") or ""})
                span.set_status(self.Status(self.StatusCode.ERROR, f"{error_type}: {message}"))
            span.end()
        except Exception:  # tracing must never change the job's report
            log.debug("ending the job span failed", exc_info=True)

    def flush(self) -> None:
        """Export what the horse recorded, for at most the flush timeout (after the report)."""
        flush = getattr(self.provider, "force_flush", None)
        if flush is not None:
            _bounded(flush, self.flush_timeout)


def setup_horses(setup: str, flush_timeout: float, log_state: str = "") -> None:
    """In the process that forks horses: configure the SDK (traces only: horses record
    no metrics) and trace every horse's job; with no tracer provider after that
    (``OTEL_TRACES_EXPORTER=none``), horses run untraced and flush nothing.

    Never raises: a broken set-up is logged and jobs run untraced.
    """
    try:
        configure_sdk(setup, with_metrics=False, log_state=log_state)
        if not _has_tracer_provider():
            log.debug("OpenTelemetry: no tracer provider, jobs are not traced")
            return
        tracing.set_horse_tracing(HorseTracing(flush_timeout))
    except Exception as exc:  # noqa: BLE001 - tracing must never stop jobs
        log.error("OpenTelemetry tracing of jobs is off: %s", exc)


def _has_tracer_provider() -> bool:
    from opentelemetry import trace

    return type(trace.get_tracer_provider()).__name__ != "ProxyTracerProvider"


# --------------------------------------------------------------------------- worker


class OtelMiddleware(Middleware):
    """The worker side: queue.* instruments, job outcomes and duration; traces in horses.

    ``meter_provider``/``tracer_provider``: use these (tests, embedding)
    instead of configuring the SDK from the settings.
    """

    def __init__(self, settings: Settings, *, meter_provider: Any = None,
                 tracer_provider: Any = None) -> None:
        _require()
        from opentelemetry import metrics

        self.settings = settings
        self.worker: Any = None
        if meter_provider is None:
            configure_sdk(settings.otel_setup)
        meter = metrics.get_meter(SCOPE, _version(), meter_provider=meter_provider)
        self.meter_provider = meter_provider or metrics.get_meter_provider()
        self.tracer_provider = tracer_provider
        self.scheduled = meter.create_counter(
            "queue.schedule.total", unit="{job}",
            description="Jobs taken from a queue by a worker (claimed)")
        self.active = meter.create_up_down_counter(
            "queue.active", unit="{job}", description="Jobs running")
        self.wait_time = meter.create_histogram(
            "queue.wait_time", unit="s",
            description="Time from enqueue (or due time) to claim, by priority band")
        self.outcomes = meter.create_counter(
            "fusionworker.job.outcomes", unit="{attempt}",
            description="Attempts that ended and were recorded, by status and reason")
        self.duration = meter.create_histogram(
            "fusionworker.job.duration", unit="s",
            description="Processing time of an attempt (fork to outcome)")
        meter.create_observable_up_down_counter(
            "queue.depth", callbacks=[self._observe_depth], unit="{job}",
            description="Jobs pending (ready to run), by priority band; read from Redis")
        #: (queue, band) of the attempts counted in queue.active and not yet ended
        self._running: dict[str, dict[str, str]] = {}

    def horse_tracing(self) -> dict[str, Any]:
        """What the fork server needs to trace horses (see ``forkserver.serve``)."""
        return {"setup": self.settings.otel_setup,
                "flush_timeout": self.settings.otel_flush_timeout,
                "log_state": tracing.log_state_path()}

    def on_start(self, worker: WorkerContext) -> None:
        self.worker = worker
        if tracing.horse_tracing is None and (   # horses forked by the worker itself
                self.tracer_provider is not None or _has_tracer_provider()):
            try:
                tracing.set_horse_tracing(HorseTracing(self.settings.otel_flush_timeout,
                                                       self.tracer_provider))
            except Exception as exc:  # noqa: BLE001 - tracing must never stop jobs
                log.error("OpenTelemetry tracing of jobs is off: %s", exc)

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        attrs = {"queue": job.queue, "band": band_of(job.priority)}
        self.scheduled.add(1, attrs)
        self.active.add(1, attrs)
        self._running[job.id] = attrs
        wait = job.wait_time
        if wait is not None:
            self.wait_time.record(wait, attrs)

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        attrs = self._running.pop(job.id, None)
        if attrs is not None:
            self.active.add(-1, attrs)
        if not outcome.recorded:
            return
        self.outcomes.add(1, {"queue": job.queue, "status": outcome.status,
                              "reason": outcome.reason})
        self.duration.record(outcome.duration, {"queue": job.queue, "status": outcome.status})

    def _observe_depth(self, options: Any) -> Any:
        from opentelemetry.metrics import Observation

        from ..core.queue import BANDS, _band_range

        worker = self.worker
        if worker is None:
            return []
        names = list(worker.queue_names)
        pipe = worker.connection.pipeline(transaction=False)
        for name in names:
            pending = worker.keys.queue(name).pending
            for _, low, high in BANDS:
                pipe.zcount(pending, *_band_range(low, high))
        counts = iter(pipe.execute())
        return [Observation(int(next(counts)), {"queue": name, "band": band})
                for name in names for band, _, _ in BANDS]

    def on_stop(self, worker: WorkerContext) -> None:
        if isinstance(tracing.horse_tracing, HorseTracing):
            tracing.set_horse_tracing(None)
        provider = self.meter_provider
        # ours: shut it down now, bounded (its atexit shutdown would export to a dead
        # collector for the exporter's whole timeout); the application's: flush it
        call = getattr(provider, "shutdown" if tracing.owns_meter_provider(provider)
                       else "force_flush", None)
        if call is not None:
            _bounded(call, self.settings.otel_flush_timeout)
