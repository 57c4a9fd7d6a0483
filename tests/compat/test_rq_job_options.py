"""RQ's enqueue options that are features here: ``result_ttl`` / ``failure_ttl`` (how
long this job's record is kept once it ended), on real Redis and a real worker."""

from __future__ import annotations

import pytest

from fusionworker.core.job import JobStatus
from tests import jobs


def test_result_ttl_of_the_job_wins_over_the_setting(queue, burst):
    q = queue()
    kept = q.enqueue(jobs.add, 1, 2, result_ttl=-1)
    short = q.enqueue(jobs.add, 2, 3, result_ttl=40)
    gone = q.enqueue(jobs.add, 3, 4, result_ttl=0)
    plain = q.enqueue(jobs.add, 4, 5)
    assert (kept.result_ttl, short.result_ttl, plain.result_ttl) == (-1, 40, None)
    burst()
    r = q.connection
    assert r.ttl(q.qkeys.job(kept.id)) == -1              # never expires
    assert 30 < r.ttl(q.qkeys.job(short.id)) <= 40        # its own, not the setting's 500
    assert not r.exists(q.qkeys.job(gone.id))             # not kept at all
    assert 400 < r.ttl(q.qkeys.job(plain.id)) <= 500      # the setting
    assert q.fetch_job(kept.id).result == 3
    assert q.fetch_job(short.id).result_ttl == 40


def test_failure_ttl_of_the_job_wins_over_the_setting(queue, burst):
    q = queue()
    kept = q.enqueue(jobs.boom, failure_ttl=-1)
    short = q.enqueue(jobs.boom, failure_ttl=60)
    plain = q.enqueue(jobs.boom)
    burst()
    r = q.connection
    for job in (kept, short, plain):
        assert q.fetch_job(job.id).status == JobStatus.FAILED
    assert r.ttl(q.qkeys.job(kept.id)) == -1
    assert 50 < r.ttl(q.qkeys.job(short.id)) <= 60
    assert r.ttl(q.qkeys.job(plain.id)) > 600_000         # FUSIONWORKER_FAILED_TTL, a week


@pytest.mark.parametrize(("option", "value"), [
    ("result_ttl", -2), ("result_ttl", 1.5), ("result_ttl", "1 h"), ("result_ttl", True),
    ("failure_ttl", 0), ("failure_ttl", -5),
])
def test_a_bad_ttl_is_refused_before_anything_is_written(queue, option, value):
    q = queue()
    with pytest.raises(ValueError, match=option):
        q.enqueue(jobs.add, 1, 2, **{option: value})
    assert not q.connection.keys(q.qkeys.match_all)


def test_ttls_from_job_defaults_and_enqueue_call(queue, burst):
    q = queue()
    job = q.enqueue_call(jobs.add, [1, 1], result_ttl=-1, failure_ttl=30)
    stored = q.fetch_job(job.id)
    assert (stored.result_ttl, stored.failure_ttl) == (-1, 30)
    burst()
    assert q.connection.ttl(q.qkeys.job(job.id)) == -1


def test_a_job_not_started_within_its_ttl_is_canceled_as_expired(queue, burst):
    import time

    from fusionworker.core.job import FailureReason
    from fusionworker.exceptions import JobCanceled

    q = queue()
    late = q.enqueue(jobs.add, 1, 2, ttl=0.3, group="g")
    behind = q.enqueue(jobs.add, 5, 5, group="g")          # waits on the group
    fresh = q.enqueue(jobs.add, 2, 2, ttl=60)
    # counted from when it is due (not from the enqueue: it would be over before it is
    # due); 4.3 s of it left for the burst worker to start under a loaded machine
    delayed = q.enqueue_in(5.0, jobs.add, 3, 3, ttl=4.5)
    assert (late.ttl, fresh.ttl) == (0.3, 60.0)
    time.sleep(5.2)
    burst()
    gone = q.fetch_job(late.id)
    assert gone.status == JobStatus.CANCELED and gone.failure_reason == FailureReason.EXPIRED
    assert gone.result is None and gone.started_at is None and gone.attempts == 0
    assert q.connection.zscore(q.qkeys.canceled, late.id) is not None
    with pytest.raises(JobCanceled):
        late.wait(timeout=1)
    for job, value in ((fresh, 4), (behind, 10), (delayed, 6)):
        assert q.fetch_job(job.id).result == value          # ran: the group moved on


@pytest.mark.parametrize("value", [0, -2, float("nan"), "1 hour", True])
def test_a_bad_ttl_is_refused(queue, value):
    q = queue()
    with pytest.raises(ValueError, match="ttl"):
        q.enqueue(jobs.add, 1, 2, ttl=value)
    assert q.count == 0
    assert q.enqueue(jobs.add, 1, 2, ttl=-1).ttl is None     # RQ's "no limit"


