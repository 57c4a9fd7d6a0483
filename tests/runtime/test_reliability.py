"""Reliability: dead-letter, cancel/delete, scheduling, dedup, caps, and every crash point.

Crash points proven here with real processes and real signals:

- cold shutdown (SIGTERM twice)          -> job back at its place, attempt not counted
- SIGKILL of the parent                  -> horse dies with it (PDEATHSIG); another
                                            worker's reaper re-queues the job
- SIGKILL of the horse                   -> job failed with reason ``killed``
- parent frozen past its lease (SIGSTOP) -> reaped; on waking its touch answers 0, it
                                            kills its horse, its late outcome is refused
- Redis killed and restarted mid-run     -> worker backs off, reconnects, loses nothing
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta

import psutil
import pytest
import redis

from fusionworker.core.queue import Queue, scripts_for
from fusionworker.exceptions import InvalidOperation, NoSuchJob
from fusionworker.middleware.callbacks import FailureCallbacks
from fusionworker.middleware.reaper import reap_once
from fusionworker.runtime.recorder import SHARED_DEATHS_MAX
from tests.chaos import worker_proc
from tests.conftest import WorkerProcesses
from tests.redis_servers import free_port
from tests.waiting import wait_for


def horse_of(proc: subprocess.Popen) -> psutil.Process:
    """The worker's horse: forked by its fork server, it leads its own process group (the
    fork server leads one too, but it is the worker's own child)."""
    def find() -> psutil.Process | None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if os.getpgid(child.pid) == child.pid and child.ppid() != proc.pid:
                    return child
            except (ProcessLookupError, psutil.NoSuchProcess):
                continue
        return None
    return wait_for(find)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- dead-letter, cancel, delete ---------------------------------------------------------


def test_requeue_from_failed_registry(queue, burst, r):
    q = queue()
    jobs = [q.enqueue("tests.jobs:boom") for _ in range(3)]
    burst()
    assert sorted(q.job_ids("failed")) == sorted(j.id for j in jobs)
    job = q.requeue(jobs[0].id)
    assert job.status == "queued" and job.attempts == 0
    assert q.job_ids() == [jobs[0].id]
    with pytest.raises(InvalidOperation):
        q.requeue(jobs[0].id)                    # not failed any more
    with pytest.raises(NoSuchJob):
        q.requeue("nope")
    assert q.requeue_all_failed() == 2
    assert q.job_ids("failed") == [] and len(q) == 3
    assert r.ttl(q.qkeys.job(jobs[1].id)) == -1  # the dead-letter retention is lifted


def test_failed_registry_retention_cleans_entries_and_records(queue, burst, settings, r):
    s = settings.replace(failed_ttl=1)
    q = Queue("default", r, settings=s)
    old = q.enqueue("tests.jobs:boom")
    burst(settings=s)
    assert 0 < r.ttl(q.qkeys.job(old.id)) <= 1
    assert q.job_ids("failed") == [old.id]

    def pruned() -> bool:
        reap_once(r, s)                          # the reaper prunes the registry
        return q.job_ids("failed") == [] and not r.exists(q.qkeys.job(old.id))
    wait_for(pruned, timeout=10, interval=0.1)


def test_empty_leaves_a_job_a_worker_claimed_after_it_was_listed(queue, r, monkeypatch):
    """``q.empty()`` lists the waiting jobs, then deletes them one by one: a job a worker
    claims in between is running, and stays (its record, its lease), uncounted."""
    q = queue()
    first, *rest = [q.enqueue("tests.jobs:noop") for _ in range(3)]
    listed = q._job_ids

    def listed_then_claimed(status, *args):
        ids = listed(status, *args)
        if status == "queued" and ids:      # a worker claims the first job right now
            scripts_for(r).claim(keys=[q.qkeys.base], args=["w.1", "tok", 60, 3600])
        return ids

    monkeypatch.setattr(q, "_job_ids", listed_then_claimed)
    assert q.empty() == 2
    monkeypatch.undo()
    assert q.fetch_job(first.id).status == "started"
    assert q.job_ids("started") == [first.id]
    assert all(q.fetch_job(job.id) is None for job in rest)


def test_empty_drops_a_waiting_entry_whose_record_is_gone(queue, r):
    """An entry of the queue whose record Redis lost (evicted, deleted by hand) is
    removed by ``q.empty()``, uncounted; it used to be listed again for ever."""
    q = queue()
    lost, kept = q.enqueue("tests.jobs:noop"), q.enqueue_in(60, "tests.jobs:noop")
    r.delete(q.qkeys.job(lost.id))
    assert q.empty() == 1
    assert q.job_ids("queued") == [] and q.job_ids("scheduled") == []
    assert q.fetch_job(kept.id) is None


