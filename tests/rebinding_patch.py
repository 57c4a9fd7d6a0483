"""Importing this module rebinds ``tests.rebinding_jobs.which`` (an import side effect a
fork server that remembers resolved functions must see)."""

from __future__ import annotations

from tests import rebinding_jobs


def which() -> str:
    return "patched"


def noop() -> None:
    return None


rebinding_jobs.which = which
