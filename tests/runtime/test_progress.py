"""Progress and meta from inside a job: ``fusionworker.current_job()``.

Real Redis, real worker processes and forked horses. Crash points proven here
(the sequence: ``fusionworker/runtime/progress.py``):

- parent frozen past its lease, attempt reaped -> the frames its horse sent
  meanwhile are refused by progress.lua (token): the record keeps what was
  written before the reap
- horse SIGKILLed after a report -> the job fails (killed); the written progress stays
- worker parent SIGKILLed -> another worker's next attempt starts from the stored meta
"""

from __future__ import annotations

import json
import os
import signal

import fakeredis
import pytest

from fusionworker import Queue, Worker, current_job
from fusionworker.core.queue import scripts_for
from fusionworker.events import EventsMiddleware, MemorySink, flush_default_sinks, last_events
from fusionworker.middleware.reaper import reap_once
from fusionworker.runtime.launch import OwnForkLauncher
from fusionworker.testing import run_burst
from tests.chaos import worker_proc
from tests.cli.test_cli import cli  # noqa: F401 - fixture
from tests.conftest import wait_for

FAST = {"FUSIONWORKER_PROGRESS_INTERVAL": "0.2"}


def test_progress_and_meta_are_seen_from_the_producer_while_the_job_runs(
        processes, queue, r, prefix, redis_url, cli):  # noqa: F811 - the fixture
    q = queue()
    go = f"{prefix}:go"
    job = q.enqueue("tests.progress_jobs:report_then_wait", redis_url, go, 0.25, "step 1 of 4")
    processes.worker("--customq", "default", env=FAST)
    wait_for(lambda: job.refresh().meta == {"stage": "running", "fraction": 0.25}
             and job.progress == 0.25, timeout=30)
    assert job.status == "started" and job.progress_message == "step 1 of 4"
    assert job.progress_at is not None and job.progress_writes >= 1
    out = cli("job", "show", job.id).stdout
    assert "progress  25%  step 1 of 4" in out
    assert 'meta      {"stage": "running", "fraction": 0.25}' in out
    doc = json.loads(cli("job", "show", job.id, "--json").stdout)
    assert (doc["status"], doc["progress"], doc["progress_message"], doc["meta"]) == (
        "started", 0.25, "step 1 of 4", {"stage": "running", "fraction": 0.25})
    r.rpush(go, "go")
    job.wait(timeout=30)
    assert (job.progress, job.progress_message) == (1.0, "step 1 of 4: done")
    assert job.meta == {"stage": "done", "fraction": 0.25}


def test_a_tight_loop_is_rate_limited_and_its_last_value_lands(queue, r, settings):
    """100,000 calls in a second or more: at most one write per interval of the job's own
    run (the horse alone would send ten frames a second), one event per write."""
    interval = 0.25
    s = settings.replace(progress_interval=interval)
    q = Queue("default", r, settings=s)
    job = q.enqueue("tests.progress_jobs:tight_loop", 100_000, 1.0)
    sink = MemorySink()
    w = Worker("default", r, settings=s, burst=True, defaults=False,
               middleware=[EventsMiddleware(sink)])
    assert w.work() == 0
    job.refresh()
    assert job.status == "finished" and job.result >= 100_000
    assert (job.progress, job.progress_message) == (1.0, "done")
    assert job.meta == {"calls": job.result + 1}
    assert 1 <= job.progress_writes <= job.duration / interval + 1
    events = [d for d in sink.docs if d["event"] == "progress"]
    assert len(events) == job.progress_writes
    assert all(d["job_id"] == job.id and 0 <= d["progress"] <= 1 for d in events)


def test_a_job_that_reports_nothing_writes_nothing(queue, burst, r):
    q = queue()
    job = q.enqueue("tests.jobs:add", 1, 2)
    burst()
    fields = set(r.hkeys(q.qkeys.job(job.id)))
    assert not fields & {"progress", "progress_message", "progress_at", "meta",
                         "progress_writes"}
    assert q.fetch_job(job.id).progress is None and q.fetch_job(job.id).meta == {}