def test_cancel_queued_and_scheduled_but_not_started(queue, r):
    q = queue()
    queued = q.enqueue("tests.jobs:noop")
    later = q.enqueue_in(60, "tests.jobs:noop")
    assert q.cancel(queued.id).status == "canceled"
    assert q.cancel(later.id).status == "canceled"
    assert len(q) == 0 and q.job_ids("scheduled") == []
    assert sorted(q.job_ids("canceled")) == sorted([queued.id, later.id])
    running = q.enqueue("tests.jobs:noop")
    scripts_for(r).claim(keys=[q.qkeys.base], args=["w", "tok", 60, 3600])
    with pytest.raises(InvalidOperation):
        q.cancel(running.id)
    with pytest.raises(NoSuchJob):
        q.cancel("nope")


def test_delete_removes_every_reference(queue, burst, r):
    q = queue()
    failed = q.enqueue("tests.jobs:boom", unique_key="k1")
    burst()
    queued = q.enqueue("tests.jobs:noop")
    q.delete(failed.id)
    q.delete(queued.id)
    assert q.fetch_job(failed.id) is None and q.fetch_job(queued.id) is None
    assert len(q) == 0 and q.job_ids("failed") == []
    with pytest.raises(NoSuchJob):
        q.delete(queued.id)


# -- scheduling, dedup, caps ---------------------------------------------------------------


@pytest.mark.slow
def test_scheduled_promotion_exactly_once_with_several_workers(processes, queue, r, prefix,
                                                               redis_url):
    q = queue()
    for _ in range(3):
        processes.worker("-q", "default")
    key = f"{prefix}:out"
    ids = [q.enqueue_in(1.0, "tests.jobs:record", redis_url, key, f"in{i}").id
           for i in range(30)]
    when = datetime.now(UTC) + timedelta(seconds=1.0)
    ids += [q.enqueue_at(when, "tests.jobs:record", redis_url, key, f"at{i}").id
            for i in range(10)]
    assert all(q.fetch_job(i).status == "scheduled" for i in ids)
    wait_for(lambda: all(q.fetch_job(i).status == "finished" for i in ids), timeout=20)
    out = r.lrange(key, 0, -1)
    assert sorted(out) == sorted([f"in{i}" for i in range(30)] + [f"at{i}" for i in range(10)])
    for i in ids:
        job = q.fetch_job(i)
        assert job.attempts == 1 and job.started_at >= job.scheduled_for


def test_dedup_by_job_id_and_unique_key_within_window(queue, burst, settings, r):
    s = settings.replace(dedup_window=4)  # the burst below ends well within it, even loaded
    q = Queue("default", r, settings=s)
    first = q.enqueue("tests.jobs:noop", job_id="report-1")
    again = q.enqueue("tests.jobs:noop", job_id="report-1")
    assert not first.deduplicated and again.deduplicated and again.id == "report-1"
    keyed = q.enqueue("tests.jobs:noop", unique_key="user:7")
    dup = q.enqueue("tests.jobs:noop", unique_key="user:7")
    assert dup.deduplicated and dup.id == keyed.id
    later = q.enqueue_in(30, "tests.jobs:noop", unique_key="user:8")
    assert q.enqueue("tests.jobs:noop", unique_key="user:8").id == later.id   # scheduled
    assert len(q) == 2
    burst(settings=s)
    assert q.enqueue("tests.jobs:noop", job_id="report-1").deduplicated      # finished < 4 s ago
    assert q.enqueue("tests.jobs:noop", unique_key="user:7").deduplicated
    # once the window is over the same id is a new job (tried again until it is)
    def new_job(**key):
        job = q.enqueue("tests.jobs:noop", **key)
        return None if job.deduplicated else job
    fresh = wait_for(lambda: new_job(job_id="report-1"), timeout=10, interval=0.1)
    assert fresh.status == "queued"
    other = wait_for(lambda: new_job(unique_key="user:7"), timeout=10, interval=0.1)
    assert other.id != keyed.id
    # a failed job does not block its key
    bad = q.enqueue("tests.jobs:boom", unique_key="user:9")
    q.cancel(other.id)
    q.cancel(fresh.id)
    burst(settings=s)
    assert q.fetch_job(bad.id).status == "failed"
    assert not q.enqueue("tests.jobs:noop", unique_key="user:9").deduplicated


