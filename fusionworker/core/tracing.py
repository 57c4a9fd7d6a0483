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

import fcntl
import functools
import importlib
import logging
import mmap
import os
import struct
import threading
import time
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


def set_horse_tracing(value: Any) -> None:
    """Set (or clear, with None) :data:`horse_tracing`: the OpenTelemetry middleware
    owns it, in the worker and in the fork server."""
    global horse_tracing
    horse_tracing = value


def owns_meter_provider(provider: Any) -> bool:
    """Is ``provider`` the MeterProvider :func:`configure_sdk` made (shut down by
    its owner rather than flushed)?"""
    return provider is not None and provider is _owned_meter_provider


class OtelUnavailable(RuntimeError):
    """OpenTelemetry was asked for but its packages are not installed."""


def _require() -> None:
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise OtelUnavailable(
            "FUSIONWORKER_OTEL=on needs the OpenTelemetry packages: "
            "pip install 'fusionworker[otel]' (from a checkout: pip install -e '.[otel]')"
        ) from exc


def _version() -> str:
    from .. import __version__  # cheap: the package imports its public names lazily

    return __version__


def band_of(priority: int) -> str:
    """Priority band name (``queue.BANDS``): high, normal or low."""
    if priority >= 10:
        return "high"
    return "normal" if priority >= 0 else "low"


# --------------------------------------------------------------------------- set-up


def configure_sdk(setup: str = "", *, with_metrics: bool = True, log_state: str = "") -> None:
    """Install global SDK providers in this process (once).

    ``setup`` (module:function): call it instead. Otherwise the exporters are
    the ones the standard variables name, resolved by the SDK's own
    configuration (``opentelemetry.sdk._configuration``: the
    ``opentelemetry_*_exporter`` entry points): ``OTEL_TRACES_EXPORTER`` and
    ``OTEL_METRICS_EXPORTER`` (``otlp``, the default; ``console``; ``none``;
    a comma list), each exporter configured by its own variables
    (``OTEL_EXPORTER_OTLP_*``), with ``OTEL_EXPORTER_OTLP_PROTOCOL`` defaulting
    to ``http/protobuf`` (the exporter the ``[otel]`` extra installs); sampler,
    id generator, ``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``, the resource
    variables and ``OTEL_SDK_DISABLED`` as the SDK reads them.
    ``with_metrics=False`` (the fork server): no meter provider at all, and
    with no metric exporter (``none``) none either: a provider that never
    exports is not installed.

    Providers an application installed already are kept. The exporters'
    complaints (a dead collector) are logged at most once a minute
    (:func:`limit_export_logs`; ``log_state``: its shared state, see there).
    """
    global _configured, _owned_meter_provider
    with _lock:
        if _configured:
            return
        _configured = True
        _require()
        limit_export_logs(log_state)
        if setup:
            module, _, name = setup.partition(":")
            if not module or not name:
                raise ValueError(f"FUSIONWORKER_OTEL_SETUP={setup!r}: expected module:function")
            getattr(importlib.import_module(module), name)()
            return
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return
        _owned_meter_provider = _install_providers(with_metrics)


def _exporter_names(signal: str) -> list[str]:
    """The entry-point names of ``OTEL_<SIGNAL>_EXPORTER`` (unset: ``otlp``), by the SDK."""
    from opentelemetry.sdk import _configuration as sdk_config

    if os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip():
        return list(sdk_config._get_exporter_names(signal))  # type: ignore[arg-type]
    return [sdk_config._get_exporter_entry_point("otlp", signal)]  # type: ignore[arg-type]


