"""``Queue("x").enqueue(...)`` per call against one reused ``Queue``: median per enqueue.

A web app often makes a Queue per request (``Queue("sms").enqueue(...)``, no
connection). That must cost what reusing one Queue costs: one shared client
per URL, scripts registered once per client, the queue-set SADD skipped when
known. Run against a real Redis (``REDIS_URL``, default 127.0.0.1:6379)::

    PYTHONPATH=. python bench/queue_per_call.py [-n 2000]

Prints both medians (and p99) side by side; the keys it writes (prefix
``qpc<random>``) are deleted at the end. Events go to the default sink as in
production.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import redis


def _measure(n: int, enqueue) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        enqueue()
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=2000, help="enqueues per variant")
    args = parser.parse_args(argv)
    prefix = f"qpc{uuid.uuid4().hex[:8]}"
    os.environ["FUSIONWORKER_PREFIX"] = prefix
    os.environ["FUSIONWORKER_ALLOWED_MODULES"] = "bench"
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    os.environ["REDIS_URL"] = url
    from fusionworker.core.queue import Queue
    from fusionworker.events import flush_default_sinks

    try:
        Queue("warm").enqueue("bench.jobs:noop")          # first use: imports, scripts, sink
        reused = Queue("reused")
        per_call = _measure(args.n, lambda: Queue("percall").enqueue("bench.jobs:noop"))
        one = _measure(args.n, lambda: reused.enqueue("bench.jobs:noop"))
        per_call = _measure(args.n, lambda: Queue("percall").enqueue("bench.jobs:noop"))
        flush_default_sinks(5.0)

        def ms(xs: list[float], q: float) -> float:
            return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000

        print(f"{'variant':<28}{'median ms':>10}{'p99 ms':>10}")
        print(f"{'Queue(name).enqueue() each':<28}{statistics.median(per_call) * 1000:>10.3f}"
              f"{ms(per_call, 0.99):>10.3f}")
        print(f"{'one Queue, reused':<28}{statistics.median(one) * 1000:>10.3f}"
              f"{ms(one, 0.99):>10.3f}")
    finally:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])


if __name__ == "__main__":
    main()
