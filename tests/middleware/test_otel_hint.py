"""The standard ``OTEL_*`` exporter variables without FUSIONWORKER_OTEL turn nothing on: the
worker says so at start, naming what is missing."""

from __future__ import annotations

from tests.waiting import wait_for


def test_otel_variables_without_the_switch_are_named_at_start(processes, queue):
    q = queue()
    proc = processes.worker("-q", q.name, "--burst",
                            env={"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none",
                                 "FUSIONWORKER_OTEL": "off"})
    wait_for(lambda: proc.poll() is not None, what="the burst worker ended")
    out = processes.output(proc)
    assert "OTEL_TRACES_EXPORTER set, but FUSIONWORKER_OTEL is off" in out
    assert "OTEL_METRICS_EXPORTER" not in out          # "none" asks for nothing


def test_nothing_is_said_without_them(processes, queue):
    q = queue()
    proc = processes.worker("-q", q.name, "--burst", env={"OTEL_TRACES_EXPORTER": ""})
    wait_for(lambda: proc.poll() is not None, what="the burst worker ended")
    assert "FUSIONWORKER_OTEL is off" not in processes.output(proc)
