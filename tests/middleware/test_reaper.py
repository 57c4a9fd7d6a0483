"""The reaper: stuck jobs come back, live ones are left alone (invariant 2)."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from fusionworker.core.keys import Keys
from fusionworker.core.queue import scripts_for
from fusionworker.middleware.reaper import ReaperMiddleware, acquire_lock, prune_workers, reap_once
from fusionworker.runtime.recorder import SHARED_DEATHS_MAX
from tests.chaos import worker_proc
from tests.waiting import wait_for


def claim(q, worker="ghost.1", lease=-1.0):
    """Claim the best job of ``q`` as ``worker``; a negative lease is already over."""
    token = uuid.uuid4().hex
    reply = scripts_for(q.connection).claim(keys=[q.qkeys.base],
                                            args=[worker, token, lease, 3600])
    assert reply[0] == "job", reply
    data = dict(zip(reply[2][::2], reply[2][1::2]))
    return data["id"], token


def lost_twice(q, job_id):
    """The job's worker was lost under it twice before: the next reap abandons it."""
    q.connection.hset(q.qkeys.job(job_id), "shared_deaths", SHARED_DEATHS_MAX - 1)


def fake_worker(r, prefix, name, current_job, age=0.0, lease=15.0):
    r.hset(Keys(prefix).worker(name), mapping={
        "name": name, "current_job": current_job, "last_heartbeat": time.time() - age,
        "lease": lease})
    r.sadd(Keys(prefix).workers, name)


def test_dead_worker_job_requeued_at_its_place(queue, settings, r):
    q = queue()
    a = q.enqueue("tests.jobs:noop", priority=5, max_retries=3)
    b = q.enqueue("tests.jobs:noop", priority=5)
    c = q.enqueue("tests.jobs:noop", priority=1)
    jid, _ = claim(q)
    assert jid == a.id
    counts = reap_once(r, settings)       # no heartbeat key for ghost.1 at all
    assert counts["requeued"] == 1 and counts["jobs"] == [a.id]
    job = q.fetch_job(a.id)
    # its worker was lost under it: not its doing, the attempt is not counted
    assert job.status == "queued" and job.attempts == 0 and job.shared_deaths == 1
    assert q.job_ids() == [a.id, b.id, c.id]    # original priority and FIFO place
    assert r.zcard(q.qkeys.started) == 0


def test_a_job_its_worker_was_lost_under_three_times_fails_as_abandoned(queue, settings, r):
    # a job that takes its worker down (or is there each time one dies) is not run forever
    q = queue()
    job = q.enqueue("tests.jobs:noop", max_retries=1)
    for _ in range(SHARED_DEATHS_MAX - 1):
        claim(q)
        assert reap_once(r, settings)["requeued"] == 1
    claim(q)
    counts = reap_once(r, settings)
    assert counts["abandoned"] == 1
    job = q.fetch_job(job.id)
    assert job.status == "failed" and job.failure_reason == "abandoned"
    assert job.error_type == "Abandoned"
    assert f"lost under it {SHARED_DEATHS_MAX} times" in job.error_message
    assert job.attempts == 1
    assert q.job_ids("failed") == [job.id]
    q.requeue(job.id)                     # an operator's requeue starts it over
    assert q.fetch_job(job.id).shared_deaths == 0


def test_live_worker_with_fresh_heartbeat_is_left_alone(queue, settings, r, prefix):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    claim(q, worker="busy.1")
    fake_worker(r, prefix, "busy.1", job.id, age=1.0)
    counts = reap_once(r, settings)
    assert counts["alive"] == 1 and counts["requeued"] == 0
    assert q.fetch_job(job.id).status == "started"


def test_worker_naming_another_job_or_silent_is_reaped(queue, settings, r, prefix):
    q = queue()
    j1 = q.enqueue("tests.jobs:noop", max_retries=3)
    j2 = q.enqueue("tests.jobs:noop", max_retries=3)
    claim(q, worker="moved.1")
    claim(q, worker="silent.1")
    fake_worker(r, prefix, "moved.1", "some-other-job")
    fake_worker(r, prefix, "silent.1", j2.id, age=20.0, lease=15.0)
    counts = reap_once(r, settings)
    assert sorted(counts["jobs"]) == sorted([j1.id, j2.id])
    assert {q.fetch_job(j).status for j in (j1.id, j2.id)} == {"queued"}


