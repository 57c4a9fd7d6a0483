"""The overview names each queue's rate limit: a rate-limited queue's workers show
"idle" while it holds them, and the row says why."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette")

from tests.web.test_web_pages import client, get  # noqa: F401 - the fixture


def test_the_overview_has_a_rate_column(client, queue):  # noqa: F811
    limited, free = queue("limited"), queue("free")
    limited.set_rate_limit("10/s")
    limited.enqueue("tests.jobs:add", 1, 2)
    free.enqueue("tests.jobs:add", 1, 2)
    page = get(client, "/").text
    assert "<th" in page and ">Rate</th>" in page
    row = re.search(r'<tr data-queue="limited">(.*?)</tr>', page, re.S).group(1)
    assert re.search(r'data-label="rate">10/s', row)
    other = re.search(r'<tr data-queue="free">(.*?)</tr>', page, re.S).group(1)
    assert re.search(r'data-label="rate">-<', other)
