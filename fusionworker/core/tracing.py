"""OpenTelemetry, the producer side and the shared state: the SDK set-up,
the PRODUCER span of ``Queue.enqueue`` and the trace context it stores in the job.

Part of the core layer because ``Queue`` (core) calls :func:`trace_fields` on
every enqueue; the worker side (the middleware, the horse's CONSUMER span)
lives in :mod:`fusionworker.middleware.otel`, which is also the public face
(``from fusionworker import otel``) and documents the whole design.

:data:`horse_tracing` is the slot the horse reads once per job (``None``: off);
``middleware.otel`` fills it in the fork server or the worker.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

log = logging.getLogger("fusionworker.otel")

#: The producer-side instrumentation of this process, or None (off).
producer: Producer | None = None

#: The horse's tracing (a ``middleware.otel.HorseTracing``), or None (off): the
#: horse's one test per job (``runtime/horse/main.py``).
horse_tracing: Any = None

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
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise OtelUnavailable(
            "FUSIONWORKER_OTEL=on needs the OpenTelemetry packages: "
            "pip install 'fusionworker[otel]'") from exc


def _version() -> str:
    from .. import __version__  # cheap: the package imports its public names lazily

    return __version__


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
        from ..exceptions import InvalidFunction
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
            except Exception:  # telemetry never fails an enqueue
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