def test_lease_still_valid_is_never_reaped(queue, settings, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    claim(q, lease=60)                    # worker key gone, but the lease runs
    assert reap_once(r, settings)["checked"] == 0
    assert q.fetch_job(job.id).status == "started"


def test_reap_with_an_old_token_is_refused(queue, settings, r):
    q = queue()
    job = q.enqueue("tests.jobs:noop")
    claim(q)
    verdict = scripts_for(r).requeue(keys=[q.qkeys.base],
                                     args=[job.id, "reap", "not-the-token", 3600])
    assert verdict == ["skipped", "attempt changed"]


def test_stale_started_entry_is_dropped(queue, settings, r):
    q = queue()
    r.zadd(q.qkeys.started, {"no-such-job": 1})
    r.sadd(Keys(settings.prefix).queues, q.name)
    counts = reap_once(r, settings)
    assert counts["skipped"] == 1
    assert r.zcard(q.qkeys.started) == 0


def test_lock_allows_one_pass_per_interval(r, settings):
    s = settings.replace(reaper_interval=0.3)
    assert reap_once(r, s, lock_owner="w1")["locked"] is True
    assert reap_once(r, s, lock_owner="w2")["locked"] is False
    assert not acquire_lock(r, s, "w3")
    assert 0 < r.pttl(Keys(s.prefix).reaper_lock) <= 300       # it expires by itself
    wait_for(lambda: reap_once(r, s, lock_owner="w2")["locked"], timeout=5)


def test_dead_workers_pruned_from_registry(r, prefix, settings):
    keys = Keys(prefix)
    fake_worker(r, prefix, "alive.1", "")
    r.sadd(keys.workers, "dead.1", "dead.2")
    assert sorted(prune_workers(r, settings)) == ["dead.1", "dead.2"]
    assert r.smembers(keys.workers) == {"alive.1"}


def test_a_dead_worker_whose_name_is_no_utf8_is_pruned_once(r, prefix, settings, caplog):
    keys = Keys(prefix)
    fake_worker(r, prefix, "alive.1", "")
    r.sadd(keys.workers, b"dead\xff")
    with caplog.at_level(logging.INFO, logger="fusionworker"):
        assert prune_workers(r, settings) == ["dead\\xff"]       # named, with an escape
        assert prune_workers(r, settings) == []                   # and gone: not again
    assert r.smembers(keys.workers) == {"alive.1"}
    assert caplog.text.count("removed 1 dead worker") == 1


def test_middleware_runs_on_tick_once_per_interval(queue, settings, r):
    q = queue()
    q.enqueue("tests.jobs:noop", max_retries=3)
    claim(q)

    class FakeWorker:
        connection, name, middleware = r, "w.1", []
    FakeWorker.settings = settings.replace(reaper_interval=0.1)
    mw = ReaperMiddleware(FakeWorker.settings)
    mw.on_tick(FakeWorker)               # too early: half an interval after start
    assert mw.passes == 0
    time.sleep(0.06)
    mw.on_tick(FakeWorker)
    assert mw.passes == 1 and mw.reaped == 1


# -- real processes ----------------------------------------------------------------


@pytest.mark.slow
def test_live_long_job_outlives_several_leases(processes, queue, r, prefix, redis_url, settings):
    """Lease 2 s, job 7 s: the parent keeps the lease fresh; a hammering reaper takes nothing."""
    q = queue()
    job = q.enqueue("tests.jobs:record", redis_url, f"{prefix}:out", "long", 7, timeout=30)
    worker_proc.start(processes, lease=2.0, FUSIONWORKER_REAPER_INTERVAL="0.2")
    wait_for(lambda: q.fetch_job(job.id).status == "started")
    reaped = 0
    while q.fetch_job(job.id).status == "started":
        reaped += len(reap_once(r, settings)["jobs"])
        time.sleep(0.1)
    job = q.fetch_job(job.id)
    assert reaped == 0
    assert job.status == "finished" and job.attempts == 1
    assert r.lrange(f"{prefix}:out", 0, -1) == ["long"]


def test_a_bad_name_in_the_known_queues_is_skipped_and_every_queue_is_reaped(
        queue, settings, r, prefix, caplog):
    """Issue 30, item 2: a member of the known-queues set that is no queue name (sorted
    before the others) is skipped and logged; the queues after it are reaped."""
    z = queue("zeta")
    stuck = z.enqueue("tests.jobs:noop", max_retries=3)
    assert claim(z)[0] == stuck.id
    r.sadd(Keys(prefix).queues, '"><bad name>', "", "a b", "all")
    with caplog.at_level("WARNING", logger="fusionworker"):
        counts = reap_once(r, settings)
    assert counts["requeued"] == 1 and counts["jobs"] == [stuck.id]
    assert z.fetch_job(stuck.id).status == "queued"
    assert "Skipped '\"><bad name>' in the set of known queues" in caplog.text


def test_a_job_that_ran_alone_in_a_dead_worker_fails_as_the_culprit(queue, settings, r):
    q = queue()
    beside = q.enqueue("tests.jobs:noop", max_retries=3)
    jid, _ = claim(q)
    assert reap_once(r, settings)["requeued"] == 1        # its worker died beside others
    assert (q.fetch_job(beside.id).worker_deaths, q.fetch_job(beside.id).attempts) == (1, 0)
    jid, token = claim(q)                                  # it runs alone now (solo.py)
    assert scripts_for(r).alone(keys=[q.qkeys.base], args=[jid, token]) == 1
    counts = reap_once(r, settings)
    assert counts["abandoned"] == 1 and counts["requeued"] == 0
    job = q.fetch_job(jid)
    assert (job.status, job.failure_reason, job.error_type) == ("failed", "killed",
                                                                "WorkerKilled")
    assert "the worker this job ran in alone died" in job.error_message
    # a stale mark (an earlier attempt's token) is no verdict: a lost worker as before
    q.requeue(jid)
    assert q.fetch_job(jid).worker_deaths == 0        # the dead-letter's requeue starts over
    jid, token = claim(q)
    r.hset(q.qkeys.job(jid), "alone", "an-older-attempt")
    assert reap_once(r, settings)["requeued"] == 1


def test_alone_lua_refuses_an_attempt_that_is_not_current(queue, settings, r):
    q = queue()
    q.enqueue("tests.jobs:noop")
    jid, token = claim(q, lease=60)
    assert scripts_for(r).alone(keys=[q.qkeys.base], args=[jid, "not-the-token"]) == 0
    assert r.hget(q.qkeys.job(jid), "alone") is None


class _Counting:
    """A client's round trips (each command alone, each pipeline), counted."""

    def __init__(self, url):
        import redis

        counter = self

        class Pipe(redis.client.Pipeline):
            def execute(self, raise_on_error=True):
                counter.trips += 1 if self.command_stack else 0
                return super().execute(raise_on_error)

        class Client(redis.Redis):
            def parse_response(self, connection, command_name, **options):
                counter.trips += 1
                return super().parse_response(connection, command_name, **options)

            def pipeline(self, transaction=True, shard_hint=None):
                return Pipe(self.connection_pool, self.response_callbacks, transaction,
                            shard_hint)

        self.trips = 0
        self.client = Client.from_url(url, decode_responses=True)


def test_a_pass_over_many_idle_queues_reads_them_together_and_keeps_them_in_turn(
        queue, settings, r):
    from fusionworker.middleware.reaper import UPKEEP_QUEUES, upkeep_share

    names = [f"idle{i:03d}" for i in range(4 * UPKEEP_QUEUES)]
    r.sadd(Keys(settings.prefix).queues, *names)
    q = queue(names[-1])                               # the last one holds a lost job
    q.enqueue("tests.jobs:noop")
    jid, _ = claim(q)
    counting = _Counting(settings.redis_url)
    counts = reap_once(counting.client, settings)
    assert counts["requeued"] == 1                     # every queue is looked at, each pass
    # one round trip reads them all; the upkeep of a share of them (not 4 trips a queue)
    assert counting.trips < 4 * UPKEEP_QUEUES, counting.trips
    served = set()
    for turn in range(4):
        share = upkeep_share(names, turn * settings.reaper_interval, settings.reaper_interval)
        assert len(share) <= UPKEEP_QUEUES
        served |= set(share)
    assert served == set(names)                        # each in turn


def test_the_requeued_event_is_stamped_before_a_claim_that_follows_it(queue, settings, r,
                                                                       monkeypatch):
    """A worker may claim the requeued job before the reaper emits its event: the event
    carries the pass's Redis time, so ``events --job`` (ordered by ``@timestamp``) shows
    the job requeued, then started again, not the other way round."""
    from datetime import datetime

    from fusionworker.events import middleware as events_middleware
    from fusionworker.events.sinks import EventSink

    q = queue()
    job = q.enqueue("tests.jobs:noop")
    claim(q)                                          # ghost.1, lease over, never beats
    claimed_at: list[float] = []
    emit = events_middleware.emit_job_event

    def a_quick_worker_claims_first(*args, **kwargs):
        claim(q, worker="quick.1", lease=30.0)
        seconds, micros = r.time()
        claimed_at.append(seconds + micros / 1e6)
        time.sleep(0.01)                    # @timestamp has milliseconds: a clear gap
        return emit(*args, **kwargs)

    class Kept(EventSink):
        events: list[dict] = []

        def emit(self, doc):
            self.events.append(doc)

    monkeypatch.setattr(events_middleware, "emit_job_event", a_quick_worker_claims_first)
    sink = Kept()
    assert reap_once(r, settings, sink=sink)["requeued"] == 1
    [doc] = [d for d in sink.events if d["event"] == "requeued"]
    stamped = datetime.fromisoformat(doc["@timestamp"].replace("Z", "+00:00")).timestamp()
    assert job.id in str(doc) and claimed_at
    assert stamped < claimed_at[0], (doc["@timestamp"], claimed_at)
