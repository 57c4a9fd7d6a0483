"""RQ's enqueue keywords: the ones that mean the same here are taken (``job_timeout``,
``description``, ``meta``), the others are refused with one line naming the way here,
before anything is written (docs/from-rq.md)."""

from __future__ import annotations

import pytest

from fusionworker import Job
from tests.compat import rq_jobs

HELLO = "tests.compat.rq_jobs:say_hello"


def test_job_timeout_is_the_timeout(queue):
    q = queue()
    assert q.enqueue(HELLO, job_timeout=15).timeout == 15
    with pytest.raises(ValueError):
        q.enqueue(HELLO, job_timeout=0)
    assert q.count == 1


def test_meta_at_enqueue(queue, work):
    q = queue()
    job = q.enqueue(HELLO, meta={"foo": "bar", "baz": 42})
    assert job.meta == {"foo": "bar", "baz": 42}
    assert q.fetch_job(job.id).get_meta() == {"foo": "bar", "baz": 42}
    work()
    assert job.get_meta() == {"foo": "bar", "baz": 42}


def test_description_at_enqueue(queue, r, settings):
    job = queue().enqueue(HELLO, "Lionel", description="Say hello!")
    assert Job.fetch(job.id, r, settings=settings).description == "Say hello!"
    plain = queue().enqueue(HELLO, "Lionel")
    assert plain.description == f"{HELLO}('Lionel')"


def test_decorator_meta_and_description(r, settings):
    handle = rq_jobs.decorated_hello.options(connection=r, settings=settings,
                                             meta={"metaKey1": 1}, description="greeting")
    job = handle.enqueue()
    assert (job.meta, job.description) == ({"metaKey1": 1}, "greeting")


@pytest.mark.parametrize(("keyword", "value", "hint"), [
    ("unique", True, "job_id="),      # on_stopped= is an option since jobs can be stopped
])
def test_rq_options_that_are_no_option_here_are_refused(queue, keyword, value, hint):
    q = queue()
    with pytest.raises(TypeError) as caught:
        q.enqueue(HELLO, **{keyword: value})
    assert hint in str(caught.value) and len(str(caught.value).splitlines()) == 1
    assert q.count == 0
    # a job argument of that name goes through enqueue_call
    job = q.enqueue_call("tests.jobs:echo", kwargs={keyword: value})
    assert job.kwargs == {keyword: value}


def test_bound_methods_and_string_args_are_refused(queue):
    from fusionworker.exceptions import InvalidFunction

    class Number:
        def div(self, y: int) -> float:
            return 2 / y

    q = queue()
    with pytest.raises(InvalidFunction, match="bound method"):
        q.enqueue(Number().div, 4)
    with pytest.raises(TypeError):
        q.enqueue_call(HELLO, args="string")       # type: ignore[arg-type]
    with pytest.raises(ValueError):
        q.enqueue(HELLO, job_id="")
    assert q.count == 0
