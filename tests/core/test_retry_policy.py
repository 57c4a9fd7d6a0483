"""The retry policy given at enqueue is its own class (core/retry.py), apart from the
exception a job raises; RQ's spelling ``Retry(max=...)`` carries one."""

from __future__ import annotations

import pytest

from fusionworker import Retry, RetryPolicy


def test_the_policy_is_no_exception_and_rqs_spelling_carries_one():
    assert not issubclass(RetryPolicy, BaseException)
    assert Retry(max=3, interval=[1, 2]).policy == RetryPolicy(max=3, interval=[1, 2])
    assert Retry("busy", 5).policy is None          # the exception a job raises
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(max=0)


def test_both_spellings_enqueue_the_same_retries(queue, r):
    q = queue("policy")
    given = q.enqueue("tests.jobs:noop", retry=RetryPolicy(max=2, interval=[1, 2.5]))
    rq = q.enqueue("tests.jobs:noop", retry=Retry(max=2, interval=[1, 2.5]))
    for job in (given, rq):
        stored = q.fetch_job(job.id)
        assert stored is not None
        assert (stored.max_retries, stored.retry_intervals, stored.retry_on) == (
            2, [1.0, 2.5], ["*"])
    with pytest.raises(TypeError, match="not both"):
        q.enqueue("tests.jobs:noop", retry=RetryPolicy(max=1), max_retries=3)


def test_a_retry_delay_a_record_holds_past_any_date_waits_ten_years_at_most(queue, r, burst,
                                                                            prefix):
    """``retry_intervals`` of ``[1e308]`` (written by another program: enqueue refuses
    it) schedules the retry ten years ahead, not at a score no page can show."""
    from fusionworker.core.keys import Keys
    from fusionworker.runtime.recorder import RETRY_DELAY_MAX, bounded_delay

    assert [bounded_delay(d) for d in (float("inf"), float("nan"), -5, "x", 2.5)] == [
        RETRY_DELAY_MAX, 0.0, 0.0, 0.0, 2.5]
    q = queue("policy")
    far = q.enqueue("tests.jobs:boom", retry=RetryPolicy(max=2, interval=[1]))
    r.hset(Keys(prefix).queue("policy").job(far.id), "retry_intervals", "[1e308]")
    before = r.time()[0]
    burst(queues=["policy"])
    scheduled = Keys(prefix).queue("policy").scheduled
    due = r.zscore(scheduled, far.id)
    assert due is not None and before + RETRY_DELAY_MAX - 60 <= due <= before + RETRY_DELAY_MAX + 60
    assert q.fetch_job(far.id).status == "scheduled"
