"""A callback's ``Job.fetch(job_id)`` (or a job's ``Queue()``) without settings finds its
job under the worker's own settings: ``worker --redis-url URL --prefix P`` with an
environment that says otherwise."""

from __future__ import annotations

from tests.waiting import wait_for


def test_a_callback_fetches_its_job_under_the_workers_flags(queue, processes, redis_url):
    q = queue()
    job = q.enqueue("tests.jobs:add", 20, 22, on_success="tests.compat.rq_jobs:fetch_result")
    processes.worker("--redis-url", redis_url, "--prefix", q.settings.prefix, "-q", q.name,
                     env={"FUSIONWORKER_PREFIX": "not-the-workers",
                          "REDIS_URL": "redis://127.0.0.1:1/0"})
    callback = wait_for(lambda: q.fetch_job(f"{job.id}:on_success"), what="the callback")
    done = callback.wait(timeout=60)
    assert done.result == 42
