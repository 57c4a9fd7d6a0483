"""``FUSIONWORKER_EVENTS=0``: producers and workers write no event, and lose nothing else."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from fusionworker.core.queue import Queue
from fusionworker.events import EventsMiddleware, MemorySink, NullSink, default_sink
from fusionworker.middleware import default_middleware
from fusionworker.worker import Worker
from tests.conftest import ROOT, worker_env

pytestmark = pytest.mark.timeout(30)


def event_keys(r, prefix: str) -> list[str]:
    """The stream and every job's history under ``prefix``."""
    return sorted(k for k in r.scan_iter(f"{prefix}:*", count=1000)
                  if k == f"{prefix}:events" or ":job_events:" in k)


def test_the_setting_reads_like_every_switch(settings):
    from fusionworker.core.config import load_settings

    assert settings.events is True                     # on unless said otherwise
    for text, want in (("0", False), ("off", False), ("false", False), ("1", True), ("on", True)):
        assert load_settings(environ={"FUSIONWORKER_EVENTS": text}).events is want
    with pytest.raises(ValueError, match="FUSIONWORKER_EVENTS"):
        load_settings(environ={"FUSIONWORKER_EVENTS": "sometimes"})


def test_a_producer_with_the_log_off_writes_the_job_and_no_event(r, settings, prefix):
    off = settings.replace(events=False)
    assert isinstance(default_sink(off, r), NullSink)
    q = Queue("evoff", r, settings=off)
    job = q.enqueue("tests.jobs:add", 1, 2)
    also = Queue("evoff", r, settings=off, events=True).enqueue("tests.jobs:add", 3, 4)
    assert q.fetch_job(job.id).status == "queued" and q.fetch_job(also.id).status == "queued"
    assert event_keys(r, prefix) == []
    # the same producer with the log on writes the queued event: the test can fail
    Queue("evoff", r, settings=settings).enqueue("tests.jobs:add", 5, 6)
    assert f"{prefix}:events" in event_keys(r, prefix)


def test_a_producer_given_a_sink_keeps_it_with_the_log_off(r, settings):
    sink = MemorySink()
    job = Queue("evoff", r, settings=settings.replace(events=False), events=sink).enqueue(
        "tests.jobs:add", 1, 2)
    assert [(d["event"], d["job_id"]) for d in sink.docs] == [("queued", job.id)]


def test_a_worker_with_the_log_off_runs_its_jobs_and_writes_no_event(r, settings, prefix,
                                                                     caplog):
    off = settings.replace(events=False)
    assert not any(isinstance(mw, EventsMiddleware) for mw in default_middleware(off))
    assert any(isinstance(mw, EventsMiddleware) for mw in default_middleware(settings))
    q = Queue("evoff", r, settings=off)
    ok = q.enqueue("tests.jobs:add", 1, 2)
    bad = q.enqueue("tests.jobs:boom", "no luck")
    with caplog.at_level(logging.INFO, logger="fusionworker"):
        assert Worker("evoff", r, settings=off, burst=True).work() == 0
    assert q.fetch_job(ok.id).status == "finished" and q.fetch_job(ok.id).result == 3
    assert q.fetch_job(bad.id).status == "failed"
    assert event_keys(r, prefix) == []
    assert "event log off (FUSIONWORKER_EVENTS=0)" in caplog.text


def test_an_events_middleware_given_to_the_worker_still_runs(r, settings):
    off = settings.replace(events=False)
    q = Queue("evoff", r, settings=off)
    job = q.enqueue("tests.jobs:add", 1, 2)
    sink = MemorySink()
    assert Worker("evoff", r, settings=off, burst=True,
                  middleware=[EventsMiddleware(sink)]).work() == 0
    assert [(d["event"], d["job_id"]) for d in sink.docs] == [
        ("processing", job.id), ("completed", job.id)]


def test_the_events_command_says_the_log_is_off(settings):
    env = worker_env(settings, FUSIONWORKER_EVENTS="0")
    done = subprocess.run([sys.executable, "-m", "fusionworker", "events", "-n", "5"],
                          env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert "FUSIONWORKER_EVENTS=0" in done.stderr and "write no events" in done.stderr


@pytest.mark.slow
def test_the_jobs_a_job_enqueues_follow_the_workers_config_file(r, settings, prefix,
                                                                processes, tmp_path):
    """FUSIONWORKER_EVENTS=0 in the worker's -c file reaches its horses: a job's own
    enqueue writes no event either."""
    conf = tmp_path / "worker.env"
    conf.write_text("FUSIONWORKER_EVENTS=0\n")
    q = Queue("evoff", r, settings=settings.replace(events=False))
    job = q.enqueue("tests.jobs:enqueue_child_from_env")
    proc = processes.start("-c", str(conf), "worker", "-q", "evoff", "--burst")
    assert proc.wait(30) == 0, processes.output(proc)
    child = q.fetch_job(job.id).result
    assert Queue("child", r, settings=settings).fetch_job(child) is not None
    assert event_keys(r, prefix) == []