def test_job_defaults_take_the_new_options(r, settings):
    from tests.compat import rq_jobs

    handle = rq_jobs.decorated_hello.options(connection=r, settings=settings, ttl=30,
                                             result_ttl=-1, failure_ttl=90)
    job = handle.enqueue()
    assert (job.ttl, job.result_ttl, job.failure_ttl) == (30.0, -1, 90)


def test_at_front_runs_before_every_pending_job_of_its_priority(queue, burst):
    q = queue()
    order = [q.enqueue(jobs.add, n, 0) for n in range(3)]
    urgent = q.enqueue(jobs.add, 10, 0, at_front=True)
    first = q.enqueue(jobs.add, 20, 0, at_front=True)       # the latest front job is first
    high = q.enqueue(jobs.add, 30, 0, priority=1)
    low_front = q.enqueue(jobs.add, 40, 0, priority=-1, at_front=True)
    bulk = q.enqueue_many([q.prepare(jobs.add, 50, 0, at_front=True),
                           q.prepare(jobs.add, 60, 0)])
    assert q.job_ids() == [high.id, bulk[0].id, first.id, urgent.id,
                           *[j.id for j in order], bulk[1].id, low_front.id]
    assert "at_front" not in q.connection.hgetall(q.qkeys.job(urgent.id))
    with pytest.raises(TypeError, match="at_front"):
        q.enqueue(jobs.add, 1, 1, at_front="yes")
    burst()
    done = [q.fetch_job(j.id) for j in (high, bulk[0], first, urgent, order[0])]
    starts = [j.started_at for j in done]
    assert starts == sorted(starts) and all(j.status == JobStatus.FINISHED for j in done)


def test_retry_policy_of_rq_sets_the_retries_and_their_delays(queue, burst, settings):
    import time

    from fusionworker import Retry

    q = queue()
    job = q.enqueue(jobs.boom, retry=Retry(max=3, interval=[0, 40, 60]))
    assert (job.max_retries, job.retry_intervals) == (3, [0.0, 40.0, 60.0])
    burst(settings=settings.replace(retryable=("builtins.ValueError",)))
    stored = q.fetch_job(job.id)   # retry 1 at once (interval 0), retry 2 waits 40 s
    assert stored.status == JobStatus.SCHEDULED and stored.attempts == 2
    assert 39 < stored.scheduled_for - time.time() <= 40.5
    one = q.enqueue(jobs.add, 1, 1, retry=Retry(max=2, interval=5))
    assert (one.max_retries, one.retry_intervals) == (2, [5.0])
    plain = q.enqueue(jobs.add, 1, 1, retry=Retry(max=1))
    assert (plain.max_retries, plain.retry_intervals) == (1, [0.0])   # at once, as RQ


def test_retry_the_exception_keeps_its_meaning():
    from fusionworker import Retry

    raised = Retry("busy", 5)
    assert (str(raised), raised.delay, raised.max) == ("busy", 5, None)


@pytest.mark.parametrize(("retry", "error"), [
    (3, TypeError), ("Retry(3)", TypeError), ("policy", TypeError),
    ({"max": 1, "interval": [-1]}, ValueError), ({"max": 1, "interval": []}, ValueError),
    ({"max": 1, "interval": float("inf")}, ValueError),
])
def test_a_bad_retry_policy_is_refused(queue, retry, error):
    from fusionworker import Retry

    if retry == "Retry(3)":
        retry = Retry(3)              # RQ's positional max: here it is the message
    elif isinstance(retry, dict):
        retry = Retry(**retry)
    q = queue()
    with pytest.raises(error, match="[Rr]etry|max_retries"):
        q.enqueue(jobs.add, 1, 2, retry=retry)
    with pytest.raises(TypeError, match="not both"):
        q.enqueue(jobs.add, 1, 2, retry=Retry(max=1), max_retries=2)
    assert q.count == 0


def test_a_decorated_function_takes_a_retry_policy(r, settings):
    from fusionworker import Retry
    from tests.compat import rq_jobs

    handle = rq_jobs.decorated_hello.options(connection=r, settings=settings,
                                             retry=Retry(max=2, interval=[1, 2]))
    job = handle.enqueue()
    assert (job.max_retries, job.retry_intervals) == (2, [1.0, 2.0])


def test_at_front_jobs_count_in_their_own_priority_band(queue):
    q = queue()
    q.enqueue(jobs.add, 1, 1, priority=9)
    q.enqueue(jobs.add, 1, 1, priority=9, at_front=True)
    q.enqueue(jobs.add, 1, 1, priority=-1, at_front=True)
    q.enqueue(jobs.add, 1, 1, priority=10, at_front=True)
    assert q.stats()["bands"] == {"high": 1, "normal": 2, "low": 1}


def test_finished_and_failed_jobs_past_the_retention_are_not_listed(queue, burst):
    import time

    q = queue()
    old, new = q.enqueue(jobs.add, 1, 1), q.enqueue(jobs.add, 2, 2)
    bad = q.enqueue(jobs.boom)
    burst()
    r = q.connection
    # as Redis holds it when the record expired and no prune ran since
    r.zadd(q.qkeys.finished, {old.id: time.time() - 600})             # result_ttl is 500
    r.zadd(q.qkeys.failed, {bad.id: time.time() - 700_000})           # failed_ttl a week
    assert q.job_ids("finished") == [new.id] and q.job_ids("failed") == []
    assert (q.stats()["finished"], q.stats()["failed"]) == (1, 0)