def _install_providers(with_metrics: bool) -> Any:
    """configure_sdk's built-in set-up; returns the MeterProvider it installed, or None."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk import _configuration as sdk_config
    from opentelemetry.sdk.resources import Resource

    # the specification's default protocol, and the exporter the [otel] extra installs
    # (the SDK would pick gRPC for "otlp"); the signal-specific variables still win
    os.environ.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    span_exporters, metric_exporters, _ = sdk_config._import_exporters(
        _exporter_names("traces"), _exporter_names("metrics") if with_metrics else [], [])
    attrs = {}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""):
        attrs["service.name"] = "fusionworker"
    resource = Resource.create(attrs)
    if span_exporters and type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":
        sdk_config._init_tracing(
            exporters=span_exporters, resource=resource,
            id_generator=sdk_config._import_id_generator(sdk_config._get_id_generator()),
            sampler=sdk_config._import_sampler(sdk_config._get_sampler()))
    if not metric_exporters or type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    readers = [cls() if issubclass(cls, MetricReader) else PeriodicExportingMetricReader(cls())
               for cls in metric_exporters.values()]
    # shut down by the worker (OtelMiddleware.on_stop, bounded), not again at exit:
    # a second shutdown is the SDK's "shutdown can only be called once"
    provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    metrics.set_meter_provider(provider)
    return provider


#: the shared state of limit_export_logs in this process, and its path for other processes
_log_page: Any = None
_log_page_path = ""

EXPORT_LOG_INTERVAL = 60.0


class ExportLogLimit(logging.Handler):
    """On the ``opentelemetry`` logger: the SDK's and exporters' records go to the
    ``fusionworker.otel`` logger (the worker's format), those about exporting
    (a dead or refusing collector: every batch of every process complains) at most
    one per ``interval`` for the worker, its fork server and every horse together.

    ``page``: 16 shared bytes (when the last line went out; how many were held back
    since), a ``MAP_SHARED`` mapping that forked processes keep sharing; ``fd``: its
    file, locked (``lockf``: per process, so horses exclude each other too) while a
    record is weighed, or -1 (an anonymous page: no lock).
    """

    def __init__(self, page: Any, interval: float = EXPORT_LOG_INTERVAL, fd: int = -1) -> None:
        super().__init__(logging.WARNING)
        self.page, self.interval, self.fd = page, interval, fd

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.name.startswith("opentelemetry.exporter") or "export" in message.lower():
                message = self._weigh(message)
                if not message:
                    return
            log.log(record.levelno, "%s", message)
        except Exception:  # noqa: BLE001 - a log line must never raise into the SDK
            self.handleError(record)

    def _weigh(self, message: str) -> str:
        """The line to log for an export complaint, or "" (held back: counted)."""
        if self.fd >= 0:
            fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            last, held = struct.unpack_from("dq", self.page, 0)
            now = time.time()
            if now - last < self.interval:
                struct.pack_into("dq", self.page, 0, last, held + 1)
                return ""
            struct.pack_into("dq", self.page, 0, now, 0)
        finally:
            if self.fd >= 0:
                fcntl.lockf(self.fd, fcntl.LOCK_UN)
        note = f" ({held} more held back)" if held else ""
        return (f"OpenTelemetry export: {message}{note}; "
                f"at most one such line per {self.interval:g} s")


def _shared_page(path: str) -> tuple[Any, int]:
    """16 bytes shared with the processes forked from here, and their file (kept open):
    ``path`` (another process's page, ``/proc/<pid>/fd/<fd>``) when it opens, else a new
    one (a memfd, whose path :func:`limit_export_logs` records for the fork server)."""
    global _log_page_path
    if path:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            return mmap.mmap(fd, 16), fd
        except (OSError, ValueError) as exc:
            log.debug("OpenTelemetry log limit: %s not shared (%s)", path, exc)
    try:
        fd = os.memfd_create("fusionworker-otel-log")
        os.ftruncate(fd, 16)
        _log_page_path = f"/proc/{os.getpid()}/fd/{fd}"
        return mmap.mmap(fd, 16), fd
    except (OSError, AttributeError):
        return mmap.mmap(-1, 16), -1   # anonymous, still shared with forked children


def limit_export_logs(log_state: str = "", interval: float = EXPORT_LOG_INTERVAL) -> None:
    """Route the ``opentelemetry`` loggers through :class:`ExportLogLimit` (once per process).

    ``log_state``: the path :func:`log_state_path` gave in another process (the worker),
    so that its fork server and horses share one budget with it.
    """
    global _log_page
    if _log_page is not None:
        return
    _log_page, fd = _shared_page(log_state)
    otel_log = logging.getLogger("opentelemetry")
    otel_log.addHandler(ExportLogLimit(_log_page, interval, fd))
    otel_log.propagate = False


def log_state_path() -> str:
    """Where another process finds this process's export-log budget ("" when none)."""
    return _log_page_path


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
        #: the global providers are looked at on the first enqueue (an application may
        #: install them after its first Queue()); given ones are the caller's business
        self.check_providers = tracer_provider is None and meter_provider is None

    def enqueue(self, call: Callable[..., Any], queue: Any, func: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        """``Queue.enqueue_call`` inside a PRODUCER span (exceptions recorded by the span)."""
        from ..exceptions import InvalidFunction
        from .functions import func_ref

        if self.check_providers:
            self.check_providers = False
            _say_if_no_sdk()
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


_said_no_sdk = False


def _say_if_no_sdk() -> None:
    """Log once per process when the global providers are the API's no-op ones."""
    global _said_no_sdk
    from opentelemetry import metrics, trace

    missing = [kind for kind, provider in (("tracer", trace.get_tracer_provider()),
                                           ("meter", metrics.get_meter_provider()))
               if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider",
                                              "_ProxyMeterProvider", "NoOpMeterProvider")]
    if missing and not _said_no_sdk:
        _said_no_sdk = True
        log.warning(
            "FUSIONWORKER_OTEL=on, but this process has no OpenTelemetry SDK %s provider: "
            "its enqueues are not %s. Install the application's providers, or call "
            "fusionworker.otel.configure_sdk() to make them from the OTEL_* variables",
            " or ".join(missing),
            "traced or counted" if len(missing) == 2 else
            ("traced" if missing == ["tracer"] else "counted"))


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


def instrument(tracer_provider: Any = None, meter_provider: Any = None, *,
               queue_class: Any) -> Producer:
    """Trace and count every ``enqueue`` of ``queue_class`` (``Queue``, which hands
    itself in: ``fusionworker.otel.instrument`` is the public face) in this process.

    Without providers the global ones are used (those the application configured;
    with none, the OpenTelemetry API's no-op ones). Called by ``Queue`` itself when
    ``FUSIONWORKER_OTEL=on``. Returns the instrumentation.
    """
    global producer
    _require()
    made = Producer(tracer_provider, meter_provider)
    with _lock:
        producer = made
        if "_fw_plain" not in queue_class.__dict__:
            queue_class._fw_plain = queue_class.enqueue_call
            queue_class.enqueue_call = traced_enqueue(queue_class.enqueue_call)
    return made


def uninstrument(queue_class: Any) -> None:
    """Stop tracing/counting enqueues (back to the plain ``queue_class.enqueue_call``)."""
    global producer
    with _lock:
        producer = None
        plain = queue_class.__dict__.get("_fw_plain")
        if plain is not None:
            queue_class.enqueue_call = plain
            del queue_class._fw_plain


def ensure_producer(queue_class: Any) -> None:
    """``FUSIONWORKER_OTEL=on`` in a producer: instrument once with the global providers."""
    if producer is None:
        instrument(queue_class=queue_class)


#: the standard OpenTelemetry variables that say an exporter is wanted
OTEL_EXPORTER_VARIABLES = ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
                           "OTEL_EXPORTER_OTLP_ENDPOINT")


def otel_hint(otel_on: bool) -> str | None:
    """What to say at start when the standard ``OTEL_*`` exporter variables are set but
    FUSIONWORKER_OTEL is off (they alone turn nothing on), or None."""
    if otel_on:
        return None
    named = [n for n in OTEL_EXPORTER_VARIABLES
             if os.environ.get(n, "").strip().lower() not in ("", "none")]
    if not named:
        return None
    return (f"{', '.join(named)} set, but FUSIONWORKER_OTEL is off: no trace or metric is "
            "exported; set FUSIONWORKER_OTEL=on (with the [otel] extra installed)")
