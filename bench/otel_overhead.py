#!/usr/bin/env python3
"""What OpenTelemetry costs an enqueue and a job: switched off (must be nothing) and on.

    python bench/otel_overhead.py [--main /path/to/other/checkout] [--rounds 5]
                                  [--enqueues 2000] [--jobs 300]

* micro: the code the off path adds — the setting's dict lookup per
  ``Queue()``, ``trace_fields()`` per enqueue, the ``tracing.horse_tracing`` test per
  job — timed with ``timeit`` against an empty call.
* enqueue: µs per ``Queue.enqueue`` (median of the rounds), this checkout
  with OpenTelemetry off and on (SDK, spans to a no-op exporter, metrics to
  an in-memory reader), and ``--main`` (a checkout without the feature) off.
* jobs: no-op jobs per second of a 1-process burst worker (forking, fork
  server), same three variants.

Each figure comes from a fresh interpreter per round; the variants alternate
within a round, so drift of the machine hits all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import timeit
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def null_setup() -> None:
    """FUSIONWORKER_OTEL_SETUP for the 'on' variant: real SDK, spans exported nowhere."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Null(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Null()))
    trace.set_tracer_provider(provider)


def child(kind: str, mode: str, n: int) -> float:
    import redis

    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue
    from fusionworker.worker import Worker

    prefix = f"bench-otel-{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    extra = {}
    middleware: list = []
    if mode == "on":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from fusionworker.middleware import otel

        null_setup()
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        otel.instrument(meter_provider=meter_provider)
        extra = {"otel": True, "otel_setup": "bench.otel_overhead:null_setup"}
    settings = load_settings(environ={}, redis_url=REDIS_URL, prefix=prefix,
                             allowed_modules=("bench",), **extra)
    if mode == "on":
        middleware = [otel.OtelMiddleware(settings, meter_provider=meter_provider)]
    q = Queue("bench", r, settings=settings, events=False)
    try:
        if kind == "enqueue":
            for _ in range(50):
                q.enqueue("bench.jobs:noop")
            start = time.perf_counter()
            for _ in range(n):
                q.enqueue("bench.jobs:noop")
            return (time.perf_counter() - start) / n * 1e6
        for _ in range(n):
            q.enqueue("bench.jobs:noop")
        worker = Worker("bench", r, settings=settings, burst=True, defaults=False,
                        middleware=middleware)
        start = time.perf_counter()
        worker.work()
        return n / (time.perf_counter() - start)
    finally:
        keys = list(r.scan_iter(f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            r.delete(*keys[i:i + 500])


def micro() -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from fusionworker.core import tracing
    from fusionworker.core.config import load_settings
    from fusionworker.middleware import otel

    settings = load_settings(environ={})
    n = 1_000_000

    def best(call) -> float:  # type: ignore[no-untyped-def]
        return min(timeit.repeat(call, number=n, repeat=5)) / n * 1e9

    empty = best(lambda: None)

    def check() -> None:
        horse_tracing = tracing.horse_tracing
        if horse_tracing is None:
            return

    return {"queue_init_setting_check_ns": best(lambda: settings.values.get("otel")) - empty,
            "trace_fields_call_ns": best(otel.trace_fields) - empty,
            "horse_check_ns": best(check) - empty}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--main", help="a checkout without the feature, for the 'main off' variant")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--enqueues", type=int, default=2000)
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._child:
        print(child(args._child[0], args._child[1], int(args._child[2])))
        return 0
    variants = [("this off", str(ROOT), "off"), ("this on", str(ROOT), "on")]
    if args.main:
        variants.insert(0, ("main off", args.main, "off"))
    out: dict[str, dict[str, list[float]]] = {"enqueue_us": {}, "jobs_per_s": {}}
    for rnd in range(args.rounds):
        order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
        for kind, n, key in (("enqueue", args.enqueues, "enqueue_us"),
                             ("jobs", args.jobs, "jobs_per_s")):
            for name, root, mode in order:
                env = {**os.environ, "PYTHONPATH": root}
                res = subprocess.run([sys.executable, __file__, "--_child", kind, mode, str(n)],
                                     env=env, cwd=str(ROOT), capture_output=True, text=True,
                                     check=True)
                out[key].setdefault(name, []).append(float(res.stdout.split()[-1]))
    summary = {key: {name: round(statistics.median(v), 2) for name, v in d.items()}
               for key, d in out.items()}
    summary["micro"] = {k: round(v, 1) for k, v in micro().items()}
    print(json.dumps({"median": summary, "rounds": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
