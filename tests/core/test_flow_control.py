"""Issue 4 on real Redis and real worker processes: suspend/resume, pause, fairness, throttle.

Order rule (proved below): a worker walks a cycle of its queues in which a
queue of weight w appears w times (``--customq sms:3,email:1`` ->
sms, sms, sms, email); each claim starts one place after the queue that gave
the previous job and skips empty or paused queues. With both queues non-empty
that is 3 sms per email, and a deep queue never starves a shallow one.
"""

from __future__ import annotations

import collections
import signal
import time

import pytest

from fusionworker.core import admin
from fusionworker.core.keys import Keys
from fusionworker.worker import parse_queue_spec
from tests.waiting import heartbeats, wait_for


def _one_worker_key(r, prefix):
    names = wait_for(lambda: r.smembers(Keys(prefix).workers))
    return Keys(prefix).worker(next(iter(names)))


@pytest.mark.slow
def test_suspend_lets_the_running_job_finish_then_claims_nothing(processes, queue, r, prefix):
    q = queue()
    processes.worker("--customq", "default")
    key = _one_worker_key(r, prefix)
    running = q.enqueue("tests.jobs:sleep", 1.0)
    wait_for(lambda: r.hget(key, "state") == "busy")
    admin.suspend(r, prefix)
    waiting = q.enqueue("tests.jobs:noop")
    wait_for(lambda: q.fetch_job(running.id).status == "finished", timeout=10)
    wait_for(lambda: r.hget(key, "state") == "suspended", timeout=5)
    heartbeats(r, key)             # went round its loop with the job there: claimed nothing
    assert q.fetch_job(waiting.id).status == "queued"
    admin.resume(r, prefix)
    wait_for(lambda: q.fetch_job(waiting.id).status == "finished", timeout=5)


@pytest.mark.slow
def test_suspend_with_a_duration_ends_by_itself(processes, queue, r, prefix):
    q = queue()
    processes.worker("--customq", "default")
    key = _one_worker_key(r, prefix)
    wait_for(lambda: r.hget(key, "state") == "idle")
    before = time.time()
    admin.suspend(r, prefix, duration=4.0)
    wait_for(lambda: r.hget(key, "state") == "suspended")
    job = q.enqueue("tests.jobs:noop")
    # nobody resumes: the key expires, the worker sees it and runs the job, never earlier
    done = wait_for(lambda: (j := q.fetch_job(job.id)).status == "finished" and j)
    assert done.started_at >= before + 4.0
    assert not r.exists(Keys(prefix).suspended)


def test_a_timed_suspension_that_ends_claims_at_once_not_at_the_next_poll(processes, queue,
                                                                         r, prefix):
    """The end of ``suspend --duration S`` is a key's expiry, which the heartbeat sees:
    the worker claims then, not at its next poll (30 s here; found by a trial)."""
    q = queue()
    processes.worker("--customq", "default", env={"FUSIONWORKER_POLL_INTERVAL": "30",
                                                  "FUSIONWORKER_HEARTBEAT_INTERVAL": "0.5"})
    key = _one_worker_key(r, prefix)
    wait_for(lambda: r.hget(key, "state") == "idle")
    admin.suspend(r, prefix, duration=1.0)
    ends = time.time() + 1.0
    wait_for(lambda: r.hget(key, "state") == "suspended")
    job = q.enqueue("tests.jobs:noop")
    done = wait_for(lambda: (j := q.fetch_job(job.id)).status == "finished" and j, timeout=60)
    assert done.started_at - ends < 5.0      # a heartbeat or two after the end, not 30 s


def test_pause_one_queue_while_another_drains(queue, burst, r):
    a, b = queue("a"), queue("b")
    ids_a = [a.enqueue("tests.jobs:noop").id for _ in range(5)]
    ids_b = [b.enqueue("tests.jobs:noop").id for _ in range(5)]
    a.pause()
    burst("a,b")
    assert all(b.fetch_job(i).status == "finished" for i in ids_b)
    assert all(a.fetch_job(i).status == "queued" for i in ids_a) and a.count == 5
    a.unpause()
    burst("a,b")
    assert all(a.fetch_job(i).status == "finished" for i in ids_a)


def _order(q_by_name, ids):
    jobs = [q_by_name[name].fetch_job(i) for name, i in ids]
    jobs.sort(key=lambda j: (j.started_at, j.ended_at))
    return [j.queue for j in jobs]


@pytest.mark.slow
def test_weighted_round_robin_holds_its_ratio_over_600_jobs(queue, burst):
    sms, email = queue("sms"), queue("email")
    ids = [("sms", sms.enqueue("tests.jobs:noop").id) for _ in range(450)]
    ids += [("email", email.enqueue("tests.jobs:noop").id) for _ in range(150)]
    burst("sms:3,email:1")
    order = _order({"sms": sms, "email": email}, ids)
    assert len(order) == 600
    for start in (0, 200, 400):                     # any stretch keeps 3:1 within 10 %
        window = collections.Counter(order[start:start + 200])
        assert abs(window["sms"] / 200 - 0.75) <= 0.075, (start, window)


