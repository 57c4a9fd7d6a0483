"""Per-queue rate limits on the real Redis: the claim script, the CLI, info, metrics, and
4 real worker processes held to 20 starts/s."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from click.testing import CliRunner

from fusionworker.cli import main
from fusionworker.queue import parse_rate


def _claim(q):
    return q.scripts.claim(keys=[q.qkeys.base],
                           args=["w-test", uuid.uuid4().hex, 60, q.settings.failed_ttl])


def _server_now(r) -> float:
    sec, usec = r.time()
    return sec + usec / 1e6


def test_parse_rate():
    assert parse_rate("10/s") == (10, 1.0)
    assert parse_rate("600/m") == (600, 60.0)
    assert parse_rate(" 5/h ") == (5, 3600.0)
    for bad in ("10", "0/s", "-1/s", "x/s", "10/d", "1.5/s", "/s", ""):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_claim_refuses_beyond_the_limit_and_names_the_next_slot(queue, r):
    q, other = queue("limited"), queue("free")
    q.set_rate_limit("3/s")
    assert q.rate_limit == {"limit": 3, "window": 1.0, "held_seconds": 0.0}
    assert _claim(q)[0] == "empty"  # no job: an empty queue is never "limited"
    for i in range(5):
        q.enqueue("tests.jobs:noop", job_id=f"j{i}")
        other.enqueue("tests.jobs:noop")
    replies = [_claim(q) for _ in range(3)]
    assert [x[0] for x in replies] == ["job"] * 3
    first_start = float(replies[0][1])
    refused = _claim(q)
    assert refused[0] == "limited"
    assert float(refused[1]) == pytest.approx(first_start + 1.0, abs=1e-5)
    assert q.count == 2 and r.hget(q.qkeys.base + "rate", "held_since") is not None
    # another queue is not held
    assert [_claim(other)[0] for _ in range(5)] == ["job"] * 5
    # once the oldest start left the window, one more (and only one) may start
    time.sleep(max(0.0, float(refused[1]) - _server_now(r)) + 0.01)
    assert _claim(q)[0] == "job"
    if _server_now(r) < float(replies[1][1]) + 1.0:  # the second start is still in the window
        assert _claim(q)[0] == "limited"
    held = q.rate_limit["held_seconds"]
    assert held > 0.5
    q.set_rate_limit(None)
    assert q.rate_limit is None and _claim(q)[0] == "job"


def test_a_limit_on_a_window_longer_than_a_second(queue):
    q = queue("hourly")
    q.set_rate_limit((2, 3600))
    for _ in range(3):
        q.enqueue("tests.jobs:noop")
    assert [_claim(q)[0] for _ in range(3)] == ["job", "job", "limited"]


def test_bad_limits_are_refused_and_write_nothing(queue, r):
    q = queue("x")
    for bad in ("0/s", "ten/s", (0, 1), (1, 0), (1, 100000), (True, 1)):
        with pytest.raises(ValueError):
            q.set_rate_limit(bad)
    assert not r.exists(q.qkeys.base + "rate")


def _cli(settings, *args):
    env = {"REDIS_URL": settings.redis_url, "FUSIONWORKER_PREFIX": settings.prefix,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    return CliRunner().invoke(main, list(args), env=env)


def test_cli_set_rate_limit_info_and_metrics(queue, settings, r):
    q = queue("sms")
    q.enqueue("tests.jobs:noop")
    result = _cli(settings, "set-rate-limit", "sms", "10/s")
    assert result.exit_code == 0 and "at most 10/s" in result.output, result.output
    assert q.rate_limit["limit"] == 10
    doc = json.loads(_cli(settings, "info", "--json").output)
    assert doc["schema"] == 1
    [sms] = [x for x in doc["queues"] if x["queue"] == "sms"]
    assert sms["rate_limit"] == {"limit": 10, "window": 1.0, "held_seconds": 0.0}
    text = _cli(settings, "info").output
    assert "RATE" in text and "10/s" in text
    from prometheus_client import generate_latest

    from fusionworker.metrics import exporter_registry

    scrape = generate_latest(exporter_registry(r, settings)).decode()
    assert 'fusionworker_queue_rate_limit_per_second{queue="sms"} 10.0' in scrape
    assert 'fusionworker_queue_rate_limited_seconds_total{queue="sms"} 0.0' in scrape
    for args, message in ((("sms", "10/d"), "invalid rate"), (("sms",), "give a rate"),
                          (("sms", "10/s", "--none"), "give a rate")):
        result = _cli(settings, "set-rate-limit", *args)
        assert result.exit_code == 2 and message in result.output
    assert q.rate_limit["limit"] == 10
    result = _cli(settings, "set-rate-limit", "sms", "--none")
    assert result.exit_code == 0 and q.rate_limit is None
    assert "RATE" not in _cli(settings, "info").output


def test_four_workers_never_start_more_than_20_in_any_second(queue, r, settings, processes,
                                                            prefix):
    """200 jobs at 20/s over 4 worker processes: at most 20 start in any 1-second
    window, so the run spans at least 9 s. The
    workers poll only every 60 s: they wake for the next slot from the claim's reply.
    A second, unlimited queue served by the same workers is not held.

    The limit holds job starts as the claim script sees them (server clock); the
    times written inside the jobs add each job's fork latency, so for them the same
    bound is asserted over windows narrower by the spread of that latency."""
    limited, free = queue("limited"), queue("free")
    key, free_key = f"{prefix}:starts", f"{prefix}:free"
    limited.set_rate_limit("20/s")
    ids = [j.id for j in limited.enqueue_many([limited.prepare("tests.jobs:record_span", settings.redis_url, key, i)
                          for i in range(200)])]
    free.enqueue_many([free.prepare("tests.jobs:record_span", settings.redis_url, free_key, i)
                       for i in range(40)])
    env = {"FUSIONWORKER_POLL_INTERVAL": "60"}
    procs = [processes.worker("--customq", "limited,free", "--burst", env=env)
             for _ in range(4)]
    for proc in procs:  # a burst worker waits for the limit's next slot, it does not exit
        assert proc.wait(100) == 0, processes.output(proc)
    inside = {int(x.split(":")[1]): float(x.split(":")[2]) for x in r.lrange(key, 0, -1)
              if x.startswith("start:")}
    claimed = {i: limited.fetch_job(job_id).started_at for i, job_id in enumerate(ids)}
    assert len(inside) == len(claimed) == 200

    def most_in_a_window(times: list[float], width: float) -> int:
        times = sorted(times)
        return max(sum(1 for t in times[i:] if t < start + width)
                   for i, start in enumerate(times))

    # the start the limit controls: the claim, stamped by the Redis server's clock
    assert most_in_a_window(list(claimed.values()), 1.0) <= 20
    # inside the jobs: each start comes after its claim by the fork latency; the claims'
    # bound holds for every window narrower by the spread of that latency
    lag = [inside[i] - claimed[i] for i in range(200)]
    assert min(lag) >= -0.01  # same host, same clock
    assert most_in_a_window(list(inside.values()), 1.0 - (max(lag) - min(lag))) <= 20
    starts = sorted(claimed.values())
    assert starts[-1] - starts[0] >= 9.0  # the limit itself: 200 starts at 20/s
    assert sorted(inside.values())[-1] - sorted(inside.values())[0] >= 9.0 - (max(lag) - min(lag))
    free_starts = [float(x.split(":")[2]) for x in r.lrange(free_key, 0, -1)
                   if x.startswith("start:")]
    # not held behind the limited queue: all done long before the limited queue is
    assert len(free_starts) == 40 and max(free_starts) < starts[-1] - 2.0
    assert limited.rate_limit["held_seconds"] > 0
