"""The browser of the real-browser tests: one headless Chromium per test process (an
xdist worker starts it once, for every browser test it runs; a start took 4-10 s of the
setup of each module's first test under the parallel suite), put back to a fresh
state before each test (Debian's chromium + chromium-driver); a test that asks for it
is skipped when there is none."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.web_support import browser_missing, fresh_state


@pytest.fixture(scope="session")
def _chromium() -> Iterator[Any]:
    missing = browser_missing()
    if missing is not None:
        pytest.skip(f"no browser: {missing}")
    from tests.web_support import chromium

    with chromium() as d:
        yield d


@pytest.fixture
def driver(_chromium: Any) -> Any:
    """The process's Chromium with nothing of an earlier test left: a blank page, no
    cookies, no storage, the default window size and no emulated media."""
    fresh_state(_chromium)
    return _chromium