def test_a_late_horse_of_a_reaped_attempt_cannot_write_progress(
        processes, queue, r, prefix, redis_url, settings):
    q = queue()
    stamp = f"{prefix}:step"
    job = q.enqueue("tests.progress_jobs:loop_until_taken_back", redis_url, stamp,
                    max_retries=3)
    proc = worker_proc.start(processes, lease=1.5, FUSIONWORKER_PROGRESS_INTERVAL="0.1")
    wait_for(lambda: job.refresh().progress_writes >= 2, timeout=30)
    os.kill(proc.pid, signal.SIGSTOP)            # the horse reports on; nobody writes
    try:
        wait_for(lambda: reap_once(r, settings)["requeued"], timeout=10, interval=0.1)
        at_reap = q.fetch_job(job.id)
        # the horse stepped on after the last write (until its watchdog killed it): its
        # later frames wait in the frozen parent's socket
        wait_for(lambda: int(r.get(stamp)) > at_reap.meta["step"])
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=30)
    done = q.fetch_job(job.id)
    assert done.result == 2                       # the next attempt ran, reported nothing
    assert done.progress_message == at_reap.progress_message
    assert done.meta == at_reap.meta and done.progress_writes == at_reap.progress_writes
    assert f"progress of job {job.id} refused" in worker_proc.output(proc)


def test_progress_at_concurrency_three(processes, queue, r, prefix, redis_url):
    q = queue()
    go = f"{prefix}:go"
    jobs = [q.enqueue("tests.progress_jobs:report_then_wait", redis_url, go, f, f"job {i}")
            for i, f in enumerate((0.1, 0.2, 0.3))]
    processes.worker("--customq", "default", "--concurrency", "3", env=FAST)
    wait_for(lambda: [(j.refresh().status, j.progress, j.meta.get("fraction")) for j in jobs]
             == [("started", f, f) for f in (0.1, 0.2, 0.3)], timeout=30)
    assert [j.progress_message for j in jobs] == ["job 0", "job 1", "job 2"]
    r.rpush(go, "go", "go", "go")
    for i, job in enumerate(jobs):
        job.wait(timeout=30)
        assert (job.progress, job.progress_message) == (1.0, f"job {i}: done")
        assert job.meta["stage"] == "done"


@pytest.mark.parametrize("concurrency", [1, 2])
def test_horses_forked_by_the_worker_itself_report_too(r, settings, concurrency):
    s = settings.replace(progress_interval=0.1, concurrency=concurrency)
    q = Queue("default", r, settings=s)
    jobs = [q.enqueue("tests.progress_jobs:tight_loop", 1000, 0.5) for _ in range(2)]
    # forks its horses itself, as a worker does when its fork server cannot start
    assert Worker("default", r, settings=s, burst=True, defaults=False, middleware=[],
                  launcher=OwnForkLauncher).work() == 0
    for job in jobs:
        job.refresh()
        assert (job.status, job.progress, job.progress_message) == ("finished", 1.0, "done")
        assert job.progress_writes >= 1          # frames read from the pipe while it ran


@pytest.mark.parametrize("backend", ["redis", "fakeredis"])
def test_current_job_works_with_the_testing_helpers(backend, r, settings):
    client = r if backend == "redis" else fakeredis.FakeRedis()
    q = Queue("default", client, settings=settings)
    loop = q.enqueue("tests.progress_jobs:tight_loop", 1000)
    ctx = q.enqueue("tests.progress_jobs:context", max_retries=2)
    ran = {j.id: j for j in run_burst(q)}
    assert (ran[loop.id].progress, ran[loop.id].progress_message) == (1.0, "done")
    assert ran[loop.id].meta == {"calls": 1001} and ran[loop.id].progress_writes >= 1
    assert ran[ctx.id].result == {"id": ctx.id, "queue": "default",
                                  "func": "tests.progress_jobs:context", "attempt": 1,
                                  "max_retries": 2, "meta": {}, "progress": None}
    assert current_job() is None                  # the job is over: outside a job again


