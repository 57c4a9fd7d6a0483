"""Celery's task options at ``@job(...)``, ``.options(...)`` and ``q.enqueue``: each one
with an equivalent is taken as it, or refused in one line naming the equivalent."""

from __future__ import annotations

import pytest

from fusionworker.core.registry import JobFunction
from tests import jobs


@pytest.mark.parametrize(("given", "taken"), [
    ({"time_limit": 30}, {"timeout": 30}),
    ({"job_timeout": 30}, {"timeout": 30}),
    ({"default_retry_delay": 5}, {"retry_delay": 5}),
    ({"autoretry_for": (KeyError,)}, {"retry_on": (KeyError,)}),
    ({"ignore_result": True}, {"result_ttl": 0}),
    ({"acks_late": True, "max_retries": 2}, {"max_retries": 2}),
    ({"reject_on_worker_lost": True}, {}),
])
def test_celery_options_with_an_equivalent_are_taken(given, taken):
    assert JobFunction(jobs.add, **given).default_options == taken
    assert JobFunction(jobs.add).options(**given).default_options == taken


@pytest.mark.parametrize(("given", "named"), [
    ({"bind": True}, "current_job()"),
    ({"soft_time_limit": 10}, "timeout="),
    ({"acks_late": False}, "lease"),
    ({"countdown": 5}, "enqueue_in("),
    ({"eta": 5}, "enqueue_at("),
    ({"rate_limit": "10/s"}, "set-rate-limit"),
    ({"expires": 60}, "ttl="),
    ({"ignore_result": False}, "result_ttl=0"),
    ({"time_limit": 3, "timeout": 4}, "not both"),
    ({"link": "app:next"}, "on_success="),
    ({"link_error": "app:alert"}, "on_failure= (a function"),
])
def test_celery_options_without_one_are_refused_naming_the_way(given, named):
    for make in (lambda: JobFunction(jobs.add, **given),
                 lambda: JobFunction(jobs.add).options(**given)):
        with pytest.raises(TypeError) as caught:
            make()
        assert named in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("decorator", "call", "taken"), [
    ({"timeout": 10}, {"time_limit": 5}, {"timeout": 5}),
    ({"time_limit": 10}, {"timeout": 5}, {"timeout": 5}),
    ({"retry_on": (KeyError,)}, {"autoretry_for": (ValueError,)}, {"retry_on": (ValueError,)}),
    ({"autoretry_for": (KeyError,)}, {"autoretry_for": (ValueError,)},
     {"retry_on": (ValueError,)}),
    ({"retry_delay": 1, "max_retries": 2}, {"default_retry_delay": 3},
     {"retry_delay": 3, "max_retries": 2}),
])
def test_a_call_overrides_the_decorators_option_whichever_name_either_used(
        decorator, call, taken, queue):
    """``@job(timeout=10)`` then ``.options(time_limit=5)`` (or ``apply_async(...,
    time_limit=5)``) is a per-call override, as ``.options(timeout=5)`` is: it said
    "give timeout= or time_limit=, not both", though the call gave one."""
    handle = JobFunction(jobs.add, **decorator)
    assert handle.options(**call).default_options == taken
    q = queue("celery_over")
    job = JobFunction(jobs.add, queue=q, **decorator).apply_async((1, 2), **call)
    if "timeout" in taken:
        assert job.timeout == taken["timeout"]
    if "retry_delay" in taken:
        assert job.retry_delay == taken["retry_delay"]
    with pytest.raises(TypeError, match="not both"):      # one call giving both still is
        handle.options(timeout=3, time_limit=4)


def test_enqueue_takes_celery_names_too(queue, work):
    q = queue()
    job = q.enqueue(jobs.add, 1, 2, ignore_result=True, default_retry_delay=7, acks_late=True)
    assert (job.result_ttl, job.retry_delay, job.kwargs) == (0, 7.0, {})
    work()
    assert not q.connection.exists(q.qkeys.job(job.id))        # not kept: result_ttl=0


def test_apply_async_is_celerys_call(queue, work, r):
    """``apply_async(args, kwargs, countdown=, eta=, task_id=, queue=, priority=)`` as
    Celery's users write it; ``delay(countdown=)`` names ``enqueue_in`` at once."""
    from datetime import UTC, datetime, timedelta

    q = queue("celery_aa")
    handle = JobFunction(jobs.add, queue=q)
    now = handle.apply_async((1, 2), task_id="aa-1", priority=5)
    assert (now.id, now.args, now.priority, now.status) == ("aa-1", [1, 2], 5, "queued")
    later = handle.apply_async([3], {"b": 4}, countdown=60)
    assert (later.status, later.args, later.kwargs) == ("scheduled", [3], {"b": 4})
    at = datetime.now(UTC) + timedelta(minutes=5)
    dated = handle.apply_async((5, 6), eta=at)
    assert dated.status == "scheduled" and abs(dated.scheduled_for - at.timestamp()) < 1
    work("celery_aa")
    assert q.fetch_job("aa-1").result == 3
    with pytest.raises(TypeError, match="not both"):
        handle.apply_async((1, 2), countdown=1, eta=at)
    for bad, says in (({"args": "ab"}, "args= is a list or tuple, not a str"),
                      ({"kwargs": [("a", 1)]}, "kwargs= is a dict, not a list"),
                      ({"countdown": "10"}, "countdown= is a number of seconds"),
                      ({"countdown": True}, "countdown= is a number of seconds"),
                      ({"eta": 5}, "eta= is a datetime")):
        with pytest.raises(TypeError, match=says):
            handle.apply_async(**bad)
    with pytest.raises(TypeError, match="soft_time_limit.*timeout="):
        handle.apply_async((1, 2), soft_time_limit=3)
    with pytest.raises(TypeError, match=r"no parameter 'countdown': use add\.enqueue_in\("):
        handle.delay(1, 2, countdown=5)


def test_a_priority_out_of_range_is_refused_at_the_decorator():
    from fusionworker.exceptions import PriorityOutOfRange

    with pytest.raises(PriorityOutOfRange, match=r"priority 5000 out of range"):
        JobFunction(jobs.add, priority=5000)
    with pytest.raises(PriorityOutOfRange):
        JobFunction(jobs.add).options(priority=-2000)


def test_waiting_on_a_canceled_job_says_it_was_canceled(queue):
    from fusionworker.exceptions import JobCanceled

    q = queue()
    job = q.enqueue(jobs.add, 1, 2)
    q.cancel(job.id)
    with pytest.raises(JobCanceled) as caught:
        job.wait(5)
    assert str(caught.value) == (f"job {job.id} (tests.jobs:add) canceled: canceled on "
                                 "request (job cancel)")


def test_waiting_on_a_job_kept_nowhere_says_why(queue, work):
    """``ignore_result=True`` (result_ttl=0): the ended job is not kept, so a wait on it
    finds nothing; the error says why, not only that it is gone."""
    from fusionworker.exceptions import NoSuchJob

    q = queue()
    job = q.enqueue(jobs.add, 1, 2, ignore_result=True)
    work()
    with pytest.raises(NoSuchJob, match=r"no longer exists: its result_ttl is 0 \(Celery's "
                                        r"ignore_result=True\)"):
        job.wait(5)
