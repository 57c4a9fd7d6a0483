"""Sample jobs for ``run_worker.py demo`` (a stand-in for SMS, e-mail and webhook work)."""

from __future__ import annotations

import random
import time
from typing import Any

from ..exceptions import Retry


def send_sms(number: str, body: str) -> dict[str, str]:
    time.sleep(random.uniform(0.05, 0.3))
    return {"to": number, "status": "delivered"}


def send_email(to: str, subject: str) -> str:
    time.sleep(random.uniform(0.1, 0.4))
    return f"queued for {to}: {subject}"


def call_webhook(url: str, attempt_ok: int = 1) -> str:
    time.sleep(0.1)
    return f"POST {url} -> 200"


def flaky_webhook(url: str) -> str:
    """Fails at random, 7 times in 10, with a retryable error (retried after 1 s)."""
    if random.random() < 0.7:
        raise Retry(f"{url} answered 503", delay=1)
    return f"POST {url} -> 200"


def broken_template(name: str) -> None:
    raise KeyError(f"template {name!r} not found")


def stuck_provider(seconds: float) -> None:
    time.sleep(seconds)


def demo_prefix(prefix: str) -> str:
    """The demo's own key prefix, under the deployment's (``fw`` -> ``fw:demo``): its
    jobs and workers never mix with a real deployment's, nor with an earlier demo's
    (:func:`clear`)."""
    return f"{prefix}:demo"


def clear(connection: Any, prefix: str) -> int:
    """Delete every key under ``prefix`` (an earlier demo run's); returns how many."""
    pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + ":*"
    deleted = 0
    batch: list[Any] = []
    for key in connection.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += int(connection.delete(*batch))
            batch = []
    if batch:
        deleted += int(connection.delete(*batch))
    return deleted


# Default deny: these are the functions a demo worker may run. Its workers import this
# module (FUSIONWORKER_IMPORTS=fusionworker.ops.demo), which registers them.
from ..core.registry import register  # noqa: E402

HANDLES = {f.__name__: register(f) for f in (
    send_sms, send_email, call_webhook, flaky_webhook, broken_template, stuck_provider)}
