"""RQ's tests/test_queue.py, case by case, as fusionworker behaviours.

Each test names the RQ case it ports; the cases fusionworker does differently
on purpose are listed in docs/from-rq.md with the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fusionworker.registries import (
    CanceledJobRegistry,
    DeferredJobRegistry,
    FailedJobRegistry,
    FinishedJobRegistry,
    ScheduledJobRegistry,
    StartedJobRegistry,
)

from fusionworker import Job, Queue
from fusionworker.core.queue import forget_queue

HELLO = "tests.jobs:echo"


def test_create_queue(r, settings):
    assert Queue("my-queue", r, settings=settings).name == "my-queue"


def test_create_default_queue(r, settings):
    assert Queue(connection=r, settings=settings).name == "default"


def test_equality(r, settings):
    q1, q2, q3 = (Queue(n, r, settings=settings) for n in ("foo", "foo", "bar"))
    assert q1 == q2 and q2 == q1 and q1 != q3 and len({q1, q2, q3}) == 2
    assert q1 != "foo"


def test_empty_queue_and_is_empty(queue):
    q = queue()
    assert q.is_empty()
    q.enqueue(HELLO)
    q.enqueue(HELLO)
    assert not q.is_empty()
    assert q.empty() == 2
    assert q.is_empty()


def test_empty_removes_jobs(queue, r, settings):
    q = queue()
    job = q.enqueue(HELLO)
    assert Job.exists(job.id, r, settings=settings)
    q.empty()
    assert not Job.exists(job.id, r, settings=settings)


def test_queue_delete_deletes_queue_and_jobs(queue, r, settings):
    q = queue("gone")
    a, b = q.enqueue(HELLO), q.enqueue(HELLO)
    assert len(q.get_job_ids()) == 2
    forget_queue(r, "gone", settings.prefix)
    assert q.get_job_ids() == [] and not r.exists(q.qkeys.job(a.id), q.qkeys.job(b.id))
    assert "gone" not in [x.name for x in Queue.all(r, settings=settings)]


def test_q_delete_with_no_job_id_deletes_the_queue_as_rqs_does(queue, r, settings):
    """RQ's ``q.delete(delete_jobs=True)`` (its default): the queue and its jobs. A job
    of it running refuses it; ``delete_jobs=False`` is refused (a job whose queue is
    gone could never run); ``q.delete(id)`` still deletes one job."""
    from fusionworker.exceptions import InvalidOperation

    q = queue("gone")
    a, b = q.enqueue(HELLO), q.enqueue(HELLO)
    q.delete(a.id)
    assert q.job_ids == [b.id]
    with pytest.raises(InvalidOperation, match="deleted with its jobs"):
        q.delete(delete_jobs=False)
    assert q.job_ids == [b.id]                              # refused: nothing written
    r.zadd(q.qkeys.started, {"running": 1})                 # as while a worker runs one
    with pytest.raises(InvalidOperation, match="running job"):
        q.delete()
    assert q.job_ids == [b.id]
    r.zrem(q.qkeys.started, "running")
    q.delete(delete_jobs=True)
    assert q.job_ids == [] and not r.exists(q.qkeys.job(b.id))
    assert "gone" not in [x.name for x in Queue.all(r, settings=settings)]


def test_queue_delete_without_a_prefix_takes_the_environments(queue, r, settings, monkeypatch):
    """As ``Queue()`` does: not the default ``fw``, which is another deployment's."""
    q = queue("gone")
    job = q.enqueue(HELLO)
    monkeypatch.setenv("FUSIONWORKER_PREFIX", settings.prefix)
    assert forget_queue(r, "gone") > 0
    assert not r.exists(q.qkeys.job(job.id))
    assert "gone" not in [x.name for x in Queue.all(r, settings=settings)]


def test_position(queue):
    q = queue()
    jobs = [q.enqueue(HELLO) for _ in range(3)]
    assert [q.get_job_position(jobs[0].id), q.get_job_position(jobs[1].id),
            q.get_job_position(jobs[2])] == [0, 1, 2]
    assert q.get_job_position("no_real_job") is None
    assert jobs[2].get_position() == 2


def test_jobs(queue):
    q = queue()
    assert q.jobs() == []
    job = q.enqueue(HELLO)
    assert [j.id for j in q.jobs()] == [job.id]
    job.delete()
    assert q.job_ids() == []


