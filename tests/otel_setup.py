"""A ``FUSIONWORKER_OTEL_SETUP`` for the tests: the real SDK, spans to a JSON-lines file.

Horses are forked processes (forked by the fork server, a fresh interpreter),
so an in-memory exporter of the test process cannot see their spans. This
set-up runs in the fork server: a real ``TracerProvider`` with a real
``BatchSpanProcessor``, whose exporter appends each span (the SDK's own
``to_json``) as one line to ``$FW_TEST_OTEL_SPANS``. The horse flushes it
exactly as it flushes an OTLP exporter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class JsonLinesSpanExporter(SpanExporter):
    """Append spans to a file, one JSON object per line (one ``write`` per batch)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = "".join(json.dumps(json.loads(span.to_json(indent=None))) + "\n"
                       for span in spans).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS


def setup() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "fusionworker-test"}))
    provider.add_span_processor(BatchSpanProcessor(
        JsonLinesSpanExporter(os.environ["FW_TEST_OTEL_SPANS"])))
    trace.set_tracer_provider(provider)


def read_spans(path: str) -> list[dict]:
    """The spans written so far (an absent file: none)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []
