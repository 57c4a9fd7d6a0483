"""OpenTelemetry configured by the standard variables (``OTEL_TRACES_EXPORTER``,
``OTEL_METRICS_EXPORTER``, ``OTEL_*``), with the real SDK in real worker processes.

Each scenario runs in processes of its own: the SDK's global providers can be
set once per process, so the test process never configures them.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from tests.conftest import ROOT, worker_env
from tests.waiting import wait_for


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60)


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporters printed (indented, one after another)."""
    decoder, out, pos = json.JSONDecoder(), [], 0
    while (start := text.find("{", pos)) >= 0:
        obj, pos = decoder.raw_decode(text, start)
        out.append(obj)
    return out


def test_console_exporters_print_the_job_span_and_the_metrics(r, settings, queue):
    job = queue("default").enqueue("tests.jobs:add", 2, 3)
    env = worker_env(settings, FUSIONWORKER_OTEL="on", OTEL_TRACES_EXPORTER="console",
                     OTEL_METRICS_EXPORTER="console", OTEL_SERVICE_NAME="console-test")
    proc = subprocess.run([sys.executable, "run_worker.py", "worker", "-q", "default", "--burst"],
                          env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    objects = json_objects(proc.stdout)
    [span] = [o for o in objects if o.get("name") == "process default"]
    assert span["kind"] == "SpanKind.CONSUMER"
    assert span["attributes"]["messaging.message.id"] == job.id
    assert span["resource"]["attributes"]["service.name"] == "console-test"
    metrics = {m["name"]: m for o in objects for rm in o.get("resource_metrics", ())
               for sm in rm["scope_metrics"] for m in sm["metrics"]}
    assert {"queue.schedule.total", "fusionworker.job.outcomes", "queue.depth"} <= set(metrics)
    [point] = metrics["queue.schedule.total"]["data"]["data_points"]
    assert point["value"] == 1
    assert "shutdown can only be called once" not in proc.stderr
    assert "OpenTelemetry" not in proc.stderr      # nothing to complain about


def test_a_dead_collector_is_logged_once_and_the_worker_stops_cleanly(r, settings, queue,
                                                                      processes):
    """OTLP to a closed loopback port: every horse's span export and every metric export
    (every 100 ms) fails; the worker, its fork server and its horses say so in one line."""
    q = queue("default")
    jobs = [q.enqueue("tests.jobs:add", i, 1) for i in range(4)]
    proc = processes.worker("-q", "default", env={
        "FUSIONWORKER_OTEL": "on",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5", "OTEL_METRIC_EXPORT_INTERVAL": "100",
        "OTEL_BSP_SCHEDULE_DELAY": "50", "FUSIONWORKER_OTEL_FLUSH_TIMEOUT": "1"})
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in jobs), timeout=30)
    # several metric exports fail meanwhile (each retries for the exporter's timeout)
    wait_for(lambda: "OpenTelemetry export" in processes.output(proc), timeout=10)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    out = processes.output(proc)
    lines = [line for line in out.splitlines() if re.search("export", line, re.I)]
    assert len(lines) == 1, out
    assert "Connection refused" in lines[0] or "Failed to export" in lines[0], lines
    assert "at most one such line per 60 s" in lines[0]
    assert "shutdown can only be called once" not in out
    assert "stopped (4 finished, 0 failed)" in out


CONFIGURE = """
import sys
import time
from opentelemetry import metrics, trace
from fusionworker import otel
otel.configure_sdk(with_metrics=sys.argv[1] == "metrics")
print(type(trace.get_tracer_provider()).__name__, type(metrics.get_meter_provider()).__name__)
"""


