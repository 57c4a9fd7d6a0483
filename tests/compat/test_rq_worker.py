"""RQ's tests/test_worker.py, the user-visible cases, with fusionworker's Worker (see
docs/from-rq.md for the internal ones and those done differently on purpose)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from fusionworker import admin
from fusionworker.core.hooks import Middleware
from fusionworker.testing import run_burst
from fusionworker.worker import Worker, default_middleware

HELLO = "tests.compat.rq_jobs:say_hello"


def test_create_worker_from_a_list_or_a_comma_string(r, settings):
    assert Worker(["foo", "bar"], r, settings=settings).queue_names == ["foo", "bar"]
    assert Worker("foo,bar", r, settings=settings).queue_names == ["foo", "bar"]


def test_queue_names_is_also_rqs_method_and_queues_are_queue_objects(r, settings):
    w = Worker("foo,bar", r, settings=settings)
    assert w.queue_names() == ["foo", "bar"] == w.queue_names
    assert [(q.name, q.settings.prefix) for q in w.queues] == [
        ("foo", settings.prefix), ("bar", settings.prefix)]


def test_work_and_quit(queue, work):
    q = queue()
    work()                                    # nothing to do: a burst worker just ends
    job = q.enqueue(HELLO, "Frank")
    w = work()
    assert job.return_value() == "Hi there, Frank!" and q.count == 0
    assert (w.successful, w.failed) == (1, 0)


def test_statistics_count_successes_and_failures(queue, work):
    q = queue()
    q.enqueue(HELLO)
    q.enqueue("tests.jobs:boom")
    q.enqueue(HELLO)
    w = work()
    assert (w.successful, w.failed) == (2, 1) and w.total_working_time > 0


def test_registered_workers_are_listed_with_their_heartbeat(r, settings):
    w = Worker("foo,bar", r, settings=settings, name="listed", defaults=False, middleware=[])
    w.register()
    try:
        found = {d["name"]: d for d in admin.workers(r, settings.prefix)}
        assert found["listed"]["queues"] == "foo,bar" and float(found["listed"]["birth"]) > 0
        assert 0 < r.ttl(w.key) <= settings.worker_ttl          # the worker's TTL
    finally:
        w.deregister()
    assert "listed" not in {d["name"] for d in admin.workers(r, settings.prefix)}


def test_work_via_string_argument(queue, work):
    job = queue().enqueue(HELLO, "Frank")
    work()
    assert job.return_value() == "Hi there, Frank!"


def test_job_times(queue, work):
    job = queue().enqueue(HELLO)
    assert job.enqueued_at is not None and job.started_at is None and job.ended_at is None
    work()
    job.refresh()
    assert job.enqueued_at <= job.started_at <= job.ended_at
    assert job.duration is not None and job.duration >= 0


def test_work_fails(queue, work):
    q = queue()
    job = q.enqueue("tests.jobs:boom", "no good")
    work()
    job.refresh()
    assert job.status == "failed" and job in q.failed_job_registry and q.count == 0
    assert job.error_type == "ValueError" and job.error_message == "no good"
    assert job.traceback is not None and "ValueError: no good" in job.traceback


def test_horse_fails(queue, work):
    job = queue().enqueue("tests.jobs:segfault")
    work()
    assert job.is_failed and job.refresh().failure_reason == "segfault"


def test_work_horse_death_sets_job_failed(queue, work):
    job = queue().enqueue("tests.jobs:kill_self")
    work()
    assert job.is_failed and job.refresh().failure_reason == "killed"


def test_job_timeout_moved_to_failed_job_registry(queue, work):
    q = queue()
    job = q.enqueue("tests.jobs:sleep", 5, timeout=0.5)
    work()
    job.refresh()
    assert job.status == "failed" and job.failure_reason == "timeout" and job in (
        q.failed_job_registry)


@pytest.mark.slow
def test_work_horse_force_death(queue, work):
    """A job that ignores its timeout (SIGALRM) is killed kill_grace later."""
    job = queue().enqueue("tests.jobs:ignore_alarm_and_sleep", 30, timeout=0.5)
    work()
    job.refresh()
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert job.duration is not None and job.duration < 10


def test_custom_exception_handling_with_a_middleware(queue, r, settings):
    seen: list[tuple[str, Any]] = []

    class OnFailure(Middleware):
        def after_finish(self, worker: Worker, job: Any, outcome: Any) -> None:
            seen.append((job.id, outcome.status))

    q = queue()
    job = q.enqueue("tests.jobs:boom")
    Worker("default", r, settings=settings, burst=True,
           middleware=[*default_middleware(settings), OnFailure()]).work()
    assert seen == [(job.id, "failed")]


def test_deleted_jobs_arent_executed(queue, work):
    q = queue()
    job = q.enqueue(HELLO)
    job.delete()
    w = work()
    assert w.successful == 0 and q.finished_job_registry.count == 0


def test_cancel_dependent_job(queue, work):
    q = queue()
    parent = q.enqueue(HELLO)
    child = q.enqueue(HELLO, depends_on=parent)
    child.cancel()
    work()
    assert parent.is_finished and child.get_status() == "canceled"
    assert q.get_job_ids() == []


def test_worker_sets_job_status_and_result_ttl(queue, work, r, settings):
    q = queue()
    job = q.enqueue(HELLO)
    assert job.get_status() == "queued"
    work()
    assert job.get_status() == "finished"
    assert 0 < r.ttl(q.qkeys.job(job.id)) <= settings.result_ttl


def test_work_in_this_process(queue):
    """RQ's SimpleWorker (no fork): ``fusionworker.testing.run_burst``."""
    q = queue()
    job = q.enqueue("tests.compat.rq_jobs:access_self")
    ran = run_burst(q)
    assert [j.id for j in ran] == [job.id] and job.return_value() == job.id


