"""OpenTelemetry: the queue.* instruments, and traces from the producer to the job.

Optional (``pip install 'fusionworker[otel]'``). Importing this module imports
no OpenTelemetry package; nothing is imported, created or recorded until
instrumentation is switched on (``FUSIONWORKER_OTEL=on`` or :func:`instrument`).
Switched off, the hot paths pay next to nothing: ``Queue.enqueue_call`` is
the plain method (:func:`instrument` swaps in the traced one) plus one call
of :func:`trace_fields` that returns ``[]``, ``Queue()`` one dict lookup of
the setting, and the horse one test of ``horse._otel`` (``None``).

Where each value is recorded, so that it is right across processes::

    producer  Queue.enqueue     PRODUCER span "send <queue>"; injects W3C trace
                                context into the job record (traceparent,
                                tracestate); queue.enqueue.total +1 (not for a
                                deduplicated enqueue)
    worker    after_claim       queue.schedule.total +1, queue.active +1,
                                queue.wait_time (enqueue or due time -> claim)
    worker    after_finish      queue.active -1, fusionworker.job.outcomes +1,
                                fusionworker.job.duration
    worker    metric collection queue.depth: an *observable* UpDownCounter whose
                                callback reads ZCOUNT of the pending ZSET per band
                                for the worker's queues (read at export time)
    horse     around the job    CONSUMER span "process <queue>", child of the
                                producer span; one per attempt; ended when the
                                job returns; the report goes to the parent;
                                then the span processor is flushed for at most
                                FUSIONWORKER_OTEL_FLUSH_TIMEOUT; then os._exit
                                (tests/test_otel.py covers each of these points)

Why queue.depth is observable: a depth kept as +1/-1 deltas from many
processes (every producer +1, every worker -1) is only right while all of
them live; a restarted worker drops its share and the sum drifts for good,
and jobs that leave ``pending`` by other paths (cancel, delete, promotion,
reaper) would each need a hook. The callback reads Redis, so the value is
the true depth whatever happened. Every worker of a queue reports the same
value: aggregate it with ``max``, not ``sum``. ``queue.active`` is a plain
UpDownCounter (+1 at claim, -1 at outcome, in the worker that ran it): a
dead worker runs nothing, so its vanished share is right.

``queue.schedule.total`` counts what the design this follows calls
scheduling: a job taken from the queue by a worker (the claim), so that
``enqueue.total - schedule.total`` follows the depth.

Crash points of the horse's span: the span is ended when the job function
returned or raised (time-outs raise in the horse); the report is written to
the parent first, then the spans are exported for at most the flush timeout,
then ``os._exit``. A horse killed from outside (SIGKILL, segfault, the memory
ceiling, the parent's hard kill) exports no span; the worker's outcome
counter still counts that attempt.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .middleware import Middleware

log = logging.getLogger("fusionworker.otel")

#: The producer-side instrumentation of this process, or None (off).
producer: Producer | None = None

_F = TypeVar("_F", bound=Callable[..., Any])

SCOPE = "fusionworker"
SYSTEM = "fusionworker"

_lock = threading.Lock()
_configured = False
#: the MeterProvider configure_sdk made (shut down, bounded, when the worker stops)
_owned_meter_provider: Any = None


class OtelUnavailable(RuntimeError):
    """OpenTelemetry was asked for but its packages are not installed."""


def _require() -> None:
    try:
        import opentelemetry.metrics  # noqa: F401
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise OtelUnavailable(
            "FUSIONWORKER_OTEL=on needs the OpenTelemetry packages: "
            "pip install 'fusionworker[otel]'") from exc


def _version() -> str:
    # not ``from . import __version__``: in the fork server that would run the package's
    # __init__ (redis, the worker), the memory the lean server exists to avoid
    package = sys.modules.get(__package__ or "fusionworker")
    return "" if package is None else str(package.__dict__.get("__version__") or "")


def band_of(priority: int) -> str:
    """Priority band name (``queue.BANDS``): high, normal or low."""
    if priority >= 10:
        return "high"
    return "normal" if priority >= 0 else "low"


# --------------------------------------------------------------------------- set-up


def configure_sdk(setup: str = "", *, with_metrics: bool = True) -> None:
    """Install global SDK providers in this process (once): ``setup`` (module:function)
    when given, else OTLP/HTTP exporters configured by the standard ``OTEL_*`` variables
    (``with_metrics=False``: traces only, as in the fork server).

    Providers an application installed already are kept.
    """
    global _configured, _owned_meter_provider
    with _lock:
        if _configured:
            return
        _configured = True
        _require()
        if setup:
            module, _, name = setup.partition(":")
            if not module or not name:
                raise ValueError(f"FUSIONWORKER_OTEL_SETUP={setup!r}: expected module:function")
            getattr(importlib.import_module(module), name)()
            return
        from opentelemetry import metrics, trace

        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return
        from opentelemetry.sdk.resources import Resource

        attrs = {}
        if not os.environ.get("OTEL_SERVICE_NAME") and "service.name" not in os.environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", ""):
            attrs["service.name"] = "fusionworker"
        resource = Resource.create(attrs)
        if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            tracer_provider = TracerProvider(resource=resource)
            tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(tracer_provider)
        if with_metrics and type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            reader = PeriodicExportingMetricReader(OTLPMetricExporter())
            _owned_meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
            metrics.set_meter_provider(_owned_meter_provider)


def _bounded(call: Callable[[], Any], timeout: float) -> None:
    """Run ``call`` in a daemon thread; wait at most ``timeout`` s for it.

    The SDK's flush has no working time limit (it blocks in the exporter,
    which retries an unreachable collector for its own 10 s and more).
    """
    thread = threading.Thread(target=call, name="fusionworker-otel-flush", daemon=True)
    thread.start()
    thread.join(max(timeout, 0.0))


# --------------------------------------------------------------------------- producer


class Producer:
    """Trace and count ``Queue.enqueue`` (made by :func:`instrument`)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.propagator = TraceContextTextMapPropagator()
        self.tracer = trace.get_tracer(SCOPE, _version(), tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, _version(), meter_provider=meter_provider)
        self.enqueued = meter.create_counter(
            "queue.enqueue.total", unit="{job}", description="Jobs enqueued (not deduplicated)")

    def enqueue(self, call: Callable[..., Any], queue: Any, func: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        """``Queue.enqueue_call`` inside a PRODUCER span (exceptions recorded by the span)."""
        from .exceptions import InvalidFunction
        from .functions import func_ref

        try:
            ref = func_ref(func)
        except InvalidFunction:
            ref = repr(func)   # enqueue_call raises the clear error, inside the span
        priority = kwargs.get("priority", 0)
        with self.tracer.start_as_current_span(
            f"send {queue.name}", kind=self.trace.SpanKind.PRODUCER,
            attributes={"messaging.system": SYSTEM, "messaging.operation.type": "send",
                        "messaging.operation.name": "send",
                        "messaging.destination.name": queue.name,
                        "fusionworker.job.function": ref,
                        "fusionworker.job.priority": priority if isinstance(priority, int) else 0},
        ) as span:
            job = call(queue, func, *args, **kwargs)
            try:   # the job is written: from here on nothing may raise (queue.py)
                span.set_attribute("messaging.message.id", job.id)
                span.set_attribute("fusionworker.job.deduplicated", job.deduplicated)
                if not job.deduplicated:
                    span.set_attribute("fusionworker.job.status", job.status)
                    self.enqueued.add(1, {"queue": queue.name, "band": band_of(job.priority)})
            except Exception:  # noqa: BLE001 - telemetry never fails an enqueue
                log.debug("recording the enqueue of job %s failed", job.id, exc_info=True)
        return job

    def context_fields(self) -> list[str]:
        """``["traceparent", v, "tracestate", v]`` of the current span, for the job record."""
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier)
        return [item for key in ("traceparent", "tracestate") if carrier.get(key)
                for item in (key, carrier[key])]


