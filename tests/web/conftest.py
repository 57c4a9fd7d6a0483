"""The browser of the real-browser tests: one headless Chromium per test module
(Debian's chromium + chromium-driver); a module that asks for it is skipped when
there is none."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.web_support import browser_missing


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    missing = browser_missing()
    if missing is not None:
        pytest.skip(f"no browser: {missing}")
    from tests.web_support import chromium

    with chromium() as d:
        yield d