def test_synchronous_run_finishes_the_job(queue):
    """RQ's ``Queue(is_async=False)``: run the job now, in this process."""
    q = queue()
    job = q.enqueue(HELLO, "sync")
    run_burst(q)
    assert job.get_status() == "finished" and job.return_value() == "Hi there, sync!"


def test_work_unicode_friendly(queue, work):
    job = queue().enqueue("tests.jobs:echo", "Adam", description_text="你好 世界!")
    work()
    assert job.return_value()["kwargs"] == {"description_text": "你好 世界!"}
    bad = queue().enqueue("tests.jobs:boom", "ünïcödé ☃ failure")
    work()
    assert bad.refresh().error_message == "ünïcödé ☃ failure"


def test_self_modification_persistence(queue, work):
    q = queue()
    ok = q.enqueue("tests.compat.rq_jobs:modify_self", {"baz": 10, "newinfo": "waka"})
    ok.meta["foo"] = "bar"
    ok.save_meta()
    bad = q.enqueue("tests.compat.rq_jobs:modify_self_and_error", {"baz": 10})
    work()
    assert ok.get_meta() == {"foo": "bar", "baz": 10, "newinfo": "waka"}
    assert bad.is_failed and bad.get_meta() == {"baz": 10}


def test_round_robin(queue, work):
    qs = [queue(f"q{i}") for i in range(3)]
    jobs = [q.enqueue(HELLO) for q in qs for _ in range(2)]
    work("q0,q1,q2")
    order = sorted(jobs, key=lambda j: j.refresh().started_at or 0)
    assert [j.queue for j in order] == ["q0", "q1", "q2", "q0", "q1", "q2"]


def test_strict_order_from_queue_objects(queue, r, settings):
    low, high = queue("low"), queue("high")
    jobs = [q.enqueue(HELLO) for q in (low, high) for _ in range(2)]
    w = Worker([high, low], defaults=False,
               middleware=[])          # RQ: Worker([Queue]) is strict order
    assert w.work(burst=True) == 0 and w.successful == 4
    order = sorted(jobs, key=lambda j: j.refresh().started_at or 0)
    assert [j.queue for j in order] == ["high", "high", "low", "low"]
    with pytest.raises(ValueError, match="strict"):
        Worker("a:2,b", r, settings=settings, strict=True)


