"""A value Redis holds that no page can show as it is (a time past the year 9999, ``inf``,
``nan``, ``x`` where a count belongs, a key of another type) costs that figure, never
the page or the answer around it; an action on a queue name that is none answers 400.
Starlette's TestClient on the real Redis, one bad value at a time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from fusionworker.core import cron
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.web import create_app
from tests.integration.test_poison_records import pages
from tests.web_support import SAME_SITE

TOKEN = "stored-values-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}

Corrupt = Callable[[redis.Redis, Keys, str], Any]


def _worker(raw: redis.Redis, k: Keys, fields: dict[str, str]) -> None:
    raw.sadd(k.workers, "w1")
    raw.hset(k.worker("w1"), mapping={"name": "w1", "state": "idle", **fields})


def _buckets(raw: redis.Redis, k: Keys, value: str) -> None:
    for resolution in (1, 10, 60, 300, 3600):
        bucket = int(time.time() // resolution)
        raw.hset(k.queue("default").history(resolution, bucket),
                 mapping={"finished": value, "dX": "1"})


#: one bad value each, written where fusionworker writes that value
CASES: dict[str, Corrupt] = {
    "enqueued_at past 9999": lambda raw, k, j: raw.hset(
        k.queue("default").job(j), mapping={"enqueued_at": "1e20", "ended_at": "inf"}),
    "started_at before year 1": lambda raw, k, j: raw.hset(
        k.queue("default").job(j), mapping={"started_at": "-99999999999999",
                                            "scheduled_for": "nan"}),
    "scheduled score 1e308": lambda raw, k, j: raw.zadd(k.queue("default").scheduled,
                                                        {j: 1e308}),
    "batch created 1e300": lambda raw, k, j: raw.zadd(k.queue("default").batches,
                                                      {"b1": 1e300}),
    "cron due -inf": lambda raw, k, j: raw.zadd(k.queue("default").cron,
                                                {"c1": float("-inf")}),
    "cron last_run inf": lambda raw, k, j: raw.hset(k.queue("default").cron_entry("c1"),
                                                    "last_run", "inf"),
    "cron runs of 5000 digits": lambda raw, k, j: raw.hset(k.queue("default").cron_entry("c1"),
                                                           "runs", "9" * 5000),
    "max_active x": lambda raw, k, j: raw.set(k.queue("default").base + "max_active", "x"),
    "rate window x": lambda raw, k, j: raw.hset(k.queue("default").base + "rate",
                                                mapping={"limit": "5", "window": "x"}),
    "rate window 0": lambda raw, k, j: raw.hset(k.queue("default").base + "rate",
                                                mapping={"limit": "5", "window": "0"}),
    "group rate x": lambda raw, k, j: (
        raw.hset(k.queue("default").base + "group_rate", mapping={"every": "x", "group:a": "1e300 nan"}),
        raw.hset(k.queue("default").base + "group_rate:held", "held_seconds", "x")),
    "a heartbeat key of another type": lambda raw, k, j: (raw.sadd(k.workers, "w2"),
                                                          raw.set(k.worker("w2"), "x")),
    "worker pid inf": lambda raw, k, j: _worker(raw, k, {"pid": "inf", "concurrency": "nan"}),
    "worker counts of 5000 digits": lambda raw, k, j: _worker(
        raw, k, {"successful": "9" * 5000, "failed": "x", "total_working_time": "nan",
                 "lease": "nan", "processes": "[", "rss_mib": "1e20"}),
    "minute count nan": lambda raw, k, j: raw.hset(
        k.queue("default").minute(int(time.time() // 60)), "finished", "nan"),
    "chart buckets x": lambda raw, k, j: _buckets(raw, k, "x"),
    "event of text numbers": lambda raw, k, j: raw.rpush(
        k.queue("default").base + "job_events:" + j,
        '["1-0",{"event":"completed","@timestamp":"x","duration":"x","progress":"inf",'
        '"attempt":"1e300"}]'),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_value_no_page_can_show_costs_that_value_only(r, settings, prefix, redis_url, case):
    raw = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    job = Queue("default", r, settings=settings).enqueue("tests.jobs:add", 1, 2)
    cron.register(r, settings, "c1", "@hourly", "tests.jobs:add", args=[1, 2])
    CASES[case](raw, keys, job.id)
    app = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=True) as web:
        for url in pages([job.id]) + [f"/api/v1/jobs/{job.id}/live", "/workers/w1",
                                      "/api/v1/workers/w1"]:
            answer = web.get(url, follow_redirects=True)
            assert answer.status_code < 500, (case, url, answer.status_code, answer.text[:200])
        if case == "enqueued_at past 9999":
            page = web.get(f"/jobs/{job.id}").text
            assert "1e+20 (no time)" in page
        if case == "cron last_run inf":      # JSON cannot say inf: null
            listed = web.get("/api/v1/cron").json()
            entries = listed["cron"] if isinstance(listed, dict) else listed
            assert [e["last_run"] for e in entries] == [None], listed


def pending_of_another_type(r: Any, settings: Any, prefix: str, redis_url: str,
                            *queues: str) -> Any:
    """A job on each of ``queues``, the first one's ``pending`` made a string (another
    program's key): the dashboard's app over them."""
    for name in queues:
        Queue(name, r, settings=settings).enqueue("tests.jobs:add", 1, 2)
    raw = redis.Redis.from_url(redis_url)
    pending = Keys(prefix).queue(queues[0]).pending
    raw.delete(pending)
    raw.set(pending, "x")
    return create_app(settings.replace(web_token=TOKEN), r)


def test_a_key_of_another_type_costs_its_queue_only_and_is_said_plainly(r, settings, prefix,
                                                                 redis_url, caplog):
    app = pending_of_another_type(r, settings, prefix, redis_url, "default", "other")
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=False) as web:
        answer = web.get("/api/v1/queues")
        page = web.get("/")
        alone = web.get("/queues/default")
    # the other queues are listed; the one Redis refuses to read says so
    assert answer.status_code == 200, answer.text
    listed = {q["queue"]: q for q in answer.json()["queues"]}
    assert listed["other"]["pending"] == 1 and "unreadable" not in listed["other"]
    assert "WRONGTYPE" in listed["default"]["unreadable"], listed["default"]
    assert page.status_code == 200 and "cannot be read" in page.text
    # asked alone, its page says what Redis answered, in one line
    assert alone.status_code == 500 and "Redis refused a command" in alone.text
    assert "WRONGTYPE" in alone.text, alone.text[:300]
    assert not any(rec.exc_info for rec in caplog.records), "a traceback was logged"


def test_the_one_queue_of_a_deployment_that_cannot_be_read_is_listed_as_such(
        r, settings, prefix, redis_url):
    app = pending_of_another_type(r, settings, prefix, redis_url, "default")
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=False) as web:
        page, listed = web.get("/"), web.get("/api/v1/queues")
    assert page.status_code == 200 and "cannot be read" in page.text
    assert listed.status_code == 200 and "WRONGTYPE" in listed.json()["queues"][0]["unreadable"]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):   # asked alone: raised
        Queue("default", r, settings=settings).stats()


@pytest.mark.parametrize("where", ["all", "../x", "x" * 201, "é"])
def test_a_cron_action_on_a_queue_name_that_is_none_answers_400(r, settings, where):
    cron.register(r, settings, "c1", "@hourly", "tests.jobs:add", args=[1, 2])
    app = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=False) as web:
        for method, path in (("POST", "/api/v1/cron/c1/pause"), ("POST", "/api/v1/cron/c1/resume"),
                             ("POST", "/api/v1/cron/c1/run"), ("DELETE", "/api/v1/cron/c1")):
            answer = web.request(method, path, params={"queue": where})
            assert answer.status_code == 400, (method, path, answer.status_code, answer.text)
            assert "queue" in answer.json()["error"], answer.text


def test_a_cron_entry_redis_holds_unusable_answers_409_naming_it(r, settings, prefix,
                                                                redis_url):
    cron.register(r, settings, "c1", "@hourly", "tests.jobs:add", args=[1, 2])
    cron.pause(r, settings, "c1")
    raw = redis.Redis.from_url(redis_url)
    raw.hset(Keys(prefix).queue("default").cron_entry("c1"),
             mapping={"timezone": "Nowhere/City", "priority": "9" * 5000})
    app = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=False) as web:
        for path in ("/api/v1/cron/c1/resume", "/api/v1/cron/c1/run"):
            answer = web.post(path)
            assert answer.status_code == 409, (path, answer.status_code, answer.text)
            assert "'c1'" in answer.json()["error"], answer.text


def test_a_job_key_of_another_type_is_left_out_of_every_listing(r, settings, prefix,
                                                                redis_url):
    """A job's key holding another type (another program's) holds no record: the
    listings that name it (the queue's page, search, ``job list``) show the others."""
    from click.testing import CliRunner

    from fusionworker.cli import main

    q = Queue("default", r, settings=settings)
    gone, kept = (q.enqueue("tests.jobs:add", 1, 2) for _ in range(2))
    raw = redis.Redis.from_url(redis_url)
    key = Keys(prefix).queue("default").job(gone.id)
    raw.delete(key)
    raw.set(key, "x")
    app = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(app, headers={**SAME_SITE, **BEARER}, raise_server_exceptions=True) as web:
        for url in ("/queues/default", "/search?q=add", "/api/v1/jobs?queue=default"):
            answer = web.get(url)
            assert answer.status_code == 200 and kept.id in answer.text, (url, answer.text[:300])
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": prefix}
    listed = CliRunner().invoke(main, ["job", "list", "-q", "default"], env=env)
    assert listed.exit_code == 0 and kept.id in listed.output, listed.output