def test_current_job_answers_to_rqs_names_in_a_horse(queue, burst):
    q = queue()
    job = q.enqueue("tests.progress_jobs:rq_names", 1, [2], to="+1555")
    burst()
    assert job.refresh().result == {"get_id": job.id, "origin": q.name,
                                    "func_name": "tests.progress_jobs:rq_names",
                                    "args": [1, [2]], "kwargs": {"to": "+1555"}}


def test_bad_values_are_refused_at_the_call_with_a_clear_error(queue, burst):
    q = queue()
    caught = q.enqueue("tests.progress_jobs:bad_values")
    uncaught = q.enqueue("tests.progress_jobs:bad_meta_uncaught")
    burst()
    got = q.fetch_job(caught.id)
    errors = got.result["errors"]
    assert errors["object"][0] == "UnsupportedType"
    assert errors["object"][1].startswith("meta['when'] is of type builtins.object")
    assert errors["key"][:2] == ["UnsupportedType", "meta keys must be strings, got int 1"]
    assert errors["nan"][1] == "meta['x'] is nan, which JSON cannot hold"
    assert errors["big"][0] == "MetaTooLarge" and errors["big"][2] is True
    assert "limit is 65536 bytes" in errors["big"][1]
    assert errors["fraction"][:2] == [
        "ValueError", "set_progress: fraction must be in [0, 1] (0.25 = 25 %), got 1.5"]
    assert errors["type"][0] == "TypeError" and "got str 'half'" in errors["type"][1]
    assert errors["message"][0] == "ValueError" and "5000 characters" in errors["message"][1]
    assert got.result["meta"] == {"ok": 1} and got.result["progress"] is None
    assert got.meta == {"ok": 1} and got.progress is None       # only good values landed
    failed = q.fetch_job(uncaught.id)
    assert failed.status == "failed" and failed.error_type == "UnsupportedType"
    assert failed.error_message.startswith("meta['when']['nested'][0] is of type builtins.object")


def test_async_job_and_the_context_it_sees(queue, burst):
    assert current_job() is None
    q = queue()
    job = q.enqueue("tests.progress_jobs:async_report", 0.75)
    burst()
    done = q.fetch_job(job.id)
    assert done.result == 1 and (done.progress, done.progress_message) == (0.75, "async")
    assert done.meta == {"loop": "asyncio"}


def test_a_horse_gets_current_job_without_loading_the_whole_package(queue, burst):
    """``from fusionworker import current_job`` in a horse of the fork server: no redis,
    no queue module (about 0.2 s of imports per horse until the module is preloaded)."""
    q = queue()
    job = q.enqueue("tests.progress_lean_jobs:lean")
    burst()
    done = q.fetch_job(job.id)
    assert done.result == {"package_loaded": False, "redis_loaded": False}
    assert done.progress == 1.0


def test_a_value_changed_in_place_is_published_by_save_meta(queue, burst):
    q = queue()
    unsaved = q.enqueue("tests.progress_jobs:in_place", False)
    saved = q.enqueue("tests.progress_jobs:in_place", True)
    burst()
    assert q.fetch_job(unsaved.id).result == [1, 2]        # what the job's dict holds
    assert q.fetch_job(unsaved.id).meta == {"ids": [1]}    # what was encoded at assignment
    assert q.fetch_job(saved.id).meta == {"ids": [1, 2]}


def test_meta_carries_over_to_the_retry(queue, burst, settings):
    q = queue()
    job = q.enqueue("tests.progress_jobs:retry_with_checkpoint", max_retries=1)
    burst(settings=settings.replace(max_retries=1))
    done = q.fetch_job(job.id)
    assert done.status == "finished" and done.attempts == 2 and done.result == 7


