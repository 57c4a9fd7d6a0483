"""A job's history is complete for every job, however busy the stream was: each event of
a job goes to the job's own history in the pipeline that XADDs it (scripts/history.lua),
and the job page, ``/api/v1/jobs/{id}`` and ``events --job`` read that."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("starlette")

from click.testing import CliRunner
from starlette.testclient import TestClient

from fusionworker.cli import main
from fusionworker.core.keys import Keys
from fusionworker.events import flush_default_sinks, read_events
from fusionworker.web import create_app
from tests.waiting import wait_for

TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
JOBS, FAILING = 400, 40
ENDED = {"completed", "failed"}


def _stream_by_job(r: Any, prefix: str) -> dict[str, list[tuple[str, str]]]:
    """Every job's events in the whole stream (what a full scan finds): (id, event)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for stream_id, doc in read_events(r, prefix, count=10**6):
        if doc.get("job_id"):
            found.setdefault(doc["job_id"], []).append((stream_id, doc["event"]))
    return found


# 400 forks and 1,200 reads, ~7 s alone; not serial: no deadline in it (a 240 s bound
# for a broken run), it asserts completeness only
@pytest.mark.slow
def test_after_a_burst_of_400_jobs_every_job_shows_all_its_events(
        queue, r, settings, processes):
    q = queue("burst")
    jobs = q.enqueue_many([q.prepare("tests.jobs:add", i, 1) for i in range(JOBS - FAILING)])
    jobs += [q.enqueue("tests.jobs:boom", "kaput", max_retries=1, retry_delay=0)
             for _ in range(FAILING)]
    flush_default_sinks(5)
    # other traffic on the stream meanwhile: a producer enqueues on a queue no one serves
    noise, stop = queue("noise"), threading.Event()

    def produce() -> None:
        while not stop.is_set():
            noise.enqueue_many([noise.prepare("tests.jobs:noop") for _ in range(50)])
            stop.wait(0.05)
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        processes.worker("-q", "burst", "--concurrency", "4",
                         env={"FUSIONWORKER_RESULT_TTL": "3600"})   # pages read after
        ids = [job.id for job in jobs]
        wait_for(lambda: q.finished_job_registry.count + q.failed_job_registry.count == JOBS,
                 interval=0.5, timeout=240)
    finally:
        stop.set()
        producer.join(10)

    def every_end_delivered() -> dict[str, list[tuple[str, str]]] | None:
        found = _stream_by_job(r, settings.prefix)
        done = all(ENDED & {e for _, e in found.get(i, [])} for i in ids)
        return found if done else None
    stream = wait_for(every_end_delivered, interval=0.5, what="every job's last event")
    assert len(r.keys(f"{settings.prefix}:{{burst}}:job_events:*")) == JOBS
    # the stream's other traffic as the job page saw it: 400 jobs at once, 4 at a time
    assert sum(len(v) for v in stream.values()) >= 3 * JOBS

    app = create_app(settings.replace(web_token=TOKEN), r)
    runner = CliRunner()
    env = {"FUSIONWORKER_PREFIX": settings.prefix, "REDIS_URL": settings.redis_url}
    short: list[str] = []
    with TestClient(app) as client:
        for job_id in ids:
            want = stream[job_id]
            answer = client.get(f"/api/v1/jobs/{job_id}", headers=BEARER)
            assert answer.status_code == 200, answer.text
            doc = answer.json()
            api_events = [(e["id"], e["event"]) for e in doc["events"]]
            page = client.get(f"/jobs/{job_id}", headers=BEARER).text
            page_events = re.findall(r'<span class="badge status-(\w+)">\1</span></td>'
                                     r'<td class="n" data-label="attempt">', page)
            cli = runner.invoke(main, ["events", "--job", job_id, "--json", "-n", "1000"],
                                env=env)
            cli_events = [(d["id"], d["event"]) for d in map(json.loads,
                                                               cli.stdout.splitlines())]
            if (sorted(api_events) != sorted(want) or sorted(cli_events) != sorted(want)
                    or Counter(page_events) != Counter(e for _, e in want)):
                short.append(job_id)
    assert short == [], f"{len(short)} of {JOBS} jobs lack events, e.g. {short[:3]}"


def test_a_jobs_history_lives_as_long_as_its_record(queue, burst, r, settings):
    from fusionworker.events import EventsMiddleware

    q = queue("default")
    kept = q.enqueue("tests.jobs:add", 1, 2, result_ttl=100)
    # the producer's sink delivers on its own thread: its `queued` first, then the worker
    flush_default_sinks(5)
    burst("default", middleware=[EventsMiddleware()])
    flush_default_sinks(5)
    key = Keys(settings.prefix).queue("default").job_events(kept.id)
    events = [json.loads(x)[1]["event"] for x in r.lrange(key, 0, -1)]
    assert events[0] == "queued" and events[-1] == "completed"
    assert 0 < r.ttl(key) <= 100            # the record's TTL, not a default
    live = q.enqueue("tests.jobs:add", 1, 2)
    flush_default_sinks(5)
    # a job not ended yet: its history lives long (it takes the record's TTL at the end)
    assert 29 * 86400 < r.ttl(Keys(settings.prefix).queue("default").job_events(live.id))


def test_a_delivery_writes_a_run_of_job_events_in_one_history_call(r, prefix, monkeypatch):
    """A batch of 250 events of jobs, one event of no job among them: one ``history.lua``
    call per run of up to 100 job events (not one per event), the other event XADDed in
    its place; the stream holds every event in the batch's order and each job's history
    its own events with their stream ids."""
    import redis.client

    from fusionworker.events import job_history
    from fusionworker.events.history import HISTORY_CHUNK
    from fusionworker.events.sinks import RedisStreamSink

    sent: list[list[str]] = []
    execute = redis.client.Pipeline.execute

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append([str(call[0][0]).upper() for call in self.command_stack])
        return execute(self, *args, **kwargs)
    monkeypatch.setattr(redis.client.Pipeline, "execute", spy)
    sink = RedisStreamSink(r, prefix)
    try:
        entries = []
        for i in range(250):
            doc = {"event": "completed" if i % 2 else "started", "n": i,
                   "job_id": f"j{i // 2}", "queue": "ab" if i % 4 < 2 else "cd"}
            entries.append((str(i), doc if i != 120 else {"event": "worker_started", "n": i}))
        sink._deliver(entries)
    finally:
        sink.close()
    assert HISTORY_CHUNK == 100
    assert sent == [["EVALSHA", "EVALSHA", "XADD", "EVALSHA", "EVALSHA"]]  # 100, 20, -, 100, 29
    stream = read_events(r, prefix, count=1000)
    assert [int(doc["n"]) for _, doc in stream] == list(range(250))
    ids = {int(doc["n"]): stream_id for stream_id, doc in stream}
    for job in range(125):
        queue = "ab" if job % 2 == 0 else "cd"
        kept = [(stream_id, int(doc["n"])) for stream_id, doc in
                job_history(r, prefix, queue, f"j{job}")]
        want = [n for n in (2 * job, 2 * job + 1) if n != 120]
        assert kept == [(ids[n], n) for n in want]
