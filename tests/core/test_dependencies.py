"""Job dependencies on the real Redis: depends_on within and across queues, failure
propagation, and the crash points of the outbox (fusionworker/core/workflows.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fusionworker.cli import main
from fusionworker.core import workflows
from fusionworker.core.queue import Queue
from fusionworker.exceptions import NoSuchJob
from fusionworker.middleware import reaper
from fusionworker.worker import Worker, default_middleware


def _run(r, settings, queues):
    """A burst worker with the default middleware (the dependency replay included)."""
    w = Worker(queues, r, settings=settings, burst=True, middleware=default_middleware(settings))
    assert w.work() == 0
    return w


def test_a_dependent_waits_deferred_then_runs_after_its_dependency(queue, r, settings, prefix):
    q = queue("wf")
    key = f"{prefix}:order"
    a = q.enqueue("tests.jobs:record", settings.redis_url, key, "a", priority=-5)
    d = q.enqueue("tests.jobs:record", settings.redis_url, key, "d", depends_on=[a],
                  priority=10)
    assert d.status == "deferred" and d.depends_on == [f"wf:{a.id}"]
    assert q.fetch_job(d.id).status == "deferred" and q.count == 1
    assert q.job_ids("deferred") == [d.id] and q.stats()["deferred"] == 1
    assert q.fetch_job(a.id).has_dependents
    _run(r, settings, "wf")
    assert r.lrange(key, 0, -1) == ["a", "d"]  # d has the higher priority, yet ran after a
    assert q.fetch_job(d.id).status == "finished" and q.stats()["deferred"] == 0
    assert r.llen(q.qkeys.base + "outbox") == 0


def test_every_dependency_must_finish(queue, r, settings, prefix):
    q = queue("wf")
    a, b = q.enqueue("tests.jobs:noop"), q.enqueue("tests.jobs:noop", priority=-1)
    d = q.enqueue("tests.jobs:noop", depends_on=[a.id, b])
    w = Worker("wf", r, settings=settings, burst=True, middleware=default_middleware(settings))
    claimed = w.claimer.claim(1)
    [job] = claimed.jobs
    assert job.id == a.id
    w.perform(job, claimed.sent)
    workflows.replay_outbox(r, settings, "wf")
    assert q.fetch_job(d.id).status == "deferred"  # b has not run yet
    _run(r, settings, "wf")
    assert q.fetch_job(d.id).status == "finished"


def test_a_failed_dependency_cancels_the_dependent_and_its_dependents(queue, r, settings):
    q = queue("wf")
    bad = q.enqueue("tests.jobs:boom")
    d = q.enqueue("tests.jobs:noop", depends_on=bad)
    dd = q.enqueue("tests.jobs:noop", depends_on=d)
    tolerant = q.enqueue("tests.jobs:noop", depends_on=[bad], allow_dependency_failure=True)
    _run(r, settings, "wf")
    d_now, dd_now = q.fetch_job(d.id), q.fetch_job(dd.id)
    assert d_now.status == "canceled" and d_now.failure_reason == "dependency"
    assert d_now.error_message == f"dependency wf:{bad.id} failed"
    assert dd_now.status == "canceled"
    assert dd_now.error_message == f"dependency wf:{d.id} canceled"
    assert q.fetch_job(tolerant.id).status == "finished"


def test_dependencies_across_queues_and_already_ended_ones(queue, r, settings):
    upstream, downstream = queue("up"), queue("down")
    done = upstream.enqueue("tests.jobs:noop")
    _run(r, settings, "up")
    # a dependency that already finished: the dependent is queued at once (step 4)
    ready = downstream.enqueue("tests.jobs:noop", depends_on=[done])
    assert ready.status == "queued"
    a = upstream.enqueue("tests.jobs:add", 1, 2)
    d = downstream.enqueue("tests.jobs:noop", depends_on=[("up", a.id)])
    assert d.status == "deferred"
    _run(r, settings, "down")  # nothing to do for d yet
    assert downstream.fetch_job(d.id).status == "deferred"
    _run(r, settings, "up")    # a finishes; its worker replays the note to "down"
    assert downstream.fetch_job(d.id).status == "queued"
    _run(r, settings, "down")
    assert downstream.fetch_job(d.id).status == "finished"


def test_bad_dependencies_are_refused_before_anything_is_written(queue, r):
    q = queue("wf")
    a = q.enqueue("tests.jobs:noop")
    before = set(r.scan_iter(match=q.qkeys.base + "*"))
    with pytest.raises(NoSuchJob):
        q.enqueue("tests.jobs:noop", depends_on=[a, "nope"])
    with pytest.raises(ValueError):
        q.enqueue("tests.jobs:noop", depends_on=[])
    with pytest.raises(TypeError):
        q.enqueue("tests.jobs:noop", depends_on=[3])
    with pytest.raises(ValueError):
        q.enqueue_call("tests.jobs:noop", depends_on=[a], _when=("in", 5))
    assert set(r.scan_iter(match=q.qkeys.base + "*")) == before


def test_crash_between_outbox_and_replay_the_reaper_replays_once(queue, r, settings):
    """The finishing worker dies after finish.lua wrote the note and before the replay:
    the note waits in the outbox; the reaper replays it; replaying it again (a replayer
    that died after dep_done, before LREM) enqueues nothing twice."""
    upstream, downstream = queue("up"), queue("down")
    a = upstream.enqueue("tests.jobs:noop")
    d = downstream.enqueue("tests.jobs:noop", depends_on=[a])
    # run a without the dependency middleware: the worker "dies" before replaying
    w = Worker("up", r, settings=settings, burst=True, defaults=False, middleware=[])
    assert w.work() == 0
    outbox = upstream.qkeys.base + "outbox"
    notes = r.lrange(outbox, 0, -1)
    assert [json.loads(n) for n in notes] == [["finished", f"down:{d.id}", a.id]]
    assert downstream.fetch_job(d.id).status == "deferred"
    counts = reaper.reap_once(r, settings)
    assert counts["locked"]
    assert r.llen(outbox) == 0
    assert downstream.fetch_job(d.id).status == "queued" and downstream.count == 1
    r.rpush(outbox, *notes)  # the same note again
    assert workflows.replay_outbox(r, settings, "up") == 1
    assert downstream.count == 1 and r.llen(outbox) == 0
    assert r.zrevrange(downstream.qkeys.pending, 0, -1) == [d.id]


def test_producer_crash_after_writing_the_dependent_the_sweep_recovers(queue, r, settings):
    """The producer died after step 3 and the dependency's note was replayed before the
    dependent existed (ignored): the reaper's sweep finds the deferred job and applies
    the ended dependency. A stray registration of a dependent never written is ignored."""
    upstream, downstream = queue("up"), queue("down")
    a = upstream.enqueue("tests.jobs:noop")
    prepared = downstream.prepare("tests.jobs:noop", depends_on=[a])
    workflows.register(downstream, list(prepared.deps), "never-written")  # step 2 only
    workflows.register(downstream, list(prepared.deps), prepared.id)
    _run(r, settings, "up")  # a ends; its notes are replayed to jobs that do not exist yet
    assert r.llen(upstream.qkeys.base + "outbox") == 0
    # step 3 without step 4 (the producer dies here)
    downstream._register()
    [d] = list(downstream._chunk_replies([[prepared]]))
    assert json.loads(d[1])[0] == "deferred"
    assert downstream.fetch_job(prepared.id).status == "deferred"
    fast = settings.replace(reaper_interval=0.1)
    r.zadd(downstream.qkeys.base + "deferred", {prepared.id: 1.0})  # enqueued long ago
    reaper.reap_once(r, fast)
    assert downstream.fetch_job(prepared.id).status == "queued"
    assert downstream.fetch_job("never-written") is None


def test_job_show_lists_dependencies(queue, settings):
    q = queue("wf")
    a = q.enqueue("tests.jobs:noop")
    d = q.enqueue("tests.jobs:noop", depends_on=[a], allow_dependency_failure=True)
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    out = CliRunner().invoke(main, ["job", "show", d.id], env=env).output
    assert "deferred" in out and f"after     wf:{a.id} (runs even if one fails)" in out
    doc = json.loads(CliRunner().invoke(main, ["job", "show", d.id, "--json"], env=env).output)
    assert doc["status"] == "deferred" and doc["depends_on"] == [f"wf:{a.id}"]
    info = json.loads(CliRunner().invoke(main, ["info", "--json"], env=env).output)
    assert [x["deferred"] for x in info["queues"] if x["queue"] == "wf"] == [1]
    assert q.cancel(d.id).status == "canceled"
    assert q.stats()["deferred"] == 0


@pytest.mark.parametrize("how", ["cancel", "delete", "stop", "empty"])
def test_a_parent_canceled_or_deleted_by_the_producer_settles_its_dependents_at_once(
        queue, how):
    """No worker runs: the producer's cancel, delete, stop (of a job not started) or
    empty applies the notes it left (a dependent canceled, one that tolerates a failed
    parent made ready). They waited for a worker's poll (30 s with
    FUSIONWORKER_POLL_INTERVAL=30) or the reaper, while the docs say "at once"."""
    q = queue("wf")
    parent = q.enqueue_in(300, "tests.jobs:noop")
    child = q.enqueue("tests.jobs:noop", depends_on=parent)
    tolerant = q.enqueue("tests.jobs:noop", depends_on=parent, allow_dependency_failure=True)
    assert child.get_status() == "deferred" and tolerant.get_status() == "deferred"
    if how == "cancel":
        parent.cancel()
    elif how == "delete":
        parent.delete()
    elif how == "stop":
        parent.stop()
    else:
        q.empty()
    assert tolerant.get_status() == "queued" and q.job_ids == [tolerant.id]
    assert child.get_status() == "canceled"


def test_a_producers_cancel_leaves_other_jobs_callback_notes_to_the_workers(queue, r, settings):
    """The producer's replay (a CLI, a dashboard: often without the allow-list of the
    callbacks' modules) applies dependency notes only: it refused another job's
    callback note and dropped it for good."""
    q = queue("cbq")
    note = json.dumps(["callback:finished", "cbq:done1", "done1", "tests.jobs:echo"])
    r.rpush(q.qkeys.outbox, note)                   # a worker died before replaying it
    bare = Queue("cbq", r, settings=settings.replace(allowed_modules=()))
    other = q.enqueue("tests.jobs:noop")
    bare.cancel(other.id)
    assert r.lrange(q.qkeys.outbox, 0, -1) == [note]
    assert workflows.replay_outbox(r, settings, "cbq") == 1      # a worker's replay
    assert q.fetch_job("done1:on_success") is not None


def test_a_callback_whose_module_fails_to_import_is_dropped_not_held(queue, r, settings,
                                                                     tmp_path, monkeypatch,
                                                                     caplog):
    """A deploy left a callback's module with a syntax error: the note is said (job and
    callback named) and dropped; it held every later note of the queue."""
    (tmp_path / "broken_cbs.py").write_text("def cb(job_id):\n    return (\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    s = settings.replace(allowed_modules=("tests", "broken_cbs"))
    q = Queue("brq", r, settings=s)
    parent = q.enqueue("tests.jobs:noop")
    child = q.enqueue("tests.jobs:noop", depends_on=parent)
    r.rpush(q.qkeys.outbox, json.dumps(["callback:finished", "brq:x1", "x1", "broken_cbs:cb"]),
            json.dumps(["finished", f"brq:{child.id}", parent.id]))
    assert workflows.replay_outbox(r, s, "brq") == 2
    assert "callback broken_cbs:cb of job x1 on brq was not enqueued: SyntaxError" in caplog.text
    assert r.llen(q.qkeys.outbox) == 0 and child.get_status() == "queued"


def test_a_job_requeued_and_failed_again_gets_its_callback_again(queue, r, settings, burst):
    """Each life of a job runs its callback: RQ calls on_failure at each failure. The
    callback's id was the job's id and the kind alone, so a second failure after a
    requeue was a duplicate of the first callback while that lived."""
    q = queue("lives")
    job = q.enqueue("tests.jobs:boom", max_retries=0, on_failure="tests.jobs:echo")
    burst("lives")
    workflows.replay_outbox(r, settings, "lives")
    first = q.fetch_job(f"{job.id}:on_failure")
    assert first is not None and first.args == [job.id]
    q.requeue(job.id)
    burst("lives")
    workflows.replay_outbox(r, settings, "lives")
    second = q.fetch_job(f"{job.id}:on_failure:2")
    assert second is not None and second.args == [job.id]
    assert q.fetch_job(job.id).status == "failed"