def test_job_ids_and_jobs_read_as_rqs_properties_too(queue):
    """RQ's ``q.job_ids`` and ``q.jobs`` are properties: every queued one in run order.
    Read uncalled they are that here as well (``len``, ``in``, ``==``, iteration,
    indexing), past the 100 a call returns by default; called, the method with a
    registry and a limit."""
    q = queue()
    assert q.job_ids == [] and len(q.jobs) == 0 and not q.job_ids
    ids = [q.enqueue(HELLO, str(n)).id for n in range(120)]
    urgent = q.enqueue(HELLO, "first", priority=5).id
    assert q.job_ids == [urgent, *ids] and len(q.job_ids) == 121
    assert ids[-1] in q.job_ids and q.job_ids[0] == urgent and q.job_ids[1:3] == ids[:2]
    assert [job.id for job in q.jobs] == [urgent, *ids]
    assert q.job_ids() == [urgent, *ids[:99]]                      # the method: its limit
    assert q.job_ids("queued", 2) == [urgent, ids[0]]
    assert q.jobs("failed") == [] and q.job_ids(limit=1) == [urgent]
    kept = q.job_ids                                        # a snapshot, as RQ's list
    assert len(kept) == 121
    q.delete(urgent)
    assert len(kept) == 121 and urgent not in q.job_ids and len(q.job_ids) == 120
    with pytest.raises(ValueError, match="unknown status"):
        q.job_ids("nope")


def test_enqueue(queue, r):
    q = queue()
    assert q.is_empty()
    job = q.enqueue(HELLO, "Nick", foo="bar")
    assert job.origin == q.name
    assert r.zrange(q.qkeys.pending, 0, -1) == [job.id]


def test_enqueue_sets_metadata_and_status(queue):
    job = queue().enqueue(HELLO, "Nick")
    assert job.enqueued_at is not None
    assert job.get_status() == "queued"


def test_dequeue_ignores_nonexisting_jobs(queue, burst, r):
    q = queue("low")
    r.zadd(q.qkeys.pending, {"49f205ab": 5})       # an id without a record
    assert q.count == 1
    burst("low")
    assert q.count == 0


def test_job_timeout(queue, settings):
    q = queue()
    assert q.enqueue(HELLO, 1, timeout=15).timeout == 15
    assert q.enqueue(HELLO, 1).timeout == settings.job_timeout
    with pytest.raises(ValueError):
        q.enqueue(HELLO, 1, timeout=0)


def test_enqueue_explicit_args(queue, burst):
    q = queue()
    job = q.enqueue_call(HELLO, args=[1], kwargs={"timeout": 1, "result_ttl": 1}, timeout=2)
    assert job.timeout == 2
    burst()
    assert job.return_value() == {"args": [1], "kwargs": {"timeout": 1, "result_ttl": 1}}
    when = datetime.now(UTC) + timedelta(seconds=10)
    later = q.enqueue_at(when, HELLO, 1)
    assert later.is_scheduled and later.args == [1]


def test_all_queues(r, settings, burst):
    names = ("first-queue", "second-queue", "third-queue")
    qs = [Queue(n, r, settings=settings) for n in names]
    assert Queue.all(r, settings=settings) == []
    qs[0].enqueue(HELLO)
    assert len(Queue.all(r, settings=settings)) == 1
    qs[1].enqueue(HELLO)
    qs[2].enqueue(HELLO)
    assert sorted(q.name for q in Queue.all(r, settings=settings)) == sorted(names)
    burst("second-queue,third-queue")
    assert len(Queue.all(r, settings=settings)) == 3      # emptied queues are still listed


def test_all_queues_with_only_deferred_jobs(r, settings):
    with_queued = Queue("queue_with_queued_jobs", r, settings=settings)
    with_deferred = Queue("queue_with_deferred_jobs", r, settings=settings)
    parent = with_queued.enqueue(HELLO)
    with_deferred.enqueue(HELLO, depends_on=parent)
    assert sorted(q.name for q in Queue.all(r, settings=settings)) == [
        "queue_with_deferred_jobs", "queue_with_queued_jobs"]


def test_enqueue_dependents(queue, work):
    q = queue()
    parent = q.enqueue(HELLO)
    work_q = queue("other")
    a = work_q.enqueue(HELLO, depends_on=parent)
    b = work_q.enqueue(HELLO, depends_on=parent)
    registry = DeferredJobRegistry(queue=work_q)
    assert set(registry.get_job_ids()) == {a.id, b.id} and work_q.get_job_ids() == []
    work("default")          # the parent finishes: its dependents are released
    assert set(work_q.get_job_ids()) == {a.id, b.id}
    assert registry.get_job_ids() == []


def test_enqueue_dependents_on_multiple_queues(queue, work):
    parent = queue("p").enqueue(HELLO)
    q1, q2 = queue("queue_1"), queue("queue_2")
    j1, j2 = q1.enqueue(HELLO, depends_on=parent), q2.enqueue(HELLO, depends_on=parent)
    assert q1.deferred_job_registry.get_job_ids() == [j1.id]
    assert q2.deferred_job_registry.get_job_ids() == [j2.id]
    work("p")
    assert q1.get_job_ids() == [j1.id] and q2.get_job_ids() == [j2.id]
    assert q1.deferred_job_registry.count == q2.deferred_job_registry.count == 0


