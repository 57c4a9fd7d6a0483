"""Job groups: at most one job of a group runs at a time, in enqueue order, across
all workers; other groups and ungrouped jobs are not blocked; the group passes on
at finish, failure, timeout, cancel, delete and when the reaper gives up on a job
of a dead worker, and stays with a job that is retried or re-queued."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import defaultdict

import pytest

from fusionworker.core.groups import busy_groups, describe_busy_groups
from fusionworker.middleware.reaper import reap_once
from fusionworker.runtime.recorder import SHARED_DEATHS_MAX
from tests.waiting import wait_for


def claim(q, lease: float = 30.0, worker: str = "ghost") -> tuple[str, str] | None:
    """Claim the best job of ``q`` as worker ``worker``: (job id, token), or None."""
    token = uuid.uuid4().hex
    reply = q.scripts.claim(keys=[q.qkeys.base],
                            args=[worker, token, lease, q.settings.failed_ttl])
    if reply[0] != "job":
        return None
    data = dict(zip(reply[2][::2], reply[2][1::2]))
    return data["id"], token


def finish(q, job_id: str, token: str, outcome: str = "finished", delay: float = 0) -> None:
    reply = q.scripts.finish(keys=[q.qkeys.base],
                             args=[job_id, token, outcome, 60, 60, delay, 0])
    assert reply[0] == "ok", reply


def pending(q) -> list[str]:
    return q.job_ids("queued")


def test_only_the_holder_is_pending_the_rest_wait_in_order(r, queue, settings):
    q = queue()
    a, b, c = (q.enqueue("tests.jobs:noop", group="g").id for _ in range(3))
    assert pending(q) == [a]
    assert busy_groups(r, settings.prefix, "default") == {"g": a}
    assert r.lrange(q.qkeys.group("g"), 0, -1) == [b, c]
    assert [q.fetch_job(x).status for x in (a, b, c)] == ["queued"] * 3
    [busy] = describe_busy_groups(r, settings.prefix, "default")
    assert (busy.group, busy.job_id, busy.job_status, busy.waiting) == ("g", a, "queued", 2)
    assert q.stats()["busy_groups"] == 1


def test_a_busy_group_blocks_nobody_else(queue):
    q = queue()
    a = q.enqueue("tests.jobs:noop", group="g1").id
    b = q.enqueue("tests.jobs:noop", group="g1").id
    c = q.enqueue("tests.jobs:noop").id
    d = q.enqueue("tests.jobs:noop", group="g2").id
    e = q.enqueue("tests.jobs:noop", group="g1", priority=100).id  # priority does not jump a group
    got = [claim(q) for _ in range(4)]
    assert [g[0] for g in got[:3]] == [a, c, d] and got[3] is None
    finish(q, *got[0])
    assert claim(q)[0] == b
    assert pending(q) == [] and q.fetch_job(e).status == "queued"


def test_group_passes_on_at_finish_failure_and_timeout(r, queue, settings, burst):
    q = queue()
    key = f"{settings.prefix}:order"
    ids = [
        q.enqueue("tests.jobs:record", settings.redis_url, key, "a", group="g").id,
        q.enqueue("tests.jobs:boom", group="g").id,
        q.enqueue("tests.jobs:sleep", 5, group="g", timeout=0.3).id,
        q.enqueue("tests.jobs:record", settings.redis_url, key, "d", group="g").id,
    ]
    burst()
    jobs = [q.fetch_job(x) for x in ids]
    assert [j.status for j in jobs] == ["finished", "failed", "failed", "finished"]
    assert jobs[2].failure_reason == "timeout"
    assert [j.started_at for j in jobs] == sorted(j.started_at for j in jobs)
    assert r.lrange(key, 0, -1) == ["a", "d"]
    assert busy_groups(r, settings.prefix, "default") == {}
    assert not r.exists(q.qkeys.group("g"))


def test_retry_keeps_the_group(r, queue, settings):
    q = queue()
    a = q.enqueue("tests.jobs:noop", group="g").id
    b = q.enqueue("tests.jobs:noop", group="g").id
    jid, token = claim(q)
    finish(q, jid, token, "retry", delay=0.3)
    assert q.fetch_job(a).status == "scheduled"
    assert busy_groups(r, settings.prefix, "default") == {"g": a}
    assert claim(q) is None  # b waits for a's retry
    jid, token = wait_for(lambda: claim(q))    # the retry is due: a again, still before b
    assert jid == a
    finish(q, jid, token)
    assert claim(q)[0] == b


def test_cancel_and_delete_pass_the_group_on(r, queue, settings):
    q = queue()
    a, b, c, d = (q.enqueue("tests.jobs:noop", group="g").id for _ in range(4))
    q.cancel(b)                        # a waiting job leaves the line
    assert r.lrange(q.qkeys.group("g"), 0, -1) == [c, d]
    q.cancel(a)                        # the queued holder: c is next
    assert pending(q) == [c]
    q.delete(c)                        # deleted holder: d is next
    assert pending(q) == [d] and busy_groups(r, settings.prefix, "default") == {"g": d}
    q.delete(d)
    assert busy_groups(r, settings.prefix, "default") == {}


def test_requeued_failed_job_rejoins_the_back_of_its_group(queue):
    q = queue()
    a = q.enqueue("tests.jobs:noop", group="g").id
    b = q.enqueue("tests.jobs:noop", group="g").id
    jid, token = claim(q)
    finish(q, jid, token, "failed")
    assert claim(q)[0] == b            # b holds the group now (started)
    q.requeue(a)
    assert pending(q) == []            # a waits behind the running b


def test_cold_shutdown_return_keeps_the_group(r, queue, settings):
    q = queue()
    a = q.enqueue("tests.jobs:noop", group="g").id
    b = q.enqueue("tests.jobs:noop", group="g").id
    jid, token = claim(q)
    reply = q.scripts.requeue(keys=[q.qkeys.base], args=[jid, "return", token, 60])
    assert reply[0] == "requeued"
    assert pending(q) == [a] and busy_groups(r, settings.prefix, "default") == {"g": a}
    assert claim(q)[0] == a and q.fetch_job(b).status == "queued"


def test_reaper_requeue_keeps_the_group_and_abandon_releases_it(r, queue, settings):
    q = queue()
    a = q.enqueue("tests.jobs:noop", group="g", max_retries=1).id
    b = q.enqueue("tests.jobs:noop", group="g").id
    assert claim(q, lease=-1, worker="dead-worker")[0] == a   # lease over, no heartbeat key
    counts = reap_once(r, settings)
    assert counts["requeued"] == 1
    assert pending(q) == [a] and busy_groups(r, settings.prefix, "default") == {"g": a}
    r.hset(q.qkeys.job(a), "shared_deaths", SHARED_DEATHS_MAX - 1)   # the next loss is its last
    assert claim(q, lease=-1, worker="dead-worker")[0] == a
    counts = reap_once(r, settings)
    assert counts["abandoned"] == 1
    job = q.fetch_job(a)
    assert (job.status, job.failure_reason) == ("failed", "abandoned")
    assert pending(q) == [b] and busy_groups(r, settings.prefix, "default") == {"g": b}


# -- real worker processes -----------------------------------------------------------------


def spans(r, key: str) -> dict[str, list[tuple[str, float]]]:
    """record_span entries by job value: [("start", t), ("end", t), ...]."""
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for item in r.lrange(key, 0, -1):
        kind, value, t = item.split(":")
        out[value].append((kind, float(t)))
    return out


# not serial: nothing in it is a deadline (order, overlap and the peak are read from the
# jobs' own stamps; the wait's bound is for a broken run), so it runs beside the others
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_three_groups_four_workers_serial_inside_parallel_across(r, settings, queue,
                                                                 processes):
    q = queue()
    n, seconds = 100, 0.02
    groups = ("g0", "g1", "g2")
    for i in range(n):
        for g in groups:  # interleaved, as many producers would
            q.enqueue("tests.jobs:record_span", settings.redis_url,
                      f"{settings.prefix}:span:{g}", str(i), seconds, group=g)
    q.enqueue("tests.jobs:noop")  # an ungrouped job is not held up
    for _ in range(4):
        processes.worker("-q", "default")
    total = 3 * n + 1
    wait_for(lambda: r.zcard(q.qkeys.finished) == total, timeout=180, interval=0.1)
    marks = []   # (time, +1 start / -1 end) of every job of every group
    for g in groups:
        got = spans(r, f"{settings.prefix}:span:{g}")
        intervals = []
        for value, stamps in got.items():
            assert [k for k, _ in stamps] == ["start", "end"], (g, value, stamps)
            intervals.append((stamps[0][1], stamps[1][1], int(value)))
            marks += [(stamps[0][1], 1), (stamps[1][1], -1)]
        intervals.sort()
        order = [v for _, _, v in intervals]
        assert order == list(range(n)), f"group {g} ran out of order"
        for (_, end, _), (start, _, _) in zip(intervals, intervals[1:]):
            assert start >= end, f"two jobs of group {g} overlapped"
    # the groups ran side by side: at some instant a job of each group was running (one
    # group's jobs never overlap, so three running jobs are one of each group)
    running = peak = 0
    for _, step in sorted(marks):    # an end sorts before a start at the same instant
        running += step
        peak = max(peak, running)
    assert peak == 3, f"at most {peak} group(s) ran at once"
    assert busy_groups(r, settings.prefix, "default") == {}


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_a_killed_worker_releases_its_group(r, settings, queue, processes):
    q = queue()
    key = f"{settings.prefix}:span"
    # a short lease: the dead workers' jobs come back in seconds, not the default 30 s
    env = {"FUSIONWORKER_REAPER_INTERVAL": "0.5", "FUSIONWORKER_WORKER_TTL": "10",
           "FUSIONWORKER_LEASE": "1.5"}
    # a: retried after its worker dies (keeps the group); c: abandoned (passes it on: its
    # worker was lost under it twice before)
    a = q.enqueue("tests.jobs:record_span", settings.redis_url, key, "a", 3,
                  group="g1", max_retries=1).id
    b = q.enqueue("tests.jobs:record_span", settings.redis_url, key, "b", group="g1").id
    c = q.enqueue("tests.jobs:record_span", settings.redis_url, key, "c", 3,
                  group="g2", max_retries=0).id
    d = q.enqueue("tests.jobs:record_span", settings.redis_url, key, "d", group="g2").id
    r.hset(q.qkeys.job(c), "shared_deaths", SHARED_DEATHS_MAX - 1)
    doomed = [processes.worker("-q", "default", env=env) for _ in range(2)]
    wait_for(lambda: len(spans(r, key)) == 2 and set(spans(r, key)) == {"a", "c"}, timeout=20)
    for proc in doomed:
        os.kill(proc.pid, signal.SIGKILL)   # the parents; their horses die with them
        proc.wait(5)
    killed_at = time.time()
    processes.worker("-q", "default", env=env)
    wait_for(lambda: q.fetch_job(b).status == "finished" and q.fetch_job(d).status
             == "finished", timeout=60, interval=0.2)
    got = spans(r, key)
    assert [k for k, _ in got["a"]] == ["start", "start", "end"]   # killed, then rerun
    # its worker's death was not its doing: the attempt is not counted
    assert q.fetch_job(a).status == "finished" and q.fetch_job(a).attempts == 1
    job_c = q.fetch_job(c)
    assert (job_c.status, job_c.failure_reason) == ("failed", "abandoned")
    assert [k for k, _ in got["c"]] == ["start"]
    # nothing of a group started before its holder was reaped and ended
    assert got["b"][0][1] >= got["a"][2][1]
    assert got["d"][0][1] > killed_at and got["a"][1][1] > killed_at
    assert busy_groups(r, settings.prefix, "default") == {}


def test_a_holder_whose_record_vanished_does_not_block_its_group_forever(r, queue, settings):
    q = queue()
    a = q.enqueue("tests.jobs:noop", group="g").id
    b = q.enqueue("tests.jobs:noop", group="g").id
    r.delete(q.qkeys.job(a))   # e.g. evicted under maxmemory, or deleted by hand
    r.zrem(q.qkeys.pending, a)
    c = q.enqueue("tests.jobs:noop", group="g").id
    # the next enqueue notices: the waiting jobs go on, in order
    assert pending(q) == [b]
    assert busy_groups(r, settings.prefix, "default") == {"g": b}
    assert r.lrange(q.qkeys.group("g"), 0, -1) == [c]
