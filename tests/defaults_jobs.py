"""``@job`` functions with their own options, enqueued by name in the tests of
registered defaults (a test drops this module from ``sys.modules`` first, so the
producer's import of it is part of what is tested)."""

from __future__ import annotations

from fusionworker import job
from fusionworker.exceptions import Retry


@job(max_retries=3, retry_delay=0.05)
def always_retries() -> None:
    raise Retry("again", delay=0.05)


@job(timeout=600, priority=7)
def long_allowed(value: int) -> int:
    return value


@job
def no_options(value: int) -> int:
    return value
