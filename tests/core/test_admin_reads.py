"""Reads write nothing: ``info``, an exporter scrape and the dashboard only read Redis.

Run against a private redis-server, so Redis's own command counters show every command
these reads sent and nothing else's.
"""

from __future__ import annotations

import json

import redis
from click.testing import CliRunner
from prometheus_client import generate_latest

from fusionworker.cli import main
from fusionworker.core.config import load_settings
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.middleware import cron
from fusionworker.middleware.metrics import exporter_registry
from fusionworker.middleware.reaper import prune_workers
from fusionworker.web.service import Dashboard
from fusionworker.worker import Worker
from tests.redis_servers import redis_single  # noqa: F401 - fixture

#: scripts may write whatever their flags say; only the _RO variants are reads
SCRIPTS = {"eval", "evalsha", "fcall"}


def _calls(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): stats["calls"]
            for name, stats in client.info("commandstats").items()}


def _contents(client: redis.Redis) -> dict[str, bytes]:
    return {key: client.dump(key) for key in sorted(client.scan_iter(count=1000))}


def test_info_a_scrape_and_the_dashboard_write_nothing(redis_single):  # noqa: F811
    url = f"redis://127.0.0.1:{redis_single}/0"
    r = redis.Redis.from_url(url, decode_responses=True)
    s = load_settings(environ={}, redis_url=url, prefix="ro", allowed_modules=("tests",))
    q = Queue("mail", r, settings=s, events=False)
    q.enqueue("tests.jobs:noop")
    q.enqueue_in(60, "tests.jobs:noop")
    cron.register(r, s, "nightly", "0 3 * * *", "tests.jobs:noop", queue="mail")
    Worker("mail", r, settings=s, defaults=False, middleware=[], name="live.1").register()
    r.sadd(Keys("ro").workers, "dead.1")           # registered, heartbeat key expired
    flags = {name: set(doc["flags"]) for name, doc in r.command().items()}
    before, calls = _contents(r), _calls(r)

    env = {"REDIS_URL": url, "FUSIONWORKER_PREFIX": "ro"}
    result = CliRunner().invoke(main, ["info", "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = CliRunner().invoke(main, ["info"], env=env, catch_exceptions=False)
    assert text.exit_code == 0 and "live.1" in text.output
    page = generate_latest(exporter_registry(r, s)).decode()
    board = Dashboard(r, s)
    board.info(), board.workers(), board.queues()

    sent = {name: n - calls.get(name, 0) for name, n in _calls(r).items()
            if n > calls.get(name, 0)}
    assert "smembers" in sent and "hgetall" in sent    # the counters do see these reads
    writes = {name for name in sent
              if "write" in flags.get(name.split("|")[0], set()) or name in SCRIPTS}
    assert writes == set(), {name: sent[name] for name in writes}
    assert _contents(r) == before
    # what the reads showed: the live worker only; the dead name is the reaper's to drop
    doc = json.loads(result.output)
    assert [w["name"] for w in doc["workers"]] == ["live.1"]
    assert 'fusionworker_workers{state="started"} 1.0' in page
    assert [w["name"] for w in board.workers()] == ["live.1"]
    assert r.smembers(Keys("ro").workers) == {"live.1", "dead.1"}
    assert prune_workers(r, s) == ["dead.1"]
    assert r.smembers(Keys("ro").workers) == {"live.1"}