def test_a_deep_queue_does_not_starve_a_shallow_one(queue, burst):
    deep, shallow = queue("deep"), queue("shallow")
    ids = [("deep", deep.enqueue("tests.jobs:noop").id) for _ in range(100)]
    ids += [("shallow", shallow.enqueue("tests.jobs:noop").id) for _ in range(5)]
    burst("deep,shallow")
    order = _order({"deep": deep, "shallow": shallow}, ids)
    assert [i for i, name in enumerate(order) if name == "shallow"] == [1, 3, 5, 7, 9]


def test_queue_spec_parsing():
    assert parse_queue_spec("sms:3,email") == [("sms", 3), ("email", 1)]
    for bad in ("sms:0", "sms:x", "", "bad name"):
        try:
            parse_queue_spec(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} must be refused")


def test_real_worker_throttles_below_current_ram_use_until_raised(processes, queue, r, prefix,
                                                                  tmp_path):
    """MEMORY_THROTTLE_THRESHOLD under this machine's RAM use: the worker claims nothing
    and says why; the threshold raised in its config file + SIGHUP: it resumes."""
    import psutil

    used = psutil.virtual_memory().percent
    low = {"MEMORY_THROTTLE_THRESHOLD": f"{used / 2:.1f}",
           "MEMORY_RESUME_THRESHOLD": f"{used / 4:.1f}", "MEMORY_CHECK_INTERVAL": "0.2"}
    config = tmp_path / "worker.env"
    config.write_text("".join(f"{k}={v}\n" for k, v in low.items()))
    q = queue()
    # as under systemd: the same file also loaded into the environment at start
    proc = processes.start("-c", str(config), "worker", "--customq", "default", env=low)
    key = _one_worker_key(r, prefix)
    job = q.enqueue("tests.jobs:noop")
    wait_for(lambda: r.hget(key, "state") == "throttled", timeout=10)
    assert "RAM at" in r.hget(key, "throttle")
    heartbeats(r, key)             # went round its loop with the job there: claimed nothing
    assert q.fetch_job(job.id).status == "queued"
    assert "MEMORY THROTTLE ACTIVE: RAM at" in processes.output(proc)

    config.write_text("MEMORY_THROTTLE_THRESHOLD=99.9\nMEMORY_RESUME_THRESHOLD=99.8\n"
                      "MEMORY_CHECK_INTERVAL=0.2\nFUSIONWORKER_JOB_TIMEOUT=5\n")
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=10)
    out = processes.output(proc)
    assert "MEMORY THROTTLE RELEASED" in out and "reloaded its settings" in out
    # a setting SIGHUP does not apply is said, not dropped without a word (a trial)
    assert "FUSIONWORKER_JOB_TIMEOUT changed, and takes effect at a restart only" in out
    assert out.count("takes effect at a restart only") == 1, out   # and nothing else
    wait_for(lambda: r.hget(key, "state") == "idle")
    assert r.hget(key, "throttle") == ""


@pytest.mark.serial
def test_real_worker_holds_claims_while_every_core_is_busy_and_resumes_after(processes, queue,
                                                                            r, prefix):
    """CPU_THROTTLE_THRESHOLD (issue 34): real processes spin on every core; the worker
    claims nothing and says why (CPU), and claims the job once they are gone."""
    import os
    import subprocess
    import sys

    from fusionworker.middleware.governor import CpuReader

    idle = CpuReader()
    time.sleep(1.0)                 # a window before the burn (not a latency bound)
    if idle() >= 90.0:              # other work pins the cores: "after" cannot be seen
        pytest.skip("the machine's cores are busy without this test's processes")
    # hysteresis as an operator sets it: a sample of 95 % or more holds the claims, and
    # they stay held until one falls under 80 % (a sample of 95.1 % while every core
    # spins must not release them)
    env = {"CPU_THROTTLE_THRESHOLD": "95", "CPU_RESUME_THRESHOLD": "80",
           "MEMORY_CHECK_INTERVAL": "0.3"}
    q = queue()
    proc = processes.worker("--customq", "default", env=env)
    key = _one_worker_key(r, prefix)
    wait_for(lambda: r.hget(key, "state") == "idle")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(2 * (os.cpu_count() or 1))]
    try:
        wait_for(lambda: r.hget(key, "state") == "throttled", timeout=20)
        assert r.hget(key, "throttle").startswith("CPU at")
        # the heartbeat shows it high (a heartbeat written before the burn said ~10 %)
        wait_for(lambda: float(r.hget(key, "cpu_percent") or 0) >= 80.0, timeout=20)
        job = q.enqueue("tests.jobs:noop")
        heartbeats(r, key)         # went round its loop with the job there: claimed nothing
        assert q.fetch_job(job.id).status == "queued"
        assert "CPU THROTTLE ACTIVE" in processes.output(proc)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=30)
    assert "CPU THROTTLE RELEASED" in processes.output(proc)
