"""Keywords of RQ and Celery at enqueue, ``@job`` defaults however a function is named,
and the enqueue input that used to be taken wrongly (a bound method, ``args="Bob"``,
``job_id=""``)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from fusionworker.core import options
from fusionworker.core.batch import Batch
from fusionworker.exceptions import InvalidFunction
from fusionworker.middleware import cron
from tests import jobs
from tests.cli.test_cli import cli  # noqa: F401 - the fixture
from tests.waiting import wait_for

DEFAULTS = "tests.defaults_jobs"


def _nothing_written(q) -> bool:
    return not q.connection.keys(q.qkeys.match_all)


@pytest.mark.parametrize("name", sorted(options.FOREIGN))
def test_an_rq_or_celery_keyword_is_refused_in_one_line_naming_the_equivalent(queue, name):
    q = queue()
    with pytest.raises(TypeError) as caught:
        q.enqueue(jobs.echo, "x", **{name: 1})
    message = str(caught.value)
    assert "\n" not in message and f"{name}=" in message
    assert options.FOREIGN[name] in message and "enqueue_call(" in message
    with pytest.raises(TypeError, match=f"{name}="):
        q.enqueue_in(5, jobs.echo, "x", **{name: 1})
    with pytest.raises(TypeError, match=f"{name}="):
        q.prepare(jobs.echo, "x", **{name: 1})
    assert _nothing_written(q)


def test_an_argument_named_like_an_rq_option_goes_through_enqueue_call(queue):
    q = queue()
    job = q.enqueue_call(jobs.echo, ["x"], {"description": "mine", "result_ttl": 5})
    stored = q.fetch_job(job.id)
    assert stored is not None and stored.kwargs == {"description": "mine", "result_ttl": 5}


@pytest.mark.parametrize("alias", ["job_timeout", "time_limit"])
def test_the_timeout_of_rq_and_celery_is_the_timeout(queue, alias):
    q = queue()
    job = q.enqueue(jobs.echo, "x", **{alias: 30})
    stored = q.fetch_job(job.id)
    assert stored is not None and stored.timeout == 30.0 and stored.kwargs == {}
    with pytest.raises(TypeError, match="not both"):
        q.enqueue(jobs.echo, "x", timeout=5, **{alias: 30})


def test_a_handle_refuses_an_option_that_is_no_parameter_of_its_function(queue):
    import tests.defaults_jobs as mod

    with pytest.raises(TypeError, match=r"no parameter 'job_timeout'.*long_allowed\.options"):
        mod.long_allowed.enqueue(1, job_timeout=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="no parameter 'priority'"):
        mod.long_allowed.enqueue_in(5, 1, priority=3)  # type: ignore[call-arg]


class Calc:
    def __init__(self, base: int) -> None:
        self.base = base

    def add(self, a: int, b: int) -> int:
        return self.base + a + b


def test_a_bound_method_is_refused_as_its_instance_would_be_lost(queue):
    q = queue()
    with pytest.raises(InvalidFunction, match="bound method"):
        q.enqueue(Calc(2).add, 1, 2)
    assert _nothing_written(q)


@pytest.mark.parametrize("args", ["Bob", b"Bob", {"a": 1}, 7])
def test_args_must_be_a_list_or_a_tuple(queue, args):
    q = queue()
    with pytest.raises(TypeError, match="args must be a list or a tuple"):
        q.enqueue_call(jobs.echo, args=args)
    assert _nothing_written(q)


def test_kwargs_must_be_a_dict(queue):
    q = queue()
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        q.enqueue_call(jobs.echo, ["x"], kwargs=[("body", "hi")])  # type: ignore[arg-type]
    assert _nothing_written(q)
    job = q.enqueue_call(jobs.echo, ("x",), {"body": "hi"})
    assert job.args == ["x"] and job.kwargs == {"body": "hi"}


def test_an_empty_job_id_is_refused_not_replaced(queue):
    q = queue()
    with pytest.raises(ValueError, match="must be a non-empty string"):
        q.enqueue(jobs.echo, "x", job_id="")
    assert _nothing_written(q)


@pytest.mark.parametrize("bad", ["two words", "line\nbreak", "tab\there", "bell\x07",
                                 "nbsp\u00a0id", " lead", "trail\n"])
def test_a_job_id_with_whitespace_or_control_characters_is_refused(queue, bad):
    q = queue()
    with pytest.raises(ValueError, match="whitespace or control characters"):
        q.enqueue(jobs.echo, "x", job_id=bad)
    assert _nothing_written(q)
    assert q.enqueue(jobs.echo, "x", job_id="order-42:ok_ü").id == "order-42:ok_ü"


def test_depends_on_a_dict_is_a_type_error_not_its_keys(queue):
    q = queue()
    parent = q.enqueue(jobs.echo, "p", job_id="id")      # a job whose id is the dict's key
    before = q.count
    with pytest.raises(TypeError, match="not a dict"):
        q.enqueue(jobs.echo, "x", depends_on={"id": parent.id})
    with pytest.raises(TypeError, match="depends_on takes"):
        q.enqueue(jobs.echo, "x", depends_on=42)
    assert q.count == before and len(q.deferred_job_registry) == 0


def test_job_options_apply_when_the_function_is_enqueued_by_name(
        queue, burst, fresh_defaults_module):
    q = queue()
    job = q.enqueue(f"{DEFAULTS}:always_retries")
    assert DEFAULTS in sys.modules           # imported by the producer's check
    stored = q.fetch_job(job.id)
    assert stored is not None and stored.max_retries == 3 and stored.retry_delay == 0.05

    def ended():   # a burst worker ends with the retry still scheduled: run it again
        burst()
        found = q.fetch_job(job.id)
        return found if found is not None and found.status == "failed" else None

    done = wait_for(ended, what="the job failed for good")
    assert done.attempts == 4      # 1 + the 3 retries of @job (the setting says 0)


def test_given_options_win_over_the_registered_ones(queue, fresh_defaults_module):
    q = queue()
    job = q.enqueue(f"{DEFAULTS}:long_allowed", 1)
    assert (job.timeout, job.priority, job.max_retries) == (600.0, 7, 0)
    job = q.enqueue(f"{DEFAULTS}:long_allowed", 1, timeout=5, priority=0)
    assert (job.timeout, job.priority) == (5.0, 0)
    job = q.enqueue(f"{DEFAULTS}:no_options", 1)
    assert (job.timeout, job.priority) == (q.settings.job_timeout, 0)


def test_batch_callbacks_and_cron_entries_take_the_registered_options(
        queue, r, settings, fresh_defaults_module):
    q = queue()
    batch = Batch(on_success=f"{DEFAULTS}:long_allowed", queue=q)
    fields = batch._callbacks["on_success"][1]
    assert dict(zip(fields[0::2], fields[1::2]))["timeout"] == "600.0"
    entry = cron.register(r, settings, "nightly", "0 3 * * *", f"{DEFAULTS}:always_retries",
                          queue=q.name)
    assert entry.max_retries == 3
    entry = cron.register(r, settings, "nightly", "0 3 * * *", f"{DEFAULTS}:always_retries",
                          queue=q.name, max_retries=1)
    assert entry.max_retries == 1


def test_cron_entries_from_the_cli_and_the_web_api_take_the_registered_priority(
        cli, r, settings, fresh_defaults_module):  # noqa: F811
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from fusionworker.web import create_app

    cli("cron", "add", "from-cli", "0 3 * * *", f"{DEFAULTS}:long_allowed", "1")
    assert cron.get_entry(r, settings, "from-cli").priority == 7       # @job(priority=7)
    cli("cron", "add", "own", "0 3 * * *", f"{DEFAULTS}:long_allowed", "1", "--priority", "2")
    assert cron.get_entry(r, settings, "own").priority == 2
    token = "t" * 32
    with TestClient(create_app(settings.replace(web_token=token), r)) as client:
        reply = client.post("/api/v1/cron", headers={"Authorization": f"Bearer {token}"},
                            json={"name": "from-web", "schedule": "0 3 * * *",
                                  "func": f"{DEFAULTS}:long_allowed", "args": [1]})
        assert reply.status_code == 201, reply.text
    assert cron.get_entry(r, settings, "from-web").priority == 7


def test_bulk_and_dependent_jobs_take_the_registered_options(queue, fresh_defaults_module):
    q = queue()
    first = q.enqueue(jobs.echo, "x")
    [bulk] = q.enqueue_many([q.prepare(f"{DEFAULTS}:long_allowed", 1)])
    after = q.enqueue(f"{DEFAULTS}:long_allowed", 2, depends_on=first)
    assert bulk.timeout == 600.0 and after.timeout == 600.0 and after.status == "deferred"


def test_a_naive_enqueue_at_is_local_time_as_rqs(queue):
    """RQ's idiom ``enqueue_at(datetime.now() + timedelta(minutes=5))`` runs in five
    minutes whatever the producer's time zone (it ran 9 hours late in Tokyo, at once in
    New York, when naive meant UTC); an aware datetime is what it says."""
    import os
    import time as _time
    from datetime import timedelta

    q = queue()
    before = os.environ.get("TZ")
    try:
        for zone in ("Asia/Tokyo", "America/New_York"):
            os.environ["TZ"] = zone
            _time.tzset()
            job = q.enqueue_at(datetime.now() + timedelta(minutes=5), "tests.jobs:noop")
            due = q.scheduled_job_registry.get_scheduled_time(job)
            assert job.status == "scheduled" and due is not None
            assert abs(due.timestamp() - (_time.time() + 300)) < 30, zone
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        _time.tzset()
    aware = q.enqueue_at(datetime.now(UTC) + timedelta(minutes=10), "tests.jobs:noop")
    due = q.scheduled_job_registry.get_scheduled_time(aware)
    assert due is not None and abs(due.timestamp() - (_time.time() + 600)) < 30


def test_description_and_meta_are_options_the_job_keeps(queue, burst):
    q = queue()
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    job = q.enqueue("tests.progress_jobs:context", description="nightly context",
                    meta={"source": "import", "when": when})
    assert job.description == "nightly context" and job.meta == {"source": "import",
                                                                  "when": when}
    stored = q.fetch_job(job.id)
    assert stored is not None and stored.description == "nightly context"
    assert stored.meta == {"source": "import", "when": when}
    burst()
    done = q.fetch_job(job.id)
    assert done is not None and done.status == "finished"
    assert done.result["meta"] == {"source": "import", "when": when}   # the job saw it


@pytest.mark.parametrize("bad, match", [
    (dict(description=7), "description must be a string"),
    (dict(description="x" * 2001), "at most 2000 characters, got 2001"),
    (dict(meta=["a"]), "meta must be a dict"),
    (dict(meta={1: "a"}), "string keys"),
    (dict(meta={"f": object()}), "meta"),
])
def test_a_bad_description_or_meta_is_refused_before_anything_is_written(queue, bad, match):
    q = queue()
    with pytest.raises((TypeError, ValueError), match=match):
        q.enqueue(jobs.echo, "x", **bad)
    assert _nothing_written(q)


@pytest.mark.parametrize("bad, name", [(dict(job_timeout="1 hour"), "timeout"),
                                       (dict(max_retries="many"), "max_retries"),
                                       (dict(retry_delay=[1]), "retry_delay")])
def test_an_option_that_is_no_number_is_named_in_the_error(queue, bad, name):
    q = queue()
    with pytest.raises((TypeError, ValueError), match=f"^{name} must be (a number|seconds)"):
        q.enqueue(jobs.echo, "x", **bad)
    assert _nothing_written(q)
