"""``forget_queue`` (``queue delete``, RQ's ``q.delete()``) against producers that go on
enqueueing: a job is either refused, with a clear error and nothing written, or whole
(record and place) once the deletion is over; never told queued and then half gone."""

from __future__ import annotations

import threading

import pytest

from fusionworker.core.queue import forget_queue
from fusionworker.exceptions import InvalidOperation, PartialEnqueue
from tests.cli.test_cli import cli  # noqa: F401 - the fixture

NOOP = "tests.jobs:noop"


def test_an_interrupted_delete_refuses_enqueues_until_it_is_run_again(queue, r, settings):
    """The crash point: the queue marked ``forgetting`` and left so (the deleting process
    killed). Enqueue and enqueue_many are refused before any write, naming the way out;
    the delete run again finishes, and the queue takes jobs again (a new one)."""
    q = queue("gone")
    old = q.enqueue(NOOP)
    r.set(q.qkeys.paused, "1")
    r.set(q.qkeys.forgetting, "1")                 # as forget_queue left it, killed
    keys_before = sorted(r.scan_iter(match=q.qkeys.match_all))
    with pytest.raises(InvalidOperation, match="gone is being deleted.*run the delete again"):
        q.enqueue(NOOP, job_id="refused-one")
    with pytest.raises(InvalidOperation, match="being deleted"):
        q.enqueue_many([q.prepare(NOOP, job_id=f"refused-{i}") for i in range(3)])
    assert sorted(r.scan_iter(match=q.qkeys.match_all)) == keys_before   # nothing written
    assert forget_queue(r, "gone", settings.prefix) > 0
    assert not r.exists(q.qkeys.forgetting, q.qkeys.paused, q.qkeys.job(old.id))
    new = q.enqueue(NOOP)
    assert q.job_ids == [new.id]


def test_a_refused_delete_leaves_the_queue_taking_jobs(queue, r, settings):
    """Refused because a job of the queue runs: no mark is left behind."""
    q = queue("busy")
    r.zadd(q.qkeys.started, {"running": 1})
    with pytest.raises(InvalidOperation, match="running job"):
        forget_queue(r, "busy", settings.prefix)
    assert not r.exists(q.qkeys.forgetting, q.qkeys.paused)
    assert q.enqueue(NOOP).status == "queued"


def test_jobs_enqueued_during_a_delete_are_refused_or_whole(queue, r, settings):
    """Two producers enqueue (one job at a time, and in chunks) while the queue, holding
    thousands of jobs (so its SCAN takes many steps), is deleted. A job a producer was
    told is queued is whole afterwards (its record and its place in ``pending``) or
    went whole with the queue (told before the delete began); the enqueues meanwhile
    were refused. Before the mark, a job written during the SCAN could lose its record
    (its id left in ``pending``: dead-lettered as "queue entry has no job record") or
    its place (a record no worker would ever claim)."""
    q = queue("busy")
    q.enqueue_many([q.prepare(NOOP) for _ in range(4000)])
    told: list[str] = []
    refused: list[str] = []
    started = threading.Event()
    done = threading.Event()

    def one_at_a_time() -> None:
        n = 0
        while not done.is_set():
            n += 1
            try:
                told.append(q.enqueue(NOOP, job_id=f"one-{n}").id)
            except InvalidOperation as exc:
                refused.append(str(exc))
            started.set()

    def in_chunks() -> None:
        n = 0
        while not done.is_set():
            n += 1
            try:
                told.extend(j.id for j in q.enqueue_many(
                    [q.prepare(NOOP, job_id=f"many-{n}-{i}") for i in range(5)]))
            except PartialEnqueue as exc:
                told.extend(j.id for j in exc.jobs)
                refused.append(str(exc))
            except InvalidOperation as exc:
                refused.append(str(exc))

    threads = [threading.Thread(target=one_at_a_time), threading.Thread(target=in_chunks)]
    for t in threads:
        t.start()
    started.wait(10)
    try:
        forget_queue(r, "busy", settings.prefix)
    finally:
        done.set()
        for t in threads:
            t.join(10)
    assert refused, "no enqueue met the delete: the race was not run"
    assert all("being deleted" in said for said in refused)
    # a job told queued before the delete began went with the queue, whole; one told after
    # it is there, whole: none is a place without its record or a record without its place
    pending = set(r.zrange(q.qkeys.pending, 0, -1))
    records = {k.rsplit(":", 1)[1] for k in r.scan_iter(match=q.qkeys.job("*"))}
    assert records == pending
    assert records <= set(told)


def test_a_delete_killed_in_its_scan_is_finished_from_the_cli(queue, r, settings, cli):  # noqa: F811
    """Killed while it deleted keys, the delete leaves the queue registered (it leaves
    ``fw:queues`` last): `queue delete` names it and finishes it, as the enqueue's refusal
    says to. It left the registration first, and the CLI answered "no queue"."""
    q = queue("half")
    q.enqueue(NOOP)
    r.set(q.qkeys.paused, "1")
    r.set(q.qkeys.forgetting, "1")                  # killed after step 3, mid-SCAN
    r.delete(q.qkeys.pending)                       # some keys gone, others not
    assert "half" in cli("queue", "list").output
    cli("queue", "delete", "half", "--yes")
    assert not list(r.scan_iter(match=q.qkeys.match_all))
    assert q.enqueue(NOOP).status == "queued"       # a new queue


def test_a_cron_tick_of_a_queue_being_deleted_runs_nothing(queue, r, settings):
    from fusionworker.core import cron

    q = queue("crq")
    cron.register(r, settings, "tick", "* * * * * *", NOOP, queue="crq", allow_overlap=True)
    sec, _ = r.time()
    r.zadd(q.qkeys.cron, {"tick": float(sec)})
    r.set(q.qkeys.forgetting, "1")
    [(_, _, reply)] = cron.run_due(r, settings.prefix, ["crq"])
    assert reply.outcome == "moved" and q.job_ids == []
