"""Job functions for the fork server's remembered resolutions (tests/runtime/test_forkserver.py):
importing :mod:`tests.rebinding_patch` rebinds :func:`which` here."""

from __future__ import annotations


def which() -> str:
    return "original"
