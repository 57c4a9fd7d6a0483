"""Prometheus metrics: per worker (``worker --metrics-port P``) and per deployment (``exporter``).

* :class:`MetricsMiddleware` lives in the worker parent with its own
  ``CollectorRegistry``. Counters and histograms are updated in the
  ``after_claim``/``after_finish`` hooks (an in-memory increment, no I/O);
  state, throttle and event-sink gauges are read when Prometheus scrapes.
  ``/metrics`` is served by ``prometheus_client.start_http_server`` from a
  daemon thread of the parent. Horses are forked from the main thread, so
  the server thread does not exist in them.
* :class:`QueueCollector` reads queue depths (by priority band), registries,
  pause flags and worker states from Redis on each scrape; ``run_worker.py
  exporter --port P`` serves it. One exporter per deployment is enough.

Metric names (all prefixed ``fusionworker_``) are listed in ``docs/observability.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..core import admin
from ..core.hooks import Middleware, OutcomeReason
from ..core.job import STATES, WorkerState
from ..core.queue import BANDS, known_queues
from ..core.queue_read import stats_many
from ..events.middleware import EventsMiddleware
from ..events.sinks import EventSink
from .governor import RESOURCES, blocking_resources

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.connection import RedisClient
    from ..core.hooks import Outcome, WorkerContext
    from ..core.job import Job

log = logging.getLogger("fusionworker.metrics")   # the name before the layers (logging configs use it)


#: Histogram buckets, seconds: jobs of milliseconds up to an hour.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
                    900, 3600, float("inf"))
WAIT_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400,
                float("inf"))


def band_of(priority: int) -> str:
    """Name of the priority band (``queue.BANDS``) that ``priority`` falls in."""
    for name, low, high in BANDS:
        if low <= priority <= high:
            return name
    return "normal"


# --------------------------------------------------------------------------- worker


class _WorkerCollector(Collector):
    """Gauges read from the worker object at scrape time (another thread: reads only)."""

    def __init__(self, middleware: MetricsMiddleware) -> None:
        self.middleware = middleware

    def collect(self) -> Iterator[Any]:
        worker = self.middleware.worker
        state = GaugeMetricFamily("fusionworker_worker_state",
                                  "1 for the state the worker is in, 0 for the others",
                                  labels=["state"])
        throttled = GaugeMetricFamily("fusionworker_worker_throttled",
                                      "1 while the resource governor holds claims back")
        current = getattr(worker, "state", None)
        for each in STATES:
            if each != WorkerState.SILENT:     # a reader's word for others, never its own
                state.add_metric([each], 1.0 if each == current else 0.0)
        reason = getattr(worker, "hold_reason", None)
        throttled.add_metric([], 1.0 if reason else 0.0)
        by = GaugeMetricFamily("fusionworker_worker_throttled_by",
                               "1 for each resource the governor holds claims back for",
                               labels=["resource"])
        blocking = blocking_resources(reason)
        for resource in RESOURCES:
            by.add_metric([resource], 1.0 if resource in blocking else 0.0)
        yield state
        yield throttled
        yield by
        sink = self.middleware.sink
        if sink is not None:
            stats = sink.stats()
            buffered = GaugeMetricFamily("fusionworker_event_sink_buffered",
                                         "Events waiting in the event sink's buffer")
            buffered.add_metric([], stats["buffered"])
            yield buffered
            for name, key, text in (
                ("fusionworker_event_sink_dropped", "dropped",
                 "Events dropped because the event sink's buffer was full"),
                ("fusionworker_event_sink_delivered", "delivered", "Events delivered"),
                ("fusionworker_event_sink_errors", "errors", "Failed delivery attempts"),
            ):
                family = CounterMetricFamily(name, text)
                family.add_metric([], stats[key])
                yield family


class MetricsMiddleware(Middleware):
    """Counts jobs and serves ``/metrics`` from the worker parent on ``port`` (0: no server).

    Counters (label ``queue``): ``jobs_processed`` every attempt that ended
    and was recorded, ``jobs_completed``, ``jobs_failed`` (final failures,
    time-outs included), ``jobs_retried``, ``jobs_timed_out`` (attempts ended
    by the time limit), ``jobs_requeued`` (cold shutdown). A port already in
    use is logged and the worker goes on without the endpoint.
    """

    def __init__(self, port: int = 0, *, addr: str = "127.0.0.1",
                 registry: CollectorRegistry | None = None) -> None:
        self.port = port
        self.addr = addr
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.worker: Any = None
        self.sink: EventSink | None = None
        self._server: Any = None
        r = self.registry

        def jobs(what: str, text: str) -> Counter:
            return Counter(f"fusionworker_jobs_{what}", text, ["queue"], registry=r)
        self.processed = jobs("processed", "Job attempts that ended")
        self.completed = jobs("completed", "Jobs that finished successfully")
        self.failed = jobs("failed", "Jobs that failed for good (time-outs included)")
        self.retried = jobs("retried", "Attempts that failed and were scheduled for a retry")
        self.timed_out = jobs("timed_out", "Attempts killed by the time limit")
        self.requeued = jobs("requeued", "Jobs given back at cold shutdown")
        self.duration = Histogram("fusionworker_job_duration_seconds",
                                  "Processing time of an attempt (fork to outcome)", ["queue"],
                                  buckets=DURATION_BUCKETS, registry=r)
        self.wait = Histogram("fusionworker_job_wait_seconds",
                              "Time from enqueue (or due time) to claim", ["queue", "band"],
                              buckets=WAIT_BUCKETS, registry=r)
        r.register(_WorkerCollector(self))

    def on_start(self, worker: WorkerContext) -> None:
        self.worker = worker
        for mw in worker.middleware:
            if isinstance(mw, EventsMiddleware):
                self.sink = mw.sink
        if not self.port:
            return
        try:
            self._server, _thread = start_http_server(self.port, addr=self.addr,
                                                      registry=self.registry)
        except OSError as exc:
            log.error("Worker %s: cannot serve metrics on %s:%d (%s); going on without them",
                      worker.name, self.addr, self.port, exc)
            return
        log.info("Worker %s: metrics on http://%s:%d/metrics", worker.name, self.addr, self.port)

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        wait = job.wait_time
        if wait is not None:
            self.wait.labels(job.queue, band_of(job.priority)).observe(wait)

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        if not outcome.recorded:
            return
        queue = job.queue
        self.processed.labels(queue).inc()
        self.duration.labels(queue).observe(outcome.duration)
        if outcome.reason == OutcomeReason.TIMEOUT:
            self.timed_out.labels(queue).inc()
        counter = {"finished": self.completed, "failed": self.failed, "retry": self.retried,
                   "requeued": self.requeued}.get(outcome.status)
        if counter is not None:
            counter.labels(queue).inc()

    def on_stop(self, worker: WorkerContext) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


# --------------------------------------------------------------------------- deployment


#: the gauges ``fusionworker_queue_<name>`` (label ``queue``) that are one figure of a
#: queue's ``stats()``: name, help, the figure
QUEUE_FIGURES: tuple[tuple[str, str, Callable[[dict[str, Any]], float]], ...] = (
    ("started", "Jobs running", lambda s: s["started"]),
    ("scheduled", "Jobs waiting for their time (delayed or retrying)", lambda s: s["scheduled"]),
    ("failed", "Jobs in the failed registry", lambda s: s["failed"]),
    ("finished", "Finished jobs still kept (result TTL)", lambda s: s["finished"]),
    ("paused", "1 when the queue is paused", lambda s: 1 if s["paused"] else 0),
    ("oldest_job_age_seconds", "Age of the oldest pending job",
     lambda s: s["oldest_age"] or 0.0),
    ("awaiting_compute", "Jobs ready now that no free slot of the workers serving the queue "
     "will take (seed 003's awaitingCompute)", lambda s: s["awaiting_compute"]),
    ("held", "Jobs held (job hold)", lambda s: s["held"]),
)


class QueueCollector(Collector):
    """Queue-level gauges read from Redis at each scrape (``exporter``).

    ``queues`` limits the report to those names (default: every known queue).
    A Redis error yields ``fusionworker_exporter_redis_up 0`` and nothing else,
    so Prometheus records the outage instead of a failed scrape.
    """

    def __init__(self, connection: RedisClient, settings: Settings, queues: Sequence[str] | None = None) -> None:
        self.connection = connection
        self.settings = settings
        self.queues = list(queues) if queues else None

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily("fusionworker_exporter_redis_up", "1 when Redis answered the scrape")
        try:
            families = list(self._families())
        except redis.RedisError as exc:
            log.warning("Exporter: Redis error during scrape: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self) -> Iterable[Any]:
        names = self.queues or known_queues(self.connection, self.settings.prefix)
        pending = GaugeMetricFamily("fusionworker_queue_pending",
                                    "Jobs waiting in a queue, by priority band",
                                    labels=["queue", "band"])
        figures = {name: GaugeMetricFamily(f"fusionworker_queue_{name}", text, labels=["queue"])
                   for name, text, _ in QUEUE_FIGURES}
        rate_limit = GaugeMetricFamily("fusionworker_queue_rate_limit_per_second",
                                       "Rate limit of a queue, job starts per second "
                                       "(queues with a limit only)", labels=["queue"])
        rate_held = CounterMetricFamily("fusionworker_queue_rate_limited_seconds",
                                        "Seconds a queue had jobs ready but was held by its "
                                        "rate limit", labels=["queue"])
        group_limit = GaugeMetricFamily(
            "fusionworker_queue_group_rate_limit_per_second",
            "Rate limit of every group of a queue, job starts per second per group "
            "(queues with set-rate-limit --per-group only)", labels=["queue"])
        group_held = CounterMetricFamily(
            "fusionworker_queue_group_rate_limited_seconds",
            "Seconds jobs were set aside until their group's next rate-limit slot "
            "(summed over jobs)", labels=["queue"])
        heartbeats = admin.workers(self.connection, self.settings.prefix)
        for stats in stats_many(self.connection, self.settings, list(names), heartbeats):
            name = stats["queue"]
            if "unreadable" in stats:    # a key of another type: this queue's series only
                log.warning("Exporter: queue %s left out of this scrape: %s", name,
                            stats["unreadable"])
                continue
            _add_rates(name, stats, rate_limit, rate_held, group_limit, group_held)
            for band, _, _ in BANDS:
                pending.add_metric([name, band], stats["bands"].get(band, 0))
            for figure, _, read in QUEUE_FIGURES:
                figures[figure].add_metric([name], read(stats))
        workers, suspended = self._worker_families(heartbeats)
        return [pending, *figures.values(), workers, suspended,
                rate_limit, rate_held, group_limit, group_held]

    def _worker_families(self, heartbeats: list[dict[str, str]]) -> tuple[Any, Any]:
        """The live workers by state (those serving the exported queues, when named) and
        whether every worker is suspended."""
        workers = GaugeMetricFamily("fusionworker_workers", "Live workers by state",
                                    labels=["state"])
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        wanted = set(self.queues or ())
        now = admin.server_time(self.connection)     # as `info` ages the heartbeats
        for info in heartbeats:
            served = set(filter(None, (info.get("queues") or "").split(",")))
            if wanted and not wanted & served:
                continue
            state = admin.shown_state(info, now) or WorkerState.STARTED
            counts[state] = counts.get(state, 0) + 1
        for state, count in counts.items():
            workers.add_metric([state], count)
        suspended = GaugeMetricFamily("fusionworker_suspended",
                                      "1 while every worker is suspended")
        suspended.add_metric([], 1 if admin.is_suspended(self.connection, self.settings.prefix)
                             else 0)
        return workers, suspended


def _add_rates(name: str, stats: dict[str, Any], rate_limit: Any, rate_held: Any,
               group_limit: Any, group_held: Any) -> None:
    """A queue's rate limit, its group rate limit and the seconds each held it (queues
    without one add nothing)."""
    if stats.get("rate_limit"):
        rate = stats["rate_limit"]
        rate_limit.add_metric([name], rate["limit"] / rate["window"])
        rate_held.add_metric([name], rate["held_seconds"])
    if stats.get("group_rate_limit"):
        grate = stats["group_rate_limit"]
        if grate["every"]:
            group_limit.add_metric([name], grate["every"]["limit"] / grate["every"]["window"])
        group_held.add_metric([name], grate["held_seconds"])


def exporter_registry(connection: RedisClient, settings: Settings,
                      queues: Sequence[str] | None = None) -> CollectorRegistry:
    """A registry holding only a :class:`QueueCollector` (no process metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(connection, settings, queues))
    return registry