def test_ttl_expires_on_a_queue_with_a_concurrency_cap_too(queue, burst):
    import time

    q = queue()
    q.set_max_active(5)               # the claim's full path (not the plain one)
    late = q.enqueue(jobs.add, 1, 2, ttl=0.2)
    fresh = q.enqueue(jobs.add, 2, 2)
    time.sleep(0.4)
    burst()
    assert q.fetch_job(late.id).status == JobStatus.CANCELED
    assert q.fetch_job(fresh.id).result == 4


def test_on_success_and_on_failure_are_enqueued_once_with_the_job_id(queue, work, r):
    q = queue()
    ok = q.enqueue(jobs.add, 1, 2, on_success=jobs.echo, on_failure="tests.jobs:echo",
                   result_ttl=0)
    bad = q.enqueue(jobs.boom, on_success=jobs.echo, on_failure=jobs.echo)
    assert (q.fetch_job(bad.id).on_success, bad.on_failure) == ("tests.jobs:echo",) * 2
    work()
    success = q.fetch_job(f"{ok.id}:on_success")       # the job itself is not kept
    failure = q.fetch_job(f"{bad.id}:on_failure")
    assert success.status == JobStatus.FINISHED and success.result == {"args": [ok.id], "kwargs": {}}
    assert failure.status == JobStatus.FINISHED and failure.result == {"args": [bad.id], "kwargs": {}}
    assert q.fetch_job(f"{ok.id}:on_failure") is None
    assert q.fetch_job(f"{bad.id}:on_success") is None
    assert sorted(q.job_ids("finished")) == sorted([success.id, failure.id])
    assert r.llen(q.qkeys.outbox) == 0


def test_a_callback_that_is_not_allowed_is_refused_before_anything_is_written(queue):
    from fusionworker.exceptions import FunctionNotAllowed

    q = queue()
    with pytest.raises(FunctionNotAllowed):
        q.enqueue(jobs.add, 1, 2, on_success="os:system")
    assert not q.connection.keys(q.qkeys.match_all)


def test_an_rq_style_callback_is_refused_at_enqueue_naming_the_signature(queue):
    """RQ calls ``on_success(job, connection, result)``; here a callback gets the job id:
    one that cannot take a single argument is refused before anything is written, not
    failed once the job ran. One that can (``*args``, a default) is kept."""
    q = queue()
    for option in ("on_success", "on_failure", "on_stopped"):
        with pytest.raises(ValueError, match=rf"{option}=tests.jobs:rq_style_callback\(job, "
                           r"connection, result.*one argument, the job id"):
            q.enqueue(jobs.add, 1, 2, **{option: jobs.rq_style_callback})
    with pytest.raises(ValueError, match="one argument, the job id"):   # named, module loaded
        q.enqueue(jobs.add, 1, 2, on_success="tests.jobs:rq_style_callback")
    assert not q.connection.keys(q.qkeys.match_all)
    kept = q.enqueue(jobs.add, 1, 2, on_success=jobs.echo, on_failure="tests.jobs:echo")
    assert kept.get_status() == "queued"
    # an adapter made with functools.wraps of an RQ-style one is named as that one, and a
    # worker would call that one by the name: refused, naming it
    with pytest.raises(ValueError, match=r"on_success=tests.jobs:rq_style_callback\(job"):
        q.enqueue(jobs.add, 1, 2, on_success=jobs.adapted_callback)


def test_rq_objects_and_spellings_are_refused_naming_the_fix(queue):
    """What an RQ user's code still holds after the imports were changed: each refused
    before anything is written, with the fusionworker spelling to use."""
    rq = pytest.importorskip("rq")
    from fusionworker.core.config import ConfigError
    from fusionworker.exceptions import FunctionNotAllowed, FusionWorkerError, InvalidFunction

    q = queue()
    with pytest.raises(TypeError, match=r"is RQ's Retry: use fusionworker's"):
        q.enqueue("tests.jobs:noop", retry=rq.Retry(max=2, interval=[1, 2]))
    with pytest.raises(ConfigError, match="hard time limit"):
        q.enqueue("tests.jobs:noop", job_timeout=-1)
    with pytest.raises(FusionWorkerError, match="hard time limit"):
        q.enqueue("tests.jobs:noop", job_timeout=-1)
    with pytest.raises(InvalidFunction, match=r"RQ's Callback: pass the function itself"):
        q.enqueue("tests.jobs:noop", on_success=rq.Callback(print))
    with pytest.raises(FunctionNotAllowed, match=r"did you mean 'tests.jobs:noop'"):
        q.enqueue("tests.jobs.noop")
    assert q.count == 0