def test_strict_claims_ask_later_queues_only_for_what_is_left(queue, r, settings):
    first, second = queue("first"), queue("second")
    second.enqueue(HELLO)
    second.enqueue(HELLO)
    first.enqueue(HELLO)
    claimer = Worker("first,second", r, settings=settings, strict=True,
                     defaults=False, middleware=[]).claimer
    got = claimer.claim(2)
    assert [j.queue for j in got.jobs] == ["first", "second"] and claimer.pos == 0
    first.enqueue(HELLO)                     # round-robin would now ask second first
    assert [j.queue for j in claimer.claim(1).jobs] == ["first"]
    assert [j.queue for j in claimer.claim(2).jobs] == ["second"]


def test_run_empty_queue_with_a_worker_process(queue, processes):
    proc = processes.worker("-q", "empty", "--burst")
    assert proc.wait(60) == 0


def test_max_jobs(queue):
    q = queue()
    jobs = [q.enqueue(HELLO) for _ in range(3)]
    assert len(run_burst(q, max_jobs=2)) == 2
    assert [j.get_status() for j in jobs] == ["finished", "finished", "queued"]


def test_work_max_jobs_claims_that_many_whatever_the_free_slots(queue, r, settings):
    """RQ's ``worker.work(burst=True, max_jobs=N)`` on a real worker of 3 slots (real
    horses): exactly N jobs run, the rest stay queued, and the worker stops warm;
    ``with_scheduler=True`` is accepted (every worker moves due scheduled jobs)."""
    q = queue()
    jobs = [q.enqueue(HELLO, str(n)) for n in range(8)]
    three = settings.replace(concurrency=3)
    assert Worker(q.name, r, settings=three).work(burst=True, max_jobs=2,
                                                  with_scheduler=True) == 0
    assert [j.get_status() for j in jobs] == ["finished"] * 2 + ["queued"] * 6
    assert Worker(q.name, r, settings=three).work(burst=True, max_jobs=5) == 0
    assert [j.get_status() for j in jobs] == ["finished"] * 7 + ["queued"]


def test_the_same_worker_works_again(queue, r, settings):
    """RQ's tests hold one worker and call ``work(burst=True)`` after each enqueue: every
    call claims afresh, and a later call is not held to an earlier one's ``max_jobs``."""
    q = queue()
    w = Worker(q.name, r, settings=settings.replace(concurrency=2))
    first = q.enqueue(HELLO, "a")
    assert w.work(burst=True) == 0
    assert first.get_status() == "finished"
    more = [q.enqueue(HELLO, str(n)) for n in range(4)]
    assert w.work(burst=True, max_jobs=1) == 0
    assert [j.get_status() for j in more] == ["finished"] + ["queued"] * 3
    assert w.work(burst=True) == 0
    assert [j.get_status() for j in more] == ["finished"] * 4


def test_work_again_after_a_run_that_raised_starts_clean(queue, r, settings, caplog):
    """A run ended by an exception out of a hook (a BaseException gets past their guard)
    leaves its claimed job to the reaper; the next ``work()`` neither inherits its slot
    (no lease renewed for it, no signal to its pid) nor runs short of free slots."""
    class RaiseOnce(Middleware):
        raised = False

        def after_claim(self, worker, job):
            if not RaiseOnce.raised:
                RaiseOnce.raised = True
                raise KeyboardInterrupt

    q = queue()
    first = q.enqueue(HELLO, "a")
    w = Worker(q.name, r, settings=settings, middleware=[RaiseOnce()])
    with pytest.raises(KeyboardInterrupt):
        w.work(burst=True)
    second = q.enqueue(HELLO, "b")
    with caplog.at_level(logging.WARNING, logger="fusionworker"):
        assert w.work(burst=True) == 0
    assert second.get_status() == "finished"
    assert first.get_status() in ("started", "finished")   # its horse may have finished it
    assert not w.loop.slots


