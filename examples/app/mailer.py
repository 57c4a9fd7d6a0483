"""A library-style module of the example app: its function is registered with
``register()`` where the queue is set up (docs/api.md), not decorated."""

from __future__ import annotations


def send(to: str, subject: str) -> str:
    return f"mailed {subject!r} to {to}"
