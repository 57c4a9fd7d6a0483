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
