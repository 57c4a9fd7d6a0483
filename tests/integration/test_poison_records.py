"""Issue 30, item 5: malformed records thrown at a real worker process and at every
page and API listing. The worker lives, each record that cannot be read fails as its
own job (``malformed``), every other one ends on its own, and every page answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from fusionworker.core.connection import connect
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from tests.waiting import heartbeats, wait_for

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.web import create_app

TOKEN = "fuzz-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}

#: records that cannot be read: (field, bytes written over the job's own; None deletes it)
UNREADABLE: dict[str, tuple[str, bytes | None]] = {
    "brackets_100000": ("args", b"[" * 100_000),
    "deep_490": ("args", b"[" * 490 + b"]" * 490),
    "deep_101": ("args", b"[" * 101 + b"]" * 101),
    "not_json": ("args", b"[1, 2"),
    "args_object": ("args", b'{"a": 1}'),
    "args_number": ("args", b"5"),
    "kwargs_list": ("kwargs", b"[1]"),
    "kwargs_deep": ("kwargs", b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "bad_utf8_args": ("args", b'["\xff\xfe"]'),
    "bad_utf8_kwargs": ("kwargs", b'{"\xc3": 1}'),
    "bad_decimal": ("args", b'[{"__fw__": "decimal", "v": "twelve"}]'),
    "tag_of_a_number": ("args", b'[{"__fw__": "datetime", "v": 5}]'),
    "unhashable_set": ("args", b'[{"__fw__": "set", "v": [[1]]}]'),
    "unknown_tag": ("args", b'[{"__fw__": "pickle", "v": "gASV"}]'),
    "no_func": ("func", None),
}

#: records whose other fields are garbage: the job still ends on its own
GARBAGE: dict[str, dict[str, bytes | None]] = {
    "fields_of_wrong_types": {
        "priority": b"high", "timeout": b"nan", "attempts": b"many", "max_retries": b"-x",
        "enqueued_at": b"yesterday", "retry_delay": b"inf", "progress": b"nan",
        "result_ttl": b"1e999", "failure_ttl": b"soon", "ttl": b"forever"},
    "lists_of_wrong_types": {"retry_intervals": b'["x", null]', "depends_on": b'{"a": 1}',
                             "meta": b"[" * 100_000, "result": b"[" * 100_000},
    "bad_utf8_text": {"description": b"caf\xe9", "status": b"que\xffued",
                      "error_message": b"\xff", "worker": b"w\xfe"},
    "no_id_no_queue": {"id": None, "queue": None},
}


def overwrite(raw: redis.Redis, key: str, fields: dict[str, bytes | None]) -> None:
    for field, value in fields.items():
        if value is None:
            raw.hdel(key, field)
        else:
            raw.hset(key, field, value)


def garbage_beside_the_jobs(raw: redis.Redis, keys: Keys) -> None:
    """Entries of the other sets a worker, the reaper and the pages loop over."""
    raw.sadd(keys.queues, b'"><bad name>', b"caf\xe9", b"")
    raw.sadd(keys.workers, b"ghost\nworker", b"\xff")
    raw.hset(keys.worker("ghost\nworker"), mapping={"state": "\xff", "started_at": "never"})
    q = keys.queue("default")
    raw.zadd(q.cron, {b"broken": 1.0, b"wrong": 2.0, b"bad\xff": 3.0, b"gone": 4.0})
    raw.hset(q.cron_entry("broken"), mapping={
        "name": "broken", "queue": "default", "schedule": "* * * * *",
        "func": "tests.jobs:add", "args": b"[" * 5000})
    raw.hset(q.cron_entry("wrong"), mapping={
        "name": "wrong", "queue": "default", "schedule": "every day", "func": "5",
        "priority": "high", "runs": "many", "timeout": "soon"})
    raw.hset(q.cron_entry("bad\xff").encode("latin-1"), mapping={"name": b"\xff"})
    raw.zadd(q.batches, {b"nope": 1.0, b"\xff": 2.0})
    raw.hset(q.batch("nope"), mapping={"total": "many", "callback": "[" * 5000})


def pages(ids: list[str]) -> list[str]:
    """Every page and API listing (and each record's own page)."""
    urls = ["/", "/queues/default", "/queues/default?status=failed",
            "/queues/default?status=started", "/queues/default?status=scheduled",
            "/failed", "/retries", "/scheduled", "/workers", "/batches", "/charts",
            "/search?q=add", "/search?q=tests.jobs", "/api/v1/queues", "/api/v1/info",
            "/api/v1/workers", "/api/v1/cron", "/api/v1/failed", "/api/v1/scheduled",
            "/api/v1/batches", "/api/v1/history", "/api/v1/chart",
            "/api/v1/jobs?queue=default", "/api/v1/jobs?queue=default&status=failed",
            "/api/v1/jobs?queue=default&status=finished"]
    for job_id in ids:
        urls += [f"/jobs/{job_id}", f"/api/v1/jobs/{job_id}",
                 f"/jobs/{job_id}?queue=default", f"/search?q={job_id}"]
    return urls


def all_pages_answer(client: TestClient, ids: list[str]) -> None:
    bad = []
    for url in pages(ids):
        answer = client.get(url, headers=BEARER, follow_redirects=True)
        if answer.status_code != 200:
            bad.append((url, answer.status_code, answer.text[:200]))
    assert bad == []


@pytest.mark.slow
def test_malformed_records_fail_alone_the_worker_lives_and_every_page_answers(
        processes, redis_url, settings, prefix, r):
    client = connect(redis_url)
    raw = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    q = Queue("default", client, settings=settings)
    unreadable = {name: q.enqueue("tests.jobs:add", 1, 2).id for name in UNREADABLE}
    garbage = {name: q.enqueue("tests.jobs:add", 1, 2).id for name in GARBAGE}
    good = [q.enqueue("tests.jobs:add", i, i).id for i in range(3)]
    for name, (field, value) in UNREADABLE.items():
        overwrite(raw, keys.queue("default").job(unreadable[name]), {field: value})
    for name, fields in GARBAGE.items():
        overwrite(raw, keys.queue("default").job(garbage[name]), fields)
    garbage_beside_the_jobs(raw, keys)
    ids = [*unreadable.values(), *garbage.values(), *good]

    app = create_app(settings.replace(web_token=TOKEN), client)
    with TestClient(app) as web:
        all_pages_answer(web, ids)        # queued, not read by a worker yet

        # a record whose outcome Redis refuses stays started until the reaper takes it
        # back, three times (then abandoned): a short lease, not three of 10 s
        worker = processes.worker("default", env={"FUSIONWORKER_LEASE": "1.5"})
        ended = ("finished", "failed")
        wait_for(lambda: all(client.hget(keys.queue("default").job(i), "status") in ended
                             for i in ids), timeout=60, what="every record to end")
        assert worker.poll() is None, processes.output(worker)
        name = wait_for(lambda: [n for n in client.smembers(keys.workers)
                                 if "ghost" not in n and client.exists(keys.worker(n))],
                        what="the worker's heartbeat hash")[0]
        heartbeats(client, keys.worker(name))      # it goes round its loop still
        assert worker.poll() is None, processes.output(worker)

        for job_name, job_id in unreadable.items():
            data = client.hgetall(keys.queue("default").job(job_id))
            assert (data["status"], data["failure_reason"]) == ("failed", "malformed"), (
                job_name, data)
        for i in good:
            assert client.hget(keys.queue("default").job(i), "status") == "finished"
        all_pages_answer(web, ids)        # and once they failed
        listing = web.get("/api/v1/jobs?queue=default&status=failed&per_page=100",
                          headers=BEARER).json()
        reasons = {job["id"]: job.get("failure_reason") for job in listing["jobs"]}
        assert all(reasons.get(i) == "malformed" for i in unreadable.values()), reasons
    assert worker.poll() is None


def test_job_list_and_info_show_malformed_records(redis_url, settings, prefix):
    from click.testing import CliRunner

    from fusionworker.cli import main

    client = connect(redis_url)
    raw = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    q = Queue("default", client, settings=settings)
    ids = {}
    for name, (field, value) in UNREADABLE.items():
        ids[name] = q.enqueue("tests.jobs:add", 1, 2).id
        overwrite(raw, keys.queue("default").job(ids[name]), {field: value})
    garbage_beside_the_jobs(raw, keys)
    env = {"REDIS_URL": redis_url, "FUSIONWORKER_PREFIX": prefix,
           "FUSIONWORKER_LOG_LEVEL": "WARNING"}
    runner = CliRunner()
    for args in (["job", "list"], ["job", "list", "-q", "default", "--json"],
                 ["info"], ["info", "--json"], ["queue", "list"], ["cron", "list"]):
        result = runner.invoke(main, args, env=env)
        assert result.exit_code == 0, (args, result.output, result.exception)
    listed = json.loads(runner.invoke(main, ["job", "list", "-q", "default", "--json"],
                                      env=env).output)
    found: Any = listed["jobs"] if isinstance(listed, dict) else listed
    assert {job["id"] for job in found} == set(ids.values())