def test_enqueue_job_with_dependency(queue, work):
    q = queue()
    parent = queue("p").enqueue(HELLO)
    job = q.enqueue_call(HELLO, depends_on=parent)
    assert q.get_job_ids() == [] and job.get_status() == "deferred"
    work("p")
    job2 = q.enqueue_call(HELLO, depends_on=parent)          # parent finished: queued at once
    assert job2.get_status() == "queued" and job2.id in q.get_job_ids()


def test_enqueue_job_with_dependency_by_id(queue, work):
    q = queue()
    parent = q.enqueue(HELLO)
    child = q.enqueue_call(HELLO, depends_on=parent.id)
    assert child.is_deferred
    work()
    assert child.is_finished


def test_enqueue_job_with_dependency_and_timeout(queue):
    parent = queue("p").enqueue(HELLO)
    job = queue().enqueue_call(HELLO, depends_on=parent, timeout=123)
    assert job.timeout == 123 and job.refresh().timeout == 123


def test_enqueue_job_with_multiple_dependencies(queue, work):
    p = queue("p")
    parents = [p.enqueue(HELLO), p.enqueue(HELLO)]
    q = queue()
    job = q.enqueue(HELLO, depends_on=parents)
    assert job.get_status() == "deferred" and q.get_job_ids() == []
    work("p")
    assert job.get_status() == "queued"
    after = q.enqueue(HELLO, depends_on=parents)           # all finished: queued at once
    assert after.get_status() == "queued"


def test_does_not_enqueue_dependent_if_other_dependencies_not_finished(queue, work):
    p, slow = queue("p"), queue("slow")
    done, waiting = p.enqueue(HELLO), slow.enqueue(HELLO)
    q = queue()
    child = q.enqueue(HELLO, depends_on=[done, waiting])
    work("p")
    assert child.get_status() == "deferred" and q.get_job_ids() == []
    work("slow")
    assert child.get_status() == "queued"


def test_fetch_job(queue):
    q1, q2 = queue("example1"), queue("example2")
    job = q1.enqueue(HELLO, "x")
    fetched = q1.fetch_job(job.id)
    assert fetched is not None and fetched.description == job.description
    assert q1.fetch_job("123") is None
    assert q2.fetch_job(job.id) is None


def test_getting_registries(queue):
    q = queue()
    assert q.scheduled_job_registry == ScheduledJobRegistry(queue=q)
    assert q.started_job_registry == StartedJobRegistry(queue=q)
    assert q.failed_job_registry == FailedJobRegistry(queue=q)
    assert q.deferred_job_registry == DeferredJobRegistry(queue=q)
    assert q.finished_job_registry == FinishedJobRegistry(queue=q)
    assert q.canceled_job_registry == CanceledJobRegistry(queue=q)
    assert q.failed_job_registry != FinishedJobRegistry(queue=q)


def test_enqueue_same_id_after_the_job_was_deleted(queue):
    q = queue()
    first = q.enqueue(HELLO, job_id="requeue-job")
    first.delete()
    again = q.enqueue(HELLO, job_id="requeue-job")
    assert again.id == "requeue-job" and not again.deduplicated


def test_enqueue_with_job_id_stores_the_job_data(queue):
    q = queue()
    q.enqueue(HELLO, "a", 2, job_id="data-job", key="v")
    job = q.fetch_job("data-job")
    assert job is not None and (job.args, job.kwargs) == (["a", 2], {"key": "v"})


def test_enqueue_at(queue):
    q = queue()
    when = datetime.now(UTC) + timedelta(minutes=5)
    job = q.enqueue_at(when, HELLO)
    assert job.get_status() == "scheduled" and q.get_job_ids() == []
    due = q.scheduled_job_registry.get_scheduled_time(job)
    assert due is not None and abs((due - when).total_seconds()) < 2


def test_enqueue_in_takes_a_timedelta(queue, r, settings):
    q = queue()
    job = q.enqueue_in(timedelta(minutes=5), HELLO, 1)
    assert job.get_status() == "scheduled" and q.get_job_ids() == []
    due = q.scheduled_job_registry.get_scheduled_time(job)
    assert due is not None
    assert abs((due - datetime.now(UTC)).total_seconds() - 300) < 5
    assert q.enqueue(HELLO, retry_delay=timedelta(seconds=7)).refresh().retry_delay == 7.0
    count = q.count + len(q.scheduled_job_registry)
    with pytest.raises(TypeError, match="timedelta"):
        q.enqueue_in("soon", HELLO)
    with pytest.raises(TypeError, match="datetime"):
        q.enqueue_at(300, HELLO)                    # seconds belong to enqueue_in
    assert q.count + len(q.scheduled_job_registry) == count     # nothing written


def test_retry_takes_a_timedelta():
    from fusionworker import Retry

    assert Retry(delay=timedelta(minutes=2)).delay == 120.0
    assert Retry(delay=3).delay == 3
