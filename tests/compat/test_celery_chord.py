"""Celery's chord: the callback of a ``Batch`` reads its batch's job ids and results
from the batch id it is given."""

from __future__ import annotations

import pytest

from fusionworker import Batch
from fusionworker.exceptions import NoSuchJob
from tests import jobs


def test_a_batch_callback_reads_its_jobs_and_results(queue, work, r, settings, monkeypatch):
    # the environment a worker process gives its horses (cli/worker_cmd.py)
    monkeypatch.setenv("FUSIONWORKER_PREFIX", settings.prefix)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    q = queue()
    with Batch(on_success="tests.compat.rq_jobs:chord_total", queue=q) as batch:
        made = [q.enqueue(jobs.add, i, i, batch=batch) for i in range(4)]
    work()
    callback = q.fetch_job(batch.callback_ids()["on_success"])
    assert callback is not None and callback.status == "finished"
    assert callback.result == {"ids": [j.id for j in made], "results": [0, 2, 4, 6]}
    assert Batch.results(batch.id, r, queue=q.name, settings=settings) == [0, 2, 4, 6]
    with pytest.raises(NoSuchJob):
        Batch.job_ids("no-such-batch", r, settings=settings)


def test_results_refuse_a_list_shortened_by_a_gone_record(queue, work, r, settings):
    """A job of the batch whose record is gone (its result_ttl ran out before the batch
    ended): its result cannot be placed, so ``results`` says so instead of answering a
    shorter list with the others out of place; ``jobs`` leaves it out, as it says."""
    q = queue()
    with Batch(queue=q) as batch:
        first = q.enqueue(jobs.add, 1, 1, batch=batch)
        gone = q.enqueue(jobs.add, 2, 2, batch=batch, result_ttl=0)
        last = q.enqueue(jobs.add, 3, 3, batch=batch)
    work()
    assert batch.status()["ended"] == 3 and q.fetch_job(gone.id) is None
    assert Batch.job_ids(batch.id, r, queue=q.name, settings=settings) == [first.id, last.id]
    with pytest.raises(NoSuchJob, match=rf"1 of its 3 ended jobs have no record any more "
                                        rf"\({q.name}:{gone.id}\).*result_ttl"):
        Batch.results(batch.id, r, queue=q.name, settings=settings)
