"""The workers table lists every job a worker with several slots runs, not the first."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from tests.waiting import wait_for
from tests.web.test_web_pages import client, get  # noqa: F401 - the fixture


def test_a_two_slot_worker_shows_both_job_ids(client, processes, queue, redis_url, r,  # noqa: F811
                                              settings):
    q = queue("default")
    key = f"{settings.prefix}:pids"
    processes.worker("-q", "default", "--concurrency", "2")
    jobs = [q.enqueue("tests.jobs:pid_then_sleep", redis_url, key, 600) for _ in range(2)]
    wait_for(lambda: r.llen(key) == 2, what="both jobs running")
    page = wait_for(lambda: (lambda text: text if all(j.id in text for j in jobs) else None)(
        get(client, "/workers").text), what="both ids on the workers page")
    assert all(f'href="/jobs/{j.id}' in page for j in jobs)
