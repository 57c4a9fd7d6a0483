"""``at_front=True`` among jobs that become ready together: inside one ``enqueue_many``
chunk, and among the dependents one parent releases."""

from __future__ import annotations

from tests import jobs


def _order(q, ran):
    return [j.id for j in sorted((q.fetch_job(j.id) for j in ran), key=lambda j: j.started_at)]


def test_at_front_inside_an_enqueue_many_chunk(queue, work):
    q = queue()
    first, second = q.prepare(jobs.add, 1, 1), q.prepare(jobs.add, 2, 2)
    urgent = q.prepare(jobs.add, 3, 3, at_front=True)
    made = q.enqueue_many([first, second, urgent])
    assert q.get_job_ids() == [urgent.id, first.id, second.id]
    work()
    assert _order(q, made) == [urgent.id, first.id, second.id]


def test_at_front_among_dependents_released_together(queue, work):
    q = queue()
    parent = q.enqueue(jobs.add, 0, 0)
    plain = q.enqueue(jobs.add, 1, 1, depends_on=parent)
    urgent = q.enqueue(jobs.add, 2, 2, depends_on=parent, at_front=True)
    work()
    assert _order(q, [plain, urgent]) == [urgent.id, plain.id]