def traced_enqueue(call: _F) -> _F:
    """``Queue.enqueue_call`` in a PRODUCER span while :data:`producer` is set.

    :func:`instrument` puts it in place of ``Queue.enqueue_call`` (and
    :func:`uninstrument` takes it out), so an uninstrumented process runs the
    plain method: no wrapper call at all.
    """

    @functools.wraps(call)
    def enqueue_call(self: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        tel = producer
        if tel is None:
            return call(self, func, *args, **kwargs)
        return tel.enqueue(call, self, func, args, kwargs)

    return cast(_F, enqueue_call)


def trace_fields() -> list[str]:
    """Job-record fields carrying the current trace context ([] when off)."""
    tel = producer
    return [] if tel is None else tel.context_fields()


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> Producer:
    """Trace and count every ``Queue.enqueue`` of this process.

    Without arguments the global providers are used (those the application
    configured; with none, the OpenTelemetry API's no-op ones). Called by
    ``Queue`` itself when ``FUSIONWORKER_OTEL=on``. Returns the instrumentation.
    """
    global producer
    _require()
    made = Producer(tracer_provider, meter_provider)
    from .queue import Queue

    with _lock:
        producer = made
        if "_fw_plain" not in Queue.__dict__:
            Queue._fw_plain = Queue.enqueue_call  # type: ignore[attr-defined]
            Queue.enqueue_call = traced_enqueue(Queue.enqueue_call)  # type: ignore[method-assign]
    return made


def uninstrument() -> None:
    """Stop tracing/counting enqueues (back to the plain ``Queue.enqueue_call``)."""
    global producer
    from .queue import Queue

    with _lock:
        producer = None
        plain = Queue.__dict__.get("_fw_plain")
        if plain is not None:
            Queue.enqueue_call = plain  # type: ignore[method-assign]
            del Queue._fw_plain  # type: ignore[attr-defined]


def ensure_producer() -> None:
    """``FUSIONWORKER_OTEL=on`` in a producer: instrument once with the global providers."""
    if producer is None:
        instrument()


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
            token = self.context.attach(self.trace.set_span_in_context(span))
        except Exception:  # noqa: BLE001 - tracing must never stop the job
            log.debug("starting the job span failed", exc_info=True)
            return body()
        try:
            report = body()
        finally:
            self.context.detach(token)
        try:
            reason = report.get("reason", "exception")
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
        except Exception:  # noqa: BLE001 - tracing must never change the job's report
            log.debug("ending the job span failed", exc_info=True)
        return report

    def flush(self) -> None:
        """Export what the horse recorded, for at most the flush timeout (after the report)."""
        flush = getattr(self.provider, "force_flush", None)
        if flush is not None:
            _bounded(flush, self.flush_timeout)


def setup_horses(setup: str, flush_timeout: float) -> None:
    """In the process that forks horses: configure the SDK and trace every horse's job.

    Never raises: a broken set-up is logged and jobs run untraced.
    """
    from . import horse

    try:
        configure_sdk(setup, with_metrics=False)
        horse._otel = HorseTracing(flush_timeout)
    except Exception as exc:  # noqa: BLE001 - tracing must never stop jobs
        log.error("OpenTelemetry tracing of jobs is off: %s", exc)


# --------------------------------------------------------------------------- worker


class OtelMiddleware(Middleware):
    """The worker side: queue.* instruments, job outcomes and duration; traces in horses.

    ``meter_provider``/``tracer_provider``: use these (tests, embedding)
    instead of configuring the SDK from the settings.
    """

    def __init__(self, settings: Any, *, meter_provider: Any = None,
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
                "flush_timeout": self.settings.otel_flush_timeout}

    def on_start(self, worker: Any) -> None:
        self.worker = worker
        from . import horse

        if horse._otel is None:   # horses forked by the worker itself (no fork server)
            try:
                horse._otel = HorseTracing(self.settings.otel_flush_timeout,
                                           self.tracer_provider)
            except Exception as exc:  # noqa: BLE001 - tracing must never stop jobs
                log.error("OpenTelemetry tracing of jobs is off: %s", exc)

    def after_claim(self, worker: Any, job: Any) -> None:
        attrs = {"queue": job.queue, "band": band_of(job.priority)}
        self.scheduled.add(1, attrs)
        self.active.add(1, attrs)
        self._running[job.id] = attrs
        wait = job.wait_time
        if wait is not None:
            self.wait_time.record(wait, attrs)

    def after_finish(self, worker: Any, job: Any, outcome: Any) -> None:
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

        from .queue import BANDS, _band_range

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

    def on_stop(self, worker: Any) -> None:
        from . import horse

        if isinstance(horse._otel, HorseTracing):
            horse._otel = None
        provider = self.meter_provider
        # ours: shut it down now, bounded (its atexit shutdown would export to a dead
        # collector for the exporter's whole timeout); the application's: flush it
        call = getattr(provider, "shutdown" if provider is _owned_meter_provider
                       else "force_flush", None)
        if call is not None:
            _bounded(call, self.settings.otel_flush_timeout)
