"""Issue 30, item 4: a job id, a cron entry's or a worker's name that the dashboard and
the API could not address by URL (a '/', a '\\', '.' or '..') is refused where it is
created, in one line, with nothing written; ids that can be addressed still work."""

from __future__ import annotations

import pytest

from fusionworker import Worker
from fusionworker.middleware import cron

UNADDRESSABLE = ["a/b", "/lead", "trail/", "a\\b", ".", ".."]


def keys_of(r, prefix):
    return sorted(r.scan_iter(match=f"{prefix}:*"))


@pytest.mark.parametrize("job_id", UNADDRESSABLE)
def test_a_job_id_that_cannot_be_addressed_is_refused_with_nothing_written(
        queue, r, prefix, job_id):
    q = queue("default")
    with pytest.raises(ValueError, match="cannot be addressed by URL") as refused:
        q.enqueue_call("tests.jobs:add", [1, 2], job_id=job_id)
    assert "\n" not in str(refused.value) and repr(job_id) in str(refused.value)
    with pytest.raises(ValueError, match="cannot be addressed by URL"):
        q.prepare_call("tests.jobs:add", [1, 2], job_id=job_id)   # enqueue_many's input
    assert keys_of(r, prefix) == []


@pytest.mark.parametrize("job_id", ["order:42", "a.b", "x..y", "user@host", "v1.2-rc_3", "é"])
def test_ids_that_can_be_addressed_are_still_taken(queue, job_id):
    job = queue("default").enqueue_call("tests.jobs:add", [1, 2], job_id=job_id)
    assert job.id == job_id and queue("default").fetch_job(job_id) is not None


@pytest.mark.parametrize("name", UNADDRESSABLE)
def test_a_cron_name_that_cannot_be_addressed_is_refused_with_nothing_written(
        r, settings, prefix, name):
    with pytest.raises(cron.InvalidSchedule, match="cannot be addressed by URL"):
        cron.register(r, settings, name, "* * * * *", "tests.jobs:noop")
    assert keys_of(r, prefix) == []
    entry = cron.register(r, settings, "reports.daily", "* * * * *", "tests.jobs:noop")
    assert entry.name == "reports.daily"


@pytest.mark.parametrize("name", [*UNADDRESSABLE, "two\nlines", "", "w" * 201])
def test_a_worker_name_that_cannot_be_addressed_or_logged_is_refused(r, settings, name):
    with pytest.raises(ValueError, match="worker name") as refused:
        Worker("default", r, settings=settings, name=name)
    assert "\n" not in str(refused.value)