def test_a_killed_horse_keeps_the_progress_written_before(processes, queue, r, prefix,
                                                          redis_url):
    q = queue()
    go = f"{prefix}:go"
    job = q.enqueue("tests.progress_jobs:then_kill_self", redis_url, go)
    processes.worker("--customq", "default", env=FAST)
    wait_for(lambda: job.refresh().progress == 0.3, timeout=30)
    r.rpush(go, "go")
    wait_for(lambda: job.refresh().status == "failed", timeout=30)
    assert job.failure_reason == "killed"
    assert (job.progress, job.progress_message) == (0.3, "before")


def test_the_next_attempt_after_a_dead_worker_starts_from_the_stored_meta(
        processes, queue, r, prefix, redis_url):
    q = queue()
    job = q.enqueue("tests.progress_jobs:resumable", redis_url, f"{prefix}:never",
                    max_retries=2)
    doomed = worker_proc.start(processes, lease=1.5, **FAST)
    wait_for(lambda: job.refresh().meta == {"next_row": 500} and job.progress == 0.5,
             timeout=30)
    doomed.kill()
    doomed.wait(5)
    worker_proc.start(processes, lease=1.5, FUSIONWORKER_REAPER_INTERVAL="0.3", **FAST)
    wait_for(lambda: job.refresh().status == "finished", timeout=30)
    # the dead worker's run was not counted: the same attempt, from the stored meta
    assert job.result == {"attempt": 1, "meta": {"next_row": 500}}
    assert (job.progress, job.progress_message) == (0.5, "half way")


def test_progress_lua_and_the_give_back_are_fenced_by_the_token(queue, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    base, jkey = q.qkeys.base, q.qkeys.job(job.id)
    scripts = scripts_for(r)
    scripts.claim(keys=[base], args=["w.1", "tok", 60, 3600])
    assert scripts.progress(keys=[base], args=[job.id, "old", "", "progress", "0.9"]) == 0
    assert scripts.progress(keys=[base], args=[job.id, "tok", "", "progress", "0.4"]) == 1
    assert scripts.requeue(keys=[base], args=[job.id, "return", "old", 3600,
                                              "progress", "0.9"]) == ["skipped", "attempt changed"]
    assert scripts.requeue(keys=[base], args=[job.id, "return", "tok", 3600,
                                              "progress", "0.5", "meta", '{"a":1}']) == ["requeued"]
    back = q.fetch_job(job.id)
    assert (back.status, back.progress, back.meta, back.progress_writes) == (
        "queued", 0.5, {"a": 1}, 1)
    assert scripts.progress(keys=[base], args=[job.id, "tok", "", "progress", "0.6"]) == 0
    q.delete(job.id)
    assert scripts.progress(keys=[base], args=[job.id, "", "", "progress", "0.7"]) == 0
    assert not r.exists(jkey)                     # a deleted job is not re-created


def test_progress_events_reach_the_stream_and_the_job_page(queue, r, settings, burst):
    pytest.importorskip("starlette")
    pytest.importorskip("jinja2")
    from starlette.testclient import TestClient

    from fusionworker.web import create_app

    q = queue()
    job = q.enqueue("tests.progress_jobs:tight_loop", 10)
    burst(middleware=[EventsMiddleware()])
    flush_default_sinks(5)
    progress = [d for _, d in last_events(r, settings.prefix, job_id=job.id)
                if d["event"] == "progress"]
    assert progress and isinstance(progress[0]["progress"], float)
    web = settings.replace(web_token="t0ken")
    with TestClient(create_app(web, r)) as client:
        page = client.get(f"/jobs/{job.id}", headers={"Authorization": "Bearer t0ken"})
    assert page.status_code == 200
    assert 'id="job-progress"' in page.text and "100 % done" in page.text
    assert "&#34;calls&#34;: 11" in page.text or '"calls": 11' in page.text
