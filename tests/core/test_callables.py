"""Issue 30, item 5: default deny admits functions, not classes or methods; a job's
keyword argument may be named ``self``."""

from __future__ import annotations

import pytest

from fusionworker import FunctionNotAllowed
from fusionworker.core.functions import CALLABLES, resolve
from tests.callable_jobs import takes_self

NOT_FUNCTIONS = {
    "tests.callable_jobs:Shell": "a class",
    "tests.callable_jobs:Maker": "a class",
    "tests.callable_jobs:Maker.create": "a classmethod",
    "tests.callable_jobs:maker.method": "a method bound to an instance",
    "tests.callable_jobs:callable_object": "a callable Callable object",
}


def _keys(r, prefix):
    return sorted(r.scan_iter(match=f"{prefix}:*"))


@pytest.mark.parametrize("ref", sorted(NOT_FUNCTIONS))
def test_enqueue_refuses_what_is_not_a_function_and_writes_nothing(ref, queue, r, prefix):
    with pytest.raises(FunctionNotAllowed, match=f"is {NOT_FUNCTIONS[ref]}, not a function"):
        queue().enqueue(ref, 1)
    assert _keys(r, prefix) == []


def test_a_worker_refuses_a_popen_subclass_written_straight_into_redis(
        queue, burst, r, prefix, tmp_path):
    """The attack of the issue: the record names a Popen subclass of an allowed module
    with the arguments of a command. The worker fails it as refused; nothing runs."""
    marker = tmp_path / "ran"
    q = queue()
    decoy = q.enqueue("tests.jobs:add", 1, 2)
    for ref in NOT_FUNCTIONS:
        job = q.enqueue("tests.jobs:add", 1, 2)
        r.hset(q.qkeys.job(job.id), mapping={
            "func": ref, "args": f'[["sh", "-c", "touch {marker}"]]'})
    w = burst()
    assert (w.successful, w.failed) == (1, len(NOT_FUNCTIONS))
    assert not marker.exists()
    failed = [q.fetch_job(i) for i in r.zrange(q.qkeys.failed, 0, -1)]
    assert {j.failure_reason for j in failed} == {"refused"}
    assert all("not a function" in j.error_message for j in failed)
    assert q.fetch_job(decoy.id).result == 3


def test_functions_and_staticmethods_run_and_allow_callables_admits_the_rest(
        queue, burst, settings):
    q = queue()
    assert resolve("tests.callable_jobs:Maker.plain", ("tests",))(1) == 2
    job = q.enqueue("tests.callable_jobs:Maker.plain", 1)
    assert burst().successful == 1 and q.fetch_job(job.id).result == 2
    opened = settings.replace(allow_callables=True)
    from fusionworker.core.queue import Queue
    from fusionworker.core.registry import producer_allowed

    assert CALLABLES in producer_allowed(opened)
    q2 = Queue("default", q.connection, settings=opened)
    jobs = [q2.enqueue(ref, 5) for ref in ("tests.callable_jobs:Maker.create",
                                           "tests.callable_jobs:maker.method",
                                           "tests.callable_jobs:callable_object")]
    assert burst(settings=opened).successful == 3
    assert [q2.fetch_job(j.id).result for j in jobs] == [10, 15, 20]


def test_a_keyword_argument_named_self_works_with_job_functions(queue, burst):
    assert takes_self(self="me", other=1) == {"self": "me", "other": 1}
    q = queue()
    handle = takes_self.options(queue=q)
    first = handle.enqueue(self="a")
    second = handle.delay(self="b", other=2)
    third = handle.enqueue_in(0, self="c")
    fourth = q.enqueue("tests.callable_jobs:plain_self", self="d")
    fifth = q.enqueue_call("tests.callable_jobs:plain_self", kwargs={"self": "e"})
    prepared = q.prepare("tests.callable_jobs:plain_self", self="f")
    sixth = q.enqueue_many([prepared])[0]
    burst()
    assert q.fetch_job(first.id).result == {"self": "a", "other": 0}
    assert q.fetch_job(second.id).result == {"self": "b", "other": 2}
    assert [q.fetch_job(j.id).result for j in (fourth, fifth, sixth)] == [
        "got d", "got e", "got f"]
    assert q.fetch_job(third.id).status in ("scheduled", "finished")
