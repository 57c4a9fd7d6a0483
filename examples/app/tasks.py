"""The example app's jobs: the README and docs/ use these, and the test suite
runs every code block of them against this file (tests/docs/).

Deterministic on purpose: an example gives the same result on every run.
"""

from __future__ import annotations

import time

from fusionworker import Retry, job


def provider_send(number: str, body: str) -> str:
    """Your SMS provider's client (a stand-in): "ok", or "busy" to be tried later."""
    return "ok"


@job(queue="sms", timeout=30, max_retries=3)
def send(number: str, body: str) -> str:
    if provider_send(number, body) == "busy":
        raise Retry("provider busy", delay=1)   # retried (counts against max_retries)
    return f"sent {body!r} to {number}"         # JSON, datetime, Decimal, UUID, bytes, set


@job
def cleanup() -> None:
    """Bare: the defaults of the settings (queue "default")."""


def sync(account: int) -> str:
    return f"account {account} synced"


def fetch(url: str) -> str:
    return f"<html>{url}</html>"


def render() -> str:
    return "report.pdf"


def notify() -> str:
    return "notified"


def import_row(row: dict[str, str]) -> str:
    from fusionworker import current_job

    job = current_job()                          # the running job (None outside one)
    if job is not None:
        job.meta["row"] = row.get("id", "")
    return row.get("id", "")


def report(batch_id: str) -> str:
    """A batch callback: gets the batch id (docs/workflows.md)."""
    return f"batch {batch_id} ended"


def done(batch_id: str) -> str:
    return f"batch {batch_id} done"


def all_ok(batch_id: str) -> str:
    return f"batch {batch_id}: every job finished"


def alert(batch_id: str) -> str:
    return f"batch {batch_id}: some jobs failed"


def digest() -> str:
    return "digest sent"


def export(report: str, seconds: float = 30.0) -> str:
    """A long job (the docs' "busy" workers)."""
    time.sleep(seconds)
    return f"{report} exported"


def fail(message: str) -> None:
    """Always fails (the docs' failed jobs)."""
    raise ValueError(message)


def save(user: object) -> None:
    """Takes a model: refused at enqueue (docs/api.md, UnsupportedType)."""