def max_overlap(entries: list[str]) -> int:
    events = []
    for entry in entries:
        kind, _, stamp = entry.split(":")
        events.append((float(stamp), 1 if kind == "start" else -1))
    events.sort(key=lambda e: (e[0], e[1]))     # an end before a start at the same instant
    active = peak = 0
    for _, delta in events:
        active += delta
        peak = max(peak, active)
    return peak


@pytest.mark.slow
def test_concurrency_cap_holds_across_four_workers(processes, queue, r, prefix, redis_url):
    q = queue("capped")
    q.set_max_active(2)
    assert q.max_active == 2
    key = f"{prefix}:spans"
    ids = [q.enqueue("tests.jobs:record_span", redis_url, key, f"j{i}", 0.25).id
           for i in range(16)]
    for _ in range(4):
        processes.worker("-q", "capped")
    wait_for(lambda: all(q.fetch_job(i).status == "finished" for i in ids), timeout=30)
    spans = r.lrange(key, 0, -1)
    assert len(spans) == 32
    assert max_overlap(spans) == 2, spans
    q.set_max_active(None)
    assert q.max_active is None


# -- fencing: late outcomes --------------------------------------------------------------


def test_finish_with_an_old_token_is_refused(queue, settings, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=3)
    scripts = scripts_for(r)
    scripts.claim(keys=[q.qkeys.base], args=["dead.1", "old", -1, 3600])
    assert reap_once(r, settings)["requeued"] == 1
    scripts.claim(keys=[q.qkeys.base], args=["live.1", "new", 60, 3600])
    args = [job.id, "old", "finished", 500, 3600, 0, 30, "", "result", "1"]
    assert scripts.finish(keys=[q.qkeys.base], args=args) == ["stale"]
    assert scripts.touch(keys=[q.qkeys.base], args=[job.id, "old", 60]) == 0
    current = q.fetch_job(job.id)
    # (the reaped run was not counted: its worker was lost under it)
    assert current.status == "started" and current.token == "new" and current.attempts == 1
    args[1] = "new"
    assert scripts.finish(keys=[q.qkeys.base], args=args)[:2] == ["ok", "finished"]


@pytest.mark.slow
def test_frozen_parent_is_reaped_then_kills_its_horse_and_is_refused(
        processes, queue, r, prefix, redis_url, settings):
    q = queue()
    job = q.enqueue("tests.jobs:record", redis_url, f"{prefix}:out", "x", 4, max_retries=3)
    proc = worker_proc.start(processes, lease=1.5)
    wait_for(lambda: q.fetch_job(job.id).status == "started")
    first_horse = horse_of(proc)
    os.kill(proc.pid, signal.SIGSTOP)          # the horse runs on; nobody renews the lease
    try:
        wait_for(lambda: reap_once(r, settings)["requeued"], timeout=10, interval=0.1)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: gone(first_horse.pid), timeout=5)    # killed before its rpush
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=15)
    # its worker froze under it: not its doing, the attempt is not counted
    assert q.fetch_job(job.id).attempts == 1 and q.fetch_job(job.id).shared_deaths == 1
    assert r.lrange(f"{prefix}:out", 0, -1) == ["x"]       # one horse at a time
    log = worker_proc.output(proc)
    assert "was taken back while running (or its record lost with Redis's data); killing its horse" in log
    assert "outcome of job" in log and "refused" in log


@pytest.mark.slow
def test_a_parent_that_wakes_past_the_deadline_and_renews_gives_the_job_back(
        processes, queue, r, prefix, redis_url):
    """The parent alone frozen past its horse's deadline, not reaped (no reaper runs):
    its fork server killed the horse at the deadline; the parent wakes, its first
    heartbeat still renews the lease (nobody took it back), then it reads the death.
    The renewal came after the deadline it moves: the horse died of the lease (given
    back, not counted), not "killed from outside" (failed: max_retries is 0)."""
    q = queue()
    job = q.enqueue("tests.jobs:record", redis_url, f"{prefix}:out", "x", 6, max_retries=0)
    proc = worker_proc.start(processes, lease=3, FUSIONWORKER_REAPER_INTERVAL="600")
    wait_for(lambda: q.fetch_job(job.id).status == "started")
    horse = horse_of(proc)
    os.kill(proc.pid, signal.SIGSTOP)              # the parent only: its fork server runs
    try:
        wait_for(lambda: gone(horse.pid), timeout=10, interval=0.05)  # its lease watchdog
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    done = wait_for(lambda: q.fetch_job(job.id).status in ("finished", "failed")
                    and q.fetch_job(job.id), timeout=30)
    assert done.status == "finished", (done.error_type, done.error_message)
    assert done.attempts == 1
    assert r.lrange(f"{prefix}:out", 0, -1) == ["x"]
    assert "interrupted by its lease could not be renewed" in worker_proc.output(proc)