def test_a_later_work_without_burst_is_the_constructors(queue, r, settings):
    """``work(burst=True)`` once does not make the worker a burst worker for good."""
    q = queue()
    w = Worker(q.name, r, settings=settings)
    assert w.work(burst=True) == 0 and w.burst
    stop = threading.Timer(1.0, w.request_stop, args=("warm",))   # work() wants the main thread
    stop.start()
    t0 = time.monotonic()
    try:
        assert w.work() == 0
    finally:
        stop.cancel()
    assert time.monotonic() - t0 >= 0.9 and not w.burst    # it served until told to stop


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_work_refuses_a_max_jobs_that_is_no_count(r, settings, bad):
    with pytest.raises(ValueError, match="max_jobs must be a whole number"):
        Worker("default", r, settings=settings).work(burst=True, max_jobs=bad)


def test_heartbeat_and_version(r, settings):
    from fusionworker import __version__

    w = Worker("default", r, settings=settings, name="beating", defaults=False, middleware=[])
    w.register()
    try:
        data = r.hgetall(w.key)
        assert float(data["last_heartbeat"]) > 0 and data["version"] == __version__
    finally:
        w.deregister()


@pytest.mark.slow
def test_worker_all_and_count_list_the_live_workers_with_rqs_names(processes, queue, r,
                                                                   settings):
    """RQ's ``Worker.all(connection=r)`` / ``Worker.count(...)``: a real worker process
    listed from its heartbeat (its name, pid, queues, the job it runs, read back as a
    Job), filtered by queue; none once it is gone."""
    import signal

    from tests.waiting import wait_for

    q = queue("listed")
    assert Worker.all(r, settings=settings) == [] and Worker.count(r, settings=settings) == 0
    proc = processes.worker("-q", "listed,other")
    job = q.enqueue("tests.jobs:sleep", 5)
    wait_for(lambda: [w.get_current_job_id() for w in Worker.all(r, settings=settings)]
             == [job.id] or proc.poll() is not None, timeout=60, what="the worker ran it")
    [info] = Worker.all(connection=r, settings=settings)
    assert info.pid == proc.pid and info.queue_names() == ["listed", "other"]
    assert info.state == "busy" and info.current_job_ids == [job.id]
    running = info.get_current_job()
    assert running is not None and running.id == job.id and running.get_status() == "started"
    assert info.last_heartbeat is not None and info.birth_date is not None
    assert info.last_heartbeat >= info.birth_date
    assert Worker.count(r, queue=q, settings=settings) == 1
    assert Worker.count(r, queue="elsewhere", settings=settings) == 0
    proc.send_signal(signal.SIGTERM)                        # warm: the job finishes
    assert proc.wait(30) == 0 and job.get_status() == "finished"
    assert Worker.all(r, settings=settings) == []


@pytest.mark.slow
def test_idle_worker_warm_shutdown(processes, r, settings):
    import signal

    from tests.waiting import wait_for

    proc = processes.worker("-q", "idle")
    wait_for(lambda: admin.workers(r, settings.prefix) or proc.poll() is not None,
             timeout=60, what="the worker registered")
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert admin.workers(r, settings.prefix) == []        # deregistered on the way out


def test_run_scheduled_access_self(queue, work):
    import time

    job = queue().enqueue_in(0.2, "tests.compat.rq_jobs:access_self")
    time.sleep(0.3)
    work()
    assert job.return_value() == job.id


def _script_run(code: str, settings: Any, **env: str) -> str:
    import os
    import subprocess
    import sys

    full = {**os.environ, "REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
            "FUSIONWORKER_ALLOWED_MODULES": "tests", **env}
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_work_from_a_script_logs_its_start_like_the_cli(queue, settings):
    queue("scripted").enqueue(HELLO)
    plain = ("from fusionworker import Worker\n"
             "Worker(['scripted']).work(burst=True)\n")
    err = _script_run(plain, settings)
    assert "started on queues scripted" in err and "stopped (1 finished, 0 failed)" in err
    own = ("import logging, sys\n"
           "logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format='OWN %(message)s')\n"
           + plain)
    assert "started on queues" not in _script_run(own, settings)   # the program's config wins
    as_json = _script_run(plain, settings, FUSIONWORKER_LOG_FORMAT="json")
    assert '"message": "Worker' in as_json
