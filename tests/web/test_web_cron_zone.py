"""The scheduled page shows a cron entry's next run in the entry's own time zone, named:
a Europe/Berlin schedule's 03:00 reads 03:00 Europe/Berlin, not an unlabelled UTC time."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

pytest.importorskip("starlette")

from fusionworker.middleware import cron
from tests.web.test_web_pages import client, get  # noqa: F401 - the fixture


def test_cron_next_run_is_in_the_entrys_zone_and_labelled(client, r, settings):  # noqa: F811
    entry = cron.register(r, settings, "berlin", "0 3 * * *", "tests.jobs:noop",
                          timezone="Europe/Berlin")
    page = get(client, "/scheduled").text
    shown = datetime.fromtimestamp(entry.next_run, ZoneInfo("Europe/Berlin"))
    assert f"{shown:%Y-%m-%d} 03:00:00 Europe/Berlin" in page
    row = re.search(r'data-label="next">([^<]*)<', page)
    assert row is not None and row.group(1).endswith("Europe/Berlin")
