"""How fast every dashboard page and API call answers on a big system, and how much
Redis work a live viewer costs.

    python bench/web.py [--queued 100000] [--failed 50000] [--deferred 10000]
                        [--batches 1000] [--runs 15] [--viewers 20] [--seconds 10]
                        [--queues 0]

Runs on a private redis-server started on a free port (no persistence; stopped
at the end), so that ``INFO commandstats`` counts the dashboard's commands only:

1. fill: ``--queued`` jobs and ``--deferred`` jobs (waiting on one queued job)
   by bulk enqueue (``Queue.enqueue_many``), ``--batches`` batches of one job
   each (``Batch``), ``--failed`` failed jobs (their hashes and registry
   entries written in bulk with the fields the finish script writes, a
   traceback on each: running 50,000 failing jobs through a worker would take
   the bench's time), 20,000 events in the stream and an hour of chart history;
   one real worker process (on an empty queue, stopped before step 3).
2. time each page and API call through Starlette's TestClient (in process: the
   HTTP socket is left out): median and slowest of ``--runs`` calls. Target:
   every median under 200 ms.
3. ``--viewers`` threads poll as the pages do every 2 s for ``--seconds`` s: an
   overview (queues, workers, chart), a job page and a queue page (their live
   endpoints), the failed page and a worker's page (the page itself, as their
   in-place refresh asks it), once with nothing changing and once with a
   job's progress and the queue's first page changing every second; the
   ``INFO commandstats`` delta (less the bench's own writes and INFO calls)
   per viewer per second (``--viewers 0``: not run).
4. with ``--queues N``: N more queues of one job each, then the overview, its polls,
   ``/api/v1/queues``, ``/api/v1/info``, ``/charts``, ``/failed`` (paged and whole) and
   the ``fusionworker info`` command timed at that many queues. Target: the overview
   under 1 s at 10,000 queues.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from starlette.testclient import TestClient

import fusionworker.ops.demo  # noqa: F401  (registers the demo job functions)
from bench.ab import start_redis
from fusionworker.core.batch import Batch
from fusionworker.core.config import load_settings
from fusionworker.core.keys import Keys
from fusionworker.core.queue import Queue
from fusionworker.events import metrics_history
from fusionworker.web import create_app

TOKEN = "bench"
ROOT = Path(__file__).resolve().parent.parent
TRACEBACK = ("Traceback (most recent call last):\n"
             '  File "/srv/fusionworker/runtime/horse/run.py", line 72, in run_job\n'
             "    result = call(func, job.args, job.kwargs)\n"
             '  File "app/tasks.py", line 12, in send\n'
             "    raise KeyError(name)\nKeyError: 'template'\n")
SEND = "fusionworker.ops.demo:send_sms"


def fill(r: redis.Redis, settings: Any, queued: int, failed: int, deferred: int,
         batches: int) -> dict[str, str]:
    big = Queue("big", r, settings=settings, events=False)
    t0 = time.perf_counter()
    big.enqueue_many(big.prepare(SEND, f"+1555{n:07d}", "hello", priority=(10, 0, 0, -5)[n % 4])
                     for n in range(queued))
    head = big.enqueue(SEND, "+15550000000", "first")
    waiting = big.enqueue_many(big.prepare(SEND, f"+1777{n:07d}", "later", depends_on=head)
                               for n in range(deferred))
    print(f"  bulk enqueue of {queued + deferred + 1} jobs: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    reports = Queue("reports", r, settings=settings, events=False)
    batch_id = ""
    for n in range(batches):
        with Batch(on_complete=SEND, queue=reports) as batch:
            reports.enqueue(SEND, f"+1888{n:07d}", "batched", batch=batch)
        batch_id = batch.id
    print(f"  {batches} batches: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    failed_id = write_failed(r, settings.prefix, failed)
    print(f"  {failed} failed jobs written: {time.perf_counter() - t0:.1f} s")
    keys = Keys(settings.prefix)
    pipe = r.pipeline(transaction=False)
    for n in range(20000):
        event = ("completed", "failed", "retry")[n % 3]
        pipe.xadd(keys.events, {"event": event, "job_id": uuid.uuid4().hex, "queue": "big",
                                "function": SEND, "duration": repr(0.001 * (n % 500 + 1))},
                  maxlen=100000, approximate=True)
    pipe.execute()
    metrics_history.record_from_stream(r, settings.prefix)
    return {"queued": head.id, "deferred": waiting[0].id, "failed": failed_id,
            "batch": batch_id}


def write_failed(r: redis.Redis, prefix: str, count: int) -> str:
    q = Keys(prefix).queue("big")
    now = time.time()
    first = ""
    for start in range(0, count, 5000):
        pipe = r.pipeline(transaction=False)
        dead: dict[str, float] = {}
        for n in range(start, min(start + 5000, count)):
            jid = uuid.uuid4().hex
            error = ("KeyError", "TimeoutError", "ValueError")[n % 3]
            pipe.hset(q.job(jid), mapping={
                "id": jid, "queue": "big", "func": SEND, "args": f'["+1999{n:07d}", "x"]',
                "kwargs": "{}", "priority": 0, "seq": n + 1, "timeout": 180,
                "status": "failed", "enqueued_at": f"{now - 3600:.6f}", "attempts": 1,
                "started_at": f"{now - 60:.6f}", "ended_at": f"{now - 59 + n * 1e-3:.6f}",
                "error_type": error, "error_message": "'template'", "traceback": TRACEBACK,
                "failure_reason": "exception"})
            dead[jid] = now - 59 + n * 1e-3
            first = first or jid
        pipe.zadd(q.failed, dead)
        pipe.execute()
    return first


def calls(ids: dict[str, str], queued: int, worker: str) -> list[tuple[str, str]]:
    last = (queued + 49) // 50
    j, d, f, b = ids["queued"], ids["deferred"], ids["failed"], ids["batch"]
    return [
        ("GET", "/"), ("GET", "/queues/big"), ("GET", f"/queues/big?page={last}"),
        ("GET", "/queues/big?status=deferred"), ("GET", "/queues/big?status=failed&page=500"),
        ("GET", "/failed"), ("GET", "/failed?queue=big&since=1h"),
        ("GET", "/failed?function=send&error_type=KeyError"), ("GET", f"/jobs/{f}"),
        ("GET", f"/jobs/{j}"), ("GET", f"/jobs/{d}"), ("GET", "/scheduled"), ("GET", "/retries"),
        ("GET", "/batches"), ("GET", f"/batches/{b}?queue=reports"), ("GET", "/workers"),
        ("GET", f"/workers/{worker}"), ("GET", "/charts"), ("GET", "/charts?range=day"),
        ("GET", f"/search?q={f}"), ("GET", "/search?q=send_s"),
        ("GET", "/api/v1/queues"), ("GET", "/api/v1/workers"), ("GET", "/api/v1/info"),
        ("GET", "/api/v1/chart"), ("GET", "/api/v1/cron"), ("GET", "/api/v1/openapi.json"),
        ("GET", "/api/v1/jobs?queue=big"), ("GET", f"/api/v1/jobs?queue=big&page={last}"),
        ("GET", "/api/v1/jobs?queue=big&priority=high&page=100"),
        ("GET", "/api/v1/jobs?queue=big&status=failed&page=900"),
        ("GET", "/api/v1/jobs?queue=big&status=deferred&page=100"),
        ("GET", "/api/v1/jobs?queue=big&function=send&per_page=100"),
        ("GET", f"/api/v1/jobs/{f}"), ("GET", f"/api/v1/jobs/{j}/live?queue=big"),
        ("GET", "/api/v1/queues/big/live?status=queued"),
        ("GET", "/api/v1/failed?error_type=Timeout"), ("GET", "/api/v1/scheduled?kind=retries"),
        ("GET", "/api/v1/batches"), ("GET", f"/api/v1/workers/{worker}"),
        ("GET", "/api/v1/history?range=day"),
        ("PUT", f"/api/v1/jobs/{j}/priority"), ("PUT", "/api/v1/queues/big/rate-limit"),
        ("POST", "/api/v1/queues/big/pause"), ("POST", "/api/v1/queues/big/unpause"),
    ]


def time_calls(client: TestClient, todo: list[tuple[str, str]], runs: int) -> float:
    print(f"{'call':<64} {'median ms':>9} {'max ms':>8}")
    worst = 0.0
    for method, path in todo:
        times = []
        for i in range(runs):
            body = ({"priority": i % 5} if path.endswith("/priority") else
                    {"rate": None} if path.endswith("/rate-limit") else None)
            t = time.perf_counter()
            answer = client.request(method, path, json=body)
            times.append((time.perf_counter() - t) * 1000)
            if answer.status_code != 200:
                raise SystemExit(f"{method} {path}: {answer.status_code} {answer.text[:200]}")
        median = statistics.median(times)
        worst = max(worst, median)
        flag = "" if median < 200 else "  <-- over 200 ms"
        print(f"{method + ' ' + path[:58]:<64} {median:9.1f} {max(times):8.1f}{flag}")
    print(f"slowest median: {worst:.1f} ms (target < 200 ms)")
    return worst


def commands(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))


def viewers(app: Any, r: redis.Redis, ids: dict[str, str], kind: str, n: int, seconds: float,
            changing: bool) -> float:
    """Redis commands per viewer per second of ``n`` viewers of ``kind`` polling every 2 s:
    the commands of all the poll rounds made, per round, per 2 s."""
    polls = {
        "overview": ["/api/v1/queues", "/api/v1/workers", "/api/v1/chart?minutes=60"],
        "job": [f"/api/v1/jobs/{ids['queued']}/live?queue=big"],
        "queue": ["/api/v1/queues/big/live?status=queued"],
        # pages refreshed in place: the page itself is asked again
        "failed": ["/failed"],
        "worker": [f"/workers/{ids['worker']}"],
    }[kind]
    key = Keys(load_prefix(app)).queue("big").job(ids["queued"])
    ready = threading.Barrier(n + 1)
    stop = [0.0]

    def poll(client: TestClient, seen: dict[str, str]) -> None:
        for url in polls:
            if not url.startswith("/api/"):
                client.get(url)
                continue
            mark = "&" if "?" in url else "?"
            doc = client.get(f"{url}{mark}seen={seen.get(url, '')}").json()
            if doc.get("seen"):
                seen[url] = doc["seen"]

    def viewer() -> None:
        with TestClient(app) as client:
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            seen: dict[str, str] = {}
            poll(client, seen)          # the page load: what it shows (not counted)
            ready.wait()
            while time.monotonic() < stop[0]:
                poll(client, seen)
                rounds.append(1)
                time.sleep(2.0)

    big = Queue("big", r, settings=app.state.dashboard.settings, events=False)

    def change() -> None:
        r.hset(key, "progress", repr(time.time() % 1))
        big.enqueue(SEND, "+1", "new", priority=20)

    step = commands(r)
    change()
    step = commands(r) - step    # what one change costs (Lua's commands count too)
    own = 0
    rounds: list[int] = []
    threads = [threading.Thread(target=viewer) for _ in range(n)]
    for t in threads:
        t.start()
    while ready.n_waiting < n:    # every viewer loaded its page
        time.sleep(0.05)
    before = commands(r)
    stop[0] = time.monotonic() + seconds
    ready.wait()
    if changing:   # a job's progress and the head of the queue change every second
        while time.monotonic() < stop[0]:
            change()
            own += step
            time.sleep(1.0)
    for t in threads:
        t.join()
    spent = commands(r) - before - own
    # per viewer per second at the pages' poll interval (2 s): a loaded machine makes
    # fewer rounds than n * seconds / 2, so the rounds made are counted
    return spent / max(len(rounds), 1) / 2.0


def load_prefix(app: Any) -> str:
    return str(app.state.dashboard.prefix)


def start_worker(url: str, prefix: str, name: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, REDIS_URL=url, FUSIONWORKER_PREFIX=prefix,
               FUSIONWORKER_IMPORTS="fusionworker.ops.demo", PYTHONPATH=str(ROOT))
    env.pop("NOTIFY_SOCKET", None)
    return subprocess.Popen([sys.executable, "-m", "fusionworker.cli", "worker", "--customq",
                             "idle", "--name", name], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def many_queues(r: redis.Redis, settings: Any, count: int) -> None:
    """``count`` queues named ``q00000``... with one job each."""
    t0 = time.perf_counter()
    for n in range(count):
        Queue(f"q{n:05d}", r, settings=settings, events=False).enqueue(SEND, "+1", "hi")
    print(f"  {count} queues of one job each: {time.perf_counter() - t0:.1f} s")


def time_many(client: TestClient, url: str, prefix: str, runs: int, count: int) -> None:
    """Step 4 (see the module doc)."""
    todo = ["/", "/?page=100", "/api/v1/queues?page=1&per_page=50",
            "/api/v1/chart?minutes=60&page=1&per_page=50", "/api/v1/queues",
            "/api/v1/info?page=1", "/api/v1/info", "/charts", "/api/v1/history", "/failed",
            "/queues/q00001", "/scheduled", "/retries", "/batches", "/workers",
            "/search?q=send_s", "/api/v1/cron"]
    print(f"\nat {count} more queues ({runs} runs each):")
    print(f"{'call':<64} {'median ms':>9} {'max ms':>8} {'KiB':>7}")
    whole = ("/api/v1/queues", "/api/v1/info")   # every queue at once: asked once
    for path in todo:
        times, size = [], 0
        for _ in range(1 if path in whole else runs):
            t = time.perf_counter()
            answer = client.get(path)
            times.append((time.perf_counter() - t) * 1000)
            if answer.status_code != 200:
                raise SystemExit(f"GET {path}: {answer.status_code} {answer.text[:200]}")
            size = len(answer.content)
        median = statistics.median(times)
        flag = "  <-- over 1 s" if path == "/" and median > 1000 else ""
        print(f"{'GET ' + path[:58]:<64} {median:9.1f} {max(times):8.1f} {size / 1024:7.1f}"
              f"{flag}")
    env = dict(os.environ, REDIS_URL=url, FUSIONWORKER_PREFIX=prefix, PYTHONPATH=str(ROOT))
    for args in (["info"], ["info", "--page", "1"], ["info", "--all"]):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "fusionworker.cli", *args], env=env,
                              capture_output=True, check=False)
        took = time.perf_counter() - t
        print(f"{'fusionworker ' + ' '.join(args):<64} {took * 1000:9.1f} "
              f"(exit {done.returncode}, {len(done.stdout) / 1024:.1f} KiB out)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--failed", type=int, default=50_000)
    parser.add_argument("--deferred", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--queues", type=int, default=0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fw-bench-web-"))
    server, url = start_redis(workdir)
    worker = None
    try:
        r = redis.Redis.from_url(url, decode_responses=True)
        prefix = "fwbenchweb"
        settings = load_settings(environ={}, redis_url=url, prefix=prefix, web_token=TOKEN)
        print(f"private redis-server at {url}; filling:")
        ids = fill(r, settings, args.queued, args.failed, args.deferred, args.batches)
        worker = start_worker(url, prefix, "bench-worker")
        deadline = time.monotonic() + 30
        while not r.exists(Keys(prefix).worker("bench-worker")):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit("the worker did not start")
            time.sleep(0.2)
        app = create_app(settings, r, history_interval=None)
        client = TestClient(app)
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        ids["worker"] = "bench-worker"
        time_calls(client, calls(ids, args.queued, "bench-worker"), args.runs)
        # the worker's heartbeat hash stays (its TTL) while the viewers poll: stop its
        # commands from counting
        worker.kill()
        worker.wait(10)
        if args.viewers:
            print(f"\nRedis commands per viewer per second, {args.viewers} viewers polling "
                  f"every 2 s for {args.seconds:g} s:")
        for changing in (False, True) if args.viewers else ():
            for kind in ("overview", "job", "queue", "failed", "worker"):
                rate = viewers(app, r, ids, kind, args.viewers, args.seconds, changing)
                print(f"  {kind:<9} {'changing' if changing else 'steady':<9} {rate:7.2f}")
        if args.queues:
            many_queues(r, settings, args.queues)
            time_many(client, url, prefix, min(args.runs, 5), args.queues)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(10)
        server.kill()
        server.wait(10)
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


if __name__ == "__main__":
    main()
