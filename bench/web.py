"""How fast every dashboard page and API call answers with a big queue.

    python bench/web.py [--queued 100000] [--failed 50000] [--runs 15]

Writes ``--queued`` pending jobs and ``--failed`` failed jobs (job hashes and
registry entries pipelined in bulk, the same fields the enqueue and finish
scripts write, plus a traceback on each failed one) and 20,000 events into
the stream, under a private key prefix on the Redis at REDIS_URL (deleted at
the end). Then times each page and API call through Starlette's TestClient
(in process: the HTTP socket is left out) and prints the median and the
slowest of ``--runs`` calls. Target: every median under 200 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from starlette.testclient import TestClient

from fusionworker.core.config import load_settings
from fusionworker.core.job import score
from fusionworker.core.keys import Keys
from fusionworker.web import create_app

TOKEN = "bench"
TRACEBACK = ("Traceback (most recent call last):\n  File \"app/tasks.py\", line 12, in send\n"
             "    raise KeyError(name)\nKeyError: 'template'\n")


def fill(r: redis.Redis, prefix: str, queued: int, failed: int) -> tuple[str, str]:
    keys = Keys(prefix)
    q = keys.queue("big")
    r.sadd(keys.queues, "big")
    now = time.time()
    batch = 5000
    first_queued = first_failed = ""
    for start in range(0, queued + failed, batch):
        pipe = r.pipeline(transaction=False)
        pending: dict[str, float] = {}
        dead: dict[str, float] = {}
        for n in range(start, min(start + batch, queued + failed)):
            jid = uuid.uuid4().hex
            is_failed = n >= queued
            priority = (10, 0, 0, -5)[n % 4]
            fields = {"id": jid, "queue": "big", "func": "app.tasks:send",
                      "args": f'["+1555{n:07d}", "hello"]', "kwargs": "{}",
                      "priority": priority, "seq": n + 1, "timeout": 180,
                      "status": "failed" if is_failed else "queued",
                      "enqueued_at": f"{now - 3600 + n * 0.01:.6f}", "attempts": 0}
            if is_failed:
                fields.update(attempts=1, started_at=f"{now - 60:.6f}", ended_at=f"{now - 59:.6f}",
                              error_type="KeyError", error_message="'template'",
                              traceback=TRACEBACK, failure_reason="exception")
                dead[jid] = now - 59 + n * 1e-4
                first_failed = first_failed or jid
            else:
                pending[jid] = score(priority, n + 1)
                first_queued = first_queued or jid
            pipe.hset(q.job(jid), mapping=fields)
        if pending:
            pipe.zadd(q.pending, pending)
        if dead:
            pipe.zadd(q.failed, dead)
        pipe.execute()
    pipe = r.pipeline(transaction=False)
    for _ in range(20000):
        pipe.xadd(keys.events, {"event": "queued", "job_id": uuid.uuid4().hex, "queue": "big",
                                "function": "app.tasks:send"}, maxlen=100000, approximate=True)
    pipe.execute()
    r.set(q.seq, queued + failed)
    return first_queued, first_failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--failed", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"fwbenchweb{uuid.uuid4().hex[:6]}"
    r = redis.Redis.from_url(url, decode_responses=True)
    try:
        t0 = time.perf_counter()
        queued_id, failed_id = fill(r, prefix, args.queued, args.failed)
        print(f"wrote {args.queued} queued + {args.failed} failed jobs in "
              f"{time.perf_counter() - t0:.1f} s (prefix {prefix})")
        settings = load_settings(environ={}, redis_url=url, prefix=prefix, web_token=TOKEN)
        client = TestClient(create_app(settings, r))
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        last = (args.queued + 49) // 50
        calls = [
            ("GET", "/"), ("GET", "/queues/big"), ("GET", f"/queues/big?page={last}"),
            ("GET", "/queues/big?status=failed&page=500"), ("GET", "/failed?queue=big"),
            ("GET", f"/jobs/{failed_id}"), ("GET", f"/jobs/{queued_id}"), ("GET", "/scheduled"),
            ("GET", "/workers"),
            ("GET", "/api/v1/queues"), ("GET", "/api/v1/workers"), ("GET", "/api/v1/info"),
            ("GET", "/api/v1/chart"), ("GET", "/api/v1/cron"), ("GET", "/api/v1/openapi.json"),
            ("GET", "/api/v1/jobs?queue=big"), ("GET", f"/api/v1/jobs?queue=big&page={last}"),
            ("GET", "/api/v1/jobs?queue=big&priority=high&page=100"),
            ("GET", "/api/v1/jobs?queue=big&status=failed&page=900"),
            ("GET", "/api/v1/jobs?queue=big&function=send&per_page=100"),
            ("GET", f"/api/v1/jobs/{failed_id}"),
            ("PUT", f"/api/v1/jobs/{queued_id}/priority"),
            ("POST", "/api/v1/queues/big/pause"), ("POST", "/api/v1/queues/big/unpause"),
        ]
        print(f"{'call':<62} {'median ms':>9} {'max ms':>8}")
        worst = 0.0
        for method, path in calls:
            times = []
            for i in range(args.runs):
                kwargs = {"json": {"priority": i % 5}} if method == "PUT" else {}
                t = time.perf_counter()
                answer = client.request(method, path, **kwargs)
                times.append((time.perf_counter() - t) * 1000)
                if answer.status_code != 200:
                    raise SystemExit(f"{method} {path}: {answer.status_code} {answer.text[:200]}")
            median = statistics.median(times)
            worst = max(worst, median)
            flag = "" if median < 200 else "  <-- over 200 ms"
            print(f"{method + ' ' + path[:56]:<62} {median:9.1f} {max(times):8.1f}{flag}")
        print(f"slowest median: {worst:.1f} ms (target < 200 ms)")
    finally:
        batch = list(r.scan_iter(match=f"{prefix}:*", count=5000))
        for i in range(0, len(batch), 1000):
            r.delete(*batch[i:i + 1000])


if __name__ == "__main__":
    main()