@pytest.mark.parametrize(("env", "with_metrics", "expected"), [
    ({}, "metrics", "TracerProvider MeterProvider"),
    ({}, "traces", "TracerProvider _ProxyMeterProvider"),       # the fork server
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, "metrics",
     "ProxyTracerProvider _ProxyMeterProvider"),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}, "metrics",
     "TracerProvider _ProxyMeterProvider"),
    ({"OTEL_SDK_DISABLED": "true"}, "metrics", "ProxyTracerProvider _ProxyMeterProvider"),
])
def test_the_variables_decide_which_providers_are_installed(settings, env, with_metrics,
                                                            expected):
    """No provider without an exporter: a meter provider that never exports is not made."""
    proc = subprocess.run([sys.executable, "-c", CONFIGURE, with_metrics],
                          env=worker_env(settings, **env), cwd=str(ROOT), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == expected.split()


def test_an_unknown_exporter_name_stops_the_worker_with_the_sdk_error(settings):
    proc = subprocess.run(
        [sys.executable, "run_worker.py", "worker", "-q", "default", "--burst"],
        env=worker_env(settings, FUSIONWORKER_OTEL="on", OTEL_TRACES_EXPORTER="zipkin-nope"),
        cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "zipkin-nope" in proc.stderr


PRODUCER = """
from fusionworker import Queue
q = Queue("default")
for i in range(3):
    q.enqueue("tests.jobs:add", i, 1)
print("enqueued")
"""


def test_a_producer_without_sdk_providers_says_so_once(settings):
    proc = run_python(PRODUCER, worker_env(settings, FUSIONWORKER_OTEL="on"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "enqueued"
    said = [line for line in proc.stderr.splitlines() if "no OpenTelemetry SDK" in line]
    assert len(said) == 1, proc.stderr
    assert "tracer or meter provider" in said[0] and "configure_sdk()" in said[0]


def test_a_producer_with_providers_says_nothing(settings):
    code = "from fusionworker import otel; otel.configure_sdk()\n" + PRODUCER
    proc = run_python(code, worker_env(settings, FUSIONWORKER_OTEL="on",
                                       OTEL_TRACES_EXPORTER="console",
                                       OTEL_METRICS_EXPORTER="console"))
    assert proc.returncode == 0, proc.stderr
    assert "no OpenTelemetry SDK" not in proc.stderr
    spans = [o for o in json_objects(proc.stdout.replace("enqueued", ""))
             if o.get("name") == "send default"]
    assert len(spans) == 3


def test_the_export_log_budget_is_shared_by_forked_processes(caplog):
    """Four forked processes and this one complain 5 times each at once: one line; after
    the interval the next line says how many were held back."""
    import logging
    import os

    from fusionworker.core.tracing import ExportLogLimit, _shared_page

    page, fd = _shared_page("")
    limit = ExportLogLimit(page, interval=0.5, fd=fd)
    source = logging.getLogger("opentelemetry.exporter.otlp.test-only")
    source.propagate = False
    source.addHandler(limit)
    out_r, out_w = os.pipe()
    try:
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:        # a horse: its lines go to the pipe
                os.close(out_r)
                handler = logging.StreamHandler(os.fdopen(out_w, "w", buffering=1))
                logging.getLogger("fusionworker.otel").addHandler(handler)
                for _ in range(5):
                    source.warning("Failed to export span batch code: 503")
                os._exit(0)
            children.append(pid)
        os.close(out_w)
        caplog.set_level(logging.WARNING, logger="fusionworker.otel")
        for _ in range(5):
            source.warning("Failed to export metrics batch code: 503")
        for pid in children:
            os.waitpid(pid, 0)
        with os.fdopen(out_r) as fh:
            from_children = [line for line in fh.read().splitlines() if line]
        lines = from_children + [m for m in caplog.messages if "OpenTelemetry export" in m]
        assert len(lines) == 1, lines
        time.sleep(0.55)
        source.warning("Failed to export metrics batch code: 503")
        assert caplog.messages[-1].startswith(
            "OpenTelemetry export: Failed to export metrics batch code: 503 (24 more held back)")
        source.info("not about the collector")   # below WARNING: not weighed, not logged
        assert len([m for m in caplog.messages if "held back" in m]) == 1
    finally:
        source.removeHandler(limit)
        os.close(fd)