@pytest.mark.slow
def test_an_async_horse_whose_parent_wakes_past_the_deadline_charges_none_of_its_jobs(
        processes, queue, r, prefix, redis_url):
    """The same with one async horse running two jobs (``--async-per-horse 2``): the
    fork server kills the horse at the first deadline while the parent is frozen; the
    parent's late renewal moves nothing. Each job is given back as ``lease`` (not as an
    unexplained death of the horse it shared, which would count toward its bound of
    shared deaths) and runs again: none is charged (max_retries 0)."""
    q = queue()
    pids = f"{prefix}:pids"
    jobs = [q.enqueue("tests.async_horse_jobs:pushed_stamp", redis_url, pids, 6, max_retries=0)
            for _ in range(2)]
    proc = worker_proc.start(processes, lease=3, FUSIONWORKER_REAPER_INTERVAL="600",
                             FUSIONWORKER_CONCURRENCY="2", FUSIONWORKER_HORSE_JOBS="10",
                             FUSIONWORKER_ASYNC_PER_HORSE="2")
    wait_for(lambda: r.llen(pids) == 2)
    (horse,) = {int(pid) for pid in r.lrange(pids, 0, -1)}     # one horse runs both
    os.kill(proc.pid, signal.SIGSTOP)              # the parent only: its fork server runs
    try:
        wait_for(lambda: gone(horse), timeout=10, interval=0.05)  # its lease watchdog
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    for job in jobs:
        done = wait_for(lambda j=job: q.fetch_job(j.id).status in ("finished", "failed")
                        and q.fetch_job(j.id), timeout=30)
        assert done.status == "finished", (done.error_type, done.error_message)
        assert done.attempts == 1
        assert done.result[0] != horse                 # it ran again, in another horse
        assert done.shared_deaths == 0      # not "shared": the horse died of their leases
    log = worker_proc.output(proc)
    assert log.count("interrupted by its lease could not be renewed") == 2, log


# -- crashes of the worker's processes -----------------------------------------------------


def test_cold_shutdown_returns_the_job(processes, queue):
    q = queue()
    job = q.enqueue("tests.jobs:sleep", 30, timeout=60)
    behind = q.enqueue("tests.jobs:noop")
    proc = processes.worker("-q", "default")
    wait_for(lambda: q.fetch_job(job.id).status == "started")
    horse = horse_of(proc)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "warm shutdown" in processes.output(proc))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert gone(horse.pid)
    job = q.fetch_job(job.id)
    assert job.status == "queued" and job.attempts == 0
    assert q.job_ids() == [job.id, behind.id]
    assert "interrupted by cold shutdown" in processes.output(proc)


@pytest.mark.slow
def test_sigkill_parent_kills_horse_and_job_is_reaped_elsewhere(processes, queue, r, prefix,
                                                                 redis_url):
    q = queue()
    job = q.enqueue("tests.jobs:record", redis_url, f"{prefix}:out", "x", 3, max_retries=2)
    doomed = worker_proc.start(processes, lease=1.5)
    wait_for(lambda: q.fetch_job(job.id).status == "started")
    horse = horse_of(doomed)
    doomed.kill()
    doomed.wait(5)
    wait_for(lambda: gone(horse.pid), timeout=3)            # PR_SET_PDEATHSIG
    rescuer = worker_proc.start(processes, lease=1.5, FUSIONWORKER_REAPER_INTERVAL="0.3")
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=15)
    job = q.fetch_job(job.id)
    assert job.attempts == 1 and job.worker_name == f"{socket.gethostname()}.{rescuer.pid}"
    assert job.shared_deaths == 1          # its worker died under it: not counted
    assert r.lrange(f"{prefix}:out", 0, -1) == ["x"]
    assert f"Reaper: job {job.id} on default was stuck" in worker_proc.output(rescuer)


