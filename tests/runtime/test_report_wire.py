"""The report a horse writes (protocol.HorseReport): the plain success is written by
hand, and must be the very bytes ``json.dumps`` writes, whatever text the result holds;
every other report goes through ``json.dumps``; the worker reads each back."""

from __future__ import annotations

import json

import pytest

from fusionworker.runtime.protocol import HorseReport

TEXTS = ["null", '{"a":1}', '"quoted" and \\ backslash', "é ü 日本", "\u2028\u2029",
         "\x00\x01\x1f\x7f", "\ud800 lone surrogate", "a" * 70000, ""]


@pytest.mark.parametrize("text", TEXTS)
def test_a_plain_success_is_the_bytes_json_writes(text: str) -> None:
    report = HorseReport(ok=True, reason="ok", result=text)
    assert report.encode() == json.dumps(report.as_dict()).encode()
    back = HorseReport.decode(report.encode())
    assert back is not None and back.ok and back.result == text


@pytest.mark.parametrize("report", [
    HorseReport(ok=True, reason="ok", result="1", progress={"progress": 0.5}),
    HorseReport(ok=True, reason="ok", result=None),
    HorseReport(ok=False, reason="exception", error_type="E", error_message="m\n",
                traceback="t", retryable=True, retry_delay=1.5),
])
def test_every_other_report_is_json_dumps_of_its_dict(report: HorseReport) -> None:
    assert report.encode() == json.dumps(report.as_dict()).encode()
    back = HorseReport.decode(report.encode())
    assert back is not None and back.as_dict() == report.as_dict()