def test_sigkill_horse_fails_job_with_reason_killed(processes, queue):
    q = queue()
    job = q.enqueue("tests.jobs:sleep", 30, timeout=60, max_retries=3)
    proc = processes.worker("-q", "default")
    wait_for(lambda: q.fetch_job(job.id).status == "started")
    horse_of(proc).kill()
    wait_for(lambda: q.fetch_job(job.id).status == "failed")
    job = q.fetch_job(job.id)
    assert job.failure_reason == "killed" and "SIGKILL" in job.error_message
    nxt = q.enqueue("tests.jobs:add", 1, 2)                  # the worker goes on
    wait_for(lambda: q.fetch_job(nxt.id).status == "finished")
    assert proc.poll() is None


# -- failure callback ----------------------------------------------------------------------


class Hook(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, dict]] = []
    #: while set to an unset Event, every request waits for it before it is answered
    gate: threading.Event | None = None

    def do_POST(self) -> None:  # http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.gate is not None:
            self.gate.wait(30)
        self.received.append((self.path, json.loads(body)))
        self.send_response(500 if self.path.startswith("/broken") else 200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook():
    Hook.received, Hook.gate = [], None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_failure_callback_posts_after_final_failure_only(queue, burst, settings, webhook):
    s = settings.replace(failure_webhook_url=webhook + "/global")
    mw = FailureCallbacks(s)
    q = Queue("default", queue().connection, settings=s)
    failed = q.enqueue("tests.jobs:boom", "bad input")
    own = q.enqueue("tests.jobs:boom", on_failure_url=webhook + "/own")
    q.enqueue("tests.jobs:conn_error", max_retries=2, retry_delay=30)   # retry: no POST
    q.enqueue("tests.jobs:noop")
    burst(settings=s, middleware=[mw])
    mw.close()
    got = dict(Hook.received)
    assert set(got) == {"/global", "/own"} and mw.sent == 2
    body = got["/global"]
    assert body["job_id"] == failed.id and body["queue"] == "default"
    assert body["function"] == "tests.jobs:boom" and body["attempts"] == 1
    assert body["error"] == "ValueError: bad input" and body["reason"] == "exception"
    assert got["/own"]["job_id"] == own.id


def test_a_job_stopped_on_request_posts_no_failure(queue, settings, webhook):
    """`job stop` is an operator's act: the failure webhook is not called for it (as
    Celery's revoke is no task_failure); a failure beside it still is."""
    from fusionworker.core.hooks import Outcome, OutcomeReason, OutcomeStatus

    mw = FailureCallbacks(settings.replace(failure_webhook_url=webhook + "/global"))
    job = queue().enqueue("tests.jobs:noop")

    class Named:
        name = "w1"

    for reason in (OutcomeReason.STOPPED, OutcomeReason.EXCEPTION):
        mw.after_finish(Named(), job, Outcome(status=OutcomeStatus.FAILED, reason=reason,
                                              error_type="E", error_message="m"))
    mw.close()
    assert [body["reason"] for _, body in Hook.received] == ["exception"] and mw.sent == 1


def test_failure_callback_errors_are_counted_and_never_block(queue, burst, settings, webhook):
    Hook.gate = gate = threading.Event()   # the hook answers only when the test says so
    mw = FailureCallbacks(settings.replace(failure_webhook_url=webhook + "/broken"),
                          timeout=20)
    q = queue()
    q.enqueue("tests.jobs:boom")
    q.enqueue("tests.jobs:boom", on_failure_url="http://127.0.0.1:9/closed")
    try:
        burst(middleware=[mw])
        # the jobs are done while the first POST is still unanswered (and the second
        # waits behind it): the worker did not wait for the hooks
        assert (mw.sent, mw.failed) == (0, 0)
    finally:
        gate.set()
    wait_for(lambda: mw.failed == 2, timeout=10)    # a 500 and a refused connection
    assert mw.sent == 0 and mw.describe()["callbacks_failed"] == 2
    mw.close()
    Hook.gate = gate = threading.Event()
    slow = FailureCallbacks(settings, timeout=0.2)
    try:
        assert slow.submit(webhook + "/slow", {"job_id": "c"})
        wait_for(lambda: slow.failed == 1, timeout=10)  # no answer within its timeout
    finally:
        gate.set()
        slow.close()
    tiny = FailureCallbacks(settings, buffer=1)
    tiny._ensure_thread = lambda: None                # nobody drains: the buffer fills
    assert tiny.submit(webhook, {"job_id": "a"}) and not tiny.submit(webhook, {"job_id": "b"})
    assert tiny.dropped == 1


def test_a_webhooks_secrets_never_reach_the_log(settings, webhook, caplog):
    """A webhook URL's user and password, path and query may each be its secret: the
    log of a refused connection and of an HTTP error names only scheme, host and port."""
    host = webhook.removeprefix("http://")
    secrets = ("pw-s3cret", "path-s3cret", "tok-s3cret")
    mw = FailureCallbacks(settings, timeout=5)
    caplog.set_level(logging.INFO, logger="fusionworker")
    try:
        mw.submit("http://alerts:pw-s3cret@127.0.0.1:9/hook/path-s3cret?token=tok-s3cret",
                  {"job_id": "refused"})
        mw.submit(f"http://alerts:pw-s3cret@{host}/broken/path-s3cret?token=tok-s3cret",
                  {"job_id": "answered-500"})
        mw.submit(f"http://alerts:pw-s3cret@{host}/ok/path-s3cret?token=tok-s3cret",
                  {"job_id": "sent"})
        # what the HTTP library percent-encodes (a space, a line end) is hidden as well
        mw.submit("http://127.0.0.1:9/hook/path-s3cret x?token=tok-s3cret x\r\nX: 1",
                  {"job_id": "encoded"})
        mw.submit("alerts:pw-s3cret@127.0.0.1:9/hook", {"job_id": "no-scheme"})
        wait_for(lambda: mw.failed == 4 and mw.sent == 1, timeout=10)
    finally:
        mw.close()
    lines = [r.getMessage() for r in caplog.records if "callback" in r.getMessage()]
    assert len(lines) == 5, lines
    assert any("127.0.0.1:9" in line and "refused" in line for line in lines), lines
    assert any(host in line and "500" in line for line in lines), lines
    for line in lines:
        assert not any(secret in line for secret in secrets), line
        assert "alerts" not in line, line


# -- Redis down ----------------------------------------------------------------------------


def start_redis(port: int, folder) -> subprocess.Popen:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "yes", "--appendfsync", "always", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    wait_for(lambda: _pings(client), timeout=10)
    return proc


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


#: Seconds Redis stays down at least (the issue asks for 30; backing off is the same code
#: path): by default it comes back once the worker has backed off three times.
OUTAGE = float(os.environ.get("FW_TEST_REDIS_OUTAGE", "0"))


def backed_off(procs: WorkerProcesses, worker: subprocess.Popen, times: int,
               timeout: float = 30.0) -> None:
    """Wait until the worker has logged ``times`` more Redis back-offs (alive all along)."""
    def count() -> int:
        return procs.output(worker).count("Redis unreachable")
    start = count()

    def enough() -> bool:
        assert worker.poll() is None, procs.output(worker)
        return count() >= start + times
    wait_for(enough, timeout=timeout, interval=0.05, what=f"{times} back-offs")


@pytest.mark.slow
def test_redis_restart_mid_run_loses_nothing(settings, tmp_path):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_redis(port, tmp_path)
    s = settings.replace(redis_url=url)
    procs = WorkerProcesses(s, tmp_path)
    try:
        r = redis.Redis.from_url(url, decode_responses=True)
        q = Queue("default", r, settings=s, events=False)  # a private server: no shared sink
        key = f"{s.prefix}:out"
        ids = [q.enqueue("tests.jobs:record", url, key, f"j{i}", 0.2, max_retries=5,
                         retry_delay=0.2).id for i in range(30)]
        worker = procs.worker("-q", "default")
        wait_for(lambda: r.llen(key) >= 5, timeout=15)
        server.kill()                                   # mid-run: a job is running now
        server.wait(5)
        down = time.monotonic()
        backed_off(procs, worker, 3)                    # the outage is noticed and outlived
        time.sleep(max(0.0, down + OUTAGE - time.monotonic()))
        assert worker.poll() is None, procs.output(worker)
        server = start_redis(port, tmp_path)            # same data (AOF, fsync always)
        wait_for(lambda: all(q.fetch_job(i).status == "finished" for i in ids), timeout=40)
        out = r.lrange(key, 0, -1)
        assert set(out) == {f"j{i}" for i in range(30)}
        log = procs.output(worker)
        assert "Redis unreachable" in log
        assert worker.poll() is None
    finally:
        procs.stop_all()
        server.kill()
        server.wait(5)



def test_failure_callback_for_a_job_abandoned_by_the_reaper(queue, settings, r, webhook):
    from fusionworker.middleware.reaper import ReaperMiddleware

    s = settings.replace(failure_webhook_url=webhook + "/global", reaper_interval=0.05)
    q = Queue("default", r, settings=s)
    job = q.enqueue("tests.jobs:noop")
    r.hset(q.qkeys.job(job.id), "shared_deaths", SHARED_DEATHS_MAX - 1)   # its last loss
    scripts_for(r).claim(keys=[q.qkeys.base], args=["dead.9", "tok", -1, 3600])
    hooks, reaper = FailureCallbacks(s), ReaperMiddleware(s)

    class FakeWorker:
        connection, settings, name, middleware = r, s, "w.1", [reaper, hooks]
    wait_for(lambda: (reaper.on_tick(FakeWorker), reaper.passes)[1])  # its first pass is due
    hooks.close()
    assert [(path, body["job_id"], body["reason"]) for path, body in Hook.received] == [
        ("/global", job.id, "abandoned")]


@pytest.mark.slow
def test_frozen_redis_makes_the_worker_back_off_not_hang(settings, tmp_path):
    """Redis stopped with SIGSTOP (no RST, no reply): the socket timeout turns the hang
    into 'unreachable', the worker backs off, and carries on once Redis thaws."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0?socket_timeout=1"
    server = start_redis(port, tmp_path)
    s = settings.replace(redis_url=url)
    procs = WorkerProcesses(s, tmp_path)
    try:
        r = redis.Redis(port=port, decode_responses=True)
        q = Queue("default", r, settings=s, events=False)  # a private server: no shared sink
        key = f"{s.prefix}:out"
        first = [q.enqueue("tests.jobs:record", url, key, f"a{i}").id for i in range(3)]
        worker = procs.worker("-q", "default")
        wait_for(lambda: r.llen(key) == 3, timeout=15)
        server.send_signal(signal.SIGSTOP)
        backed_off(procs, worker, 2)                    # timed out, backed off, and again
        assert worker.poll() is None
        server.send_signal(signal.SIGCONT)
        later = [q.enqueue("tests.jobs:record", url, key, f"b{i}").id for i in range(3)]
        wait_for(lambda: all(q.fetch_job(i).status == "finished" for i in first + later),
                 timeout=20)
        assert "Redis unreachable" in procs.output(worker)
        assert worker.poll() is None
    finally:
        procs.stop_all()
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(5)


def test_a_recorded_outcome_whose_reply_was_lost_is_not_sent_again(queue, settings, r):
    """landed(): after a lost reply the worker looks before writing the outcome twice."""
    from fusionworker.worker import Outcome, Worker

    q = queue()
    q.enqueue("tests.jobs:noop")
    w = Worker("default", r, settings=settings, defaults=False, middleware=[], name="landed-test")
    [job] = w.claimer.claim(1).jobs
    done = Outcome(status="finished", reason="ok", result="null")
    assert not w.recorder.landed(job, done)                 # nothing written yet
    w.recorder.record_alone(job, done)
    assert w.recorder.landed(job, done)                     # our write is there
    assert not w.recorder.landed(job, Outcome(status="retry", reason="exception"))
    r.hset(q.qkeys.job(job.id), "worker", "someone-else")   # re-run elsewhere meanwhile
    assert not w.recorder.landed(job, done)


def test_the_finish_pipeline_returns_the_jobs_its_claim_brought(queue, settings, r):
    """The recorder writes job N's outcome and claims job N+1 in one round trip, and
    returns N+1 (nothing is left in a field); N's outcome is recorded first."""
    from fusionworker.worker import Outcome, Worker

    q = queue()
    first = q.enqueue("tests.jobs:noop")
    second = q.enqueue("tests.jobs:noop", priority=-1)
    w = Worker("default", r, settings=settings, defaults=False, middleware=[], name="returns")
    w.register()
    try:
        [job] = w.claimer.claim(1).jobs
        assert job.id == first.id
        done = Outcome(status="finished", reason="ok", result="null")
        claimed = w.recorder.record([(job, done)], w.claimer.plan(1)).claimed
        assert [j.id for j in claimed.jobs] == [second.id] and not claimed.short
        assert q.fetch_job(first.id).status == "finished"
        assert q.fetch_job(second.id).status == "started"
        assert q.fetch_job(second.id).token == claimed.jobs[0].token
        again = w.recorder.record([(claimed.jobs[0], done)], w.claimer.plan(1)).claimed
        assert again.jobs == [] and again.short and again.dry == {"default"}
    finally:
        w.deregister()


def test_a_job_claimed_by_the_finish_pipeline_is_given_back_at_shutdown(queue, settings, r):
    """finish(N) + claim(N+1) ride one pipeline, and the recorder returns job N+1; if
    shutdown begins then, job N+1 never started: it goes back to its place with its
    attempt not counted."""
    from fusionworker.core.hooks import Middleware
    from fusionworker.core.keys import Keys
    from fusionworker.worker import Worker

    q = queue()
    first = q.enqueue("tests.jobs:noop")
    second = q.enqueue("tests.jobs:noop")
    third = q.enqueue("tests.jobs:noop")

    class StopAfterFirst(Middleware):      # shutdown begins while job N+1 is in hand
        seen: list[tuple[str, str]] = []

        def after_finish(self, worker, job, outcome):
            self.seen.append((job.id, q.fetch_job(second.id).status))
            worker.request_stop("warm")

    stop = StopAfterFirst()
    # no heartbeat falls due during the first job: its finish pipeline may claim
    w = Worker("default", r, settings=settings.replace(heartbeat_interval=10.0, lease=30.0),
               defaults=False, middleware=[stop], name="giveback")
    assert w.work() == 0
    assert q.fetch_job(first.id).status == "finished"
    assert stop.seen == [(first.id, "started")]     # claimed in the same round trip
    back = q.fetch_job(second.id)
    assert back.status == "queued" and back.attempts == 0
    assert r.zrevrange(q.qkeys.pending, 0, -1) == [second.id, third.id]
    assert r.zcard(q.qkeys.started) == 0
    assert not r.exists(Keys(settings.prefix).worker("giveback"))


@pytest.mark.slow
def test_a_suspended_burst_worker_exits_at_once_leaving_its_jobs_queued(processes, queue, r,
                                                                          prefix):
    """As RQ's ("Suspended in burst mode, exiting"): a ``--burst`` worker started while
    the workers are suspended claims nothing and exits 0 at once, saying jobs are left;
    it never waits for a resume (a burst run from cron or CI must end). The same in a
    test process (``run_burst``)."""
    from fusionworker.core import admin
    from fusionworker.testing import run_burst

    q = queue()
    job = q.enqueue("tests.jobs:noop")
    admin.suspend(r, prefix)
    try:
        proc = processes.worker("-q", q.name, "--burst")
        assert proc.wait(30) == 0
        assert q.fetch_job(job.id).status == "queued"
        said = processes.output(proc)
        assert "exits with jobs still queued" in said and "suspended, burst done" in said
        assert "queues empty" not in said          # it was not: one job is queued
        t0 = time.monotonic()
        assert run_burst(q) == [] and time.monotonic() - t0 < 10
        assert q.fetch_job(job.id).status == "queued"
    finally:
        admin.resume(r, prefix)
    assert [j.id for j in run_burst(q)] == [job.id]           # resumed: it runs


def test_scripts_flushed_between_every_step_still_run_each_job_once(settings):
    """Redis forgets its scripts (a restart, a failover) before each claim, each
    claim riding in a finish pipeline, and each heartbeat: every NOSCRIPT answer is
    made again directly (claim.lua, the outcomes, touch_many), each job runs once."""
    from fusionworker.core.hooks import Middleware
    from fusionworker.worker import Worker
    from tests.redis_servers import start_single

    port, stop = start_single()
    try:
        client = redis.Redis(port=port, decode_responses=True)
        key = f"{settings.prefix}ran"
        url = f"redis://127.0.0.1:{port}/0"
        private = settings.replace(redis_url=url)
        q = Queue("flushed", client, settings=private)
        ids = [q.enqueue("tests.jobs:record", url, key, i, 0.3).id for i in range(4)]
        flushes = []

        class Forgetful(Middleware):
            def before_claim(self, worker):
                flushes.append(client.script_flush())
                return None

            def on_tick(self, worker):
                client.script_flush()

        w = Worker("flushed", client, settings=private, burst=True, defaults=False,
                   middleware=[Forgetful()])
        assert w.work() == 0
        assert sorted(int(v) for v in client.lrange(key, 0, -1)) == [0, 1, 2, 3]
        assert (w.successful, w.failed) == (4, 0) and len(flushes) >= 4
        assert all(q.fetch_job(i).get_status() == "finished" for i in ids)
    finally:
        stop()
