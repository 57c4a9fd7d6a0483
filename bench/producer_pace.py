#!/usr/bin/env python3
"""One producer enqueueing jobs one at a time: fusionworker against Dramatiq, side by side.

    python bench/producer_pace.py [--jobs 5000] [--rounds 3] [--redis-url redis://127.0.0.1:6379/13]

What paces the live rows of ``io_bound.py`` once the worker keeps up: one process
calling ``Queue.enqueue_call`` (fusionworker, the event log on, and ``fw-noevents``
with it off) or ``RedisBroker.enqueue`` (Dramatiq) once per job, the same three
arguments each (``bench.io_jobs:io_sleep``'s), nothing consuming. Per enqueue it
prints the wall time, the producer's own CPU (user and system, ``os.times``) and the
Redis server's CPU (the growth of ``used_cpu_user + used_cpu_sys`` of ``INFO cpu``
over the run: reading, running and answering the call; the server's whole count, so
run it with nothing else on that server). Not ``INFO commandstats``: it counts a
script's time and again the time of each command the script calls, so it overstates
a script that calls many. The systems alternate, each round in the other order;
medians over the rounds.

Only this run's keys are deleted afterwards (its fusionworker prefix, its Dramatiq
namespace); nothing is flushed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable

import redis

SYSTEMS = ("fw", "fw-noevents", "dramatiq")
ARGS = ("/tmp/producer-pace", 0.02)


def _redis_usec(r: redis.Redis) -> float:
    """The server's CPU so far, in µs (its main thread and the rest: ``INFO cpu``)."""
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def _fusionworker(url: str, prefix: str, events: bool) -> Callable[[int], None]:
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    # the client the README's producer gets: none given, the settings' REDIS_URL
    q = Queue("ioq", settings=load_settings(environ={}, redis_url=url, prefix=prefix,
                                            allowed_modules=("bench",), events=events))

    def run(n: int) -> None:
        for _ in range(n):
            q.enqueue_call("bench.io_jobs:io_sleep", args=[ARGS[0], time.time(), ARGS[1]])
    return run


def _dramatiq(url: str, namespace: str) -> Callable[[int], None]:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=url, namespace=namespace)

    def run(n: int) -> None:
        for _ in range(n):
            broker.enqueue(dramatiq.Message(queue_name="ioq", actor_name="io_sleep",
                                            args=(ARGS[0], time.time(), ARGS[1]), kwargs={},
                                            options={}))
    return run


def _measure(r: redis.Redis, run: Callable[[int], None], n: int) -> dict[str, float]:
    run(20)                                  # connections made, scripts loaded
    usec, t0, c0 = _redis_usec(r), time.perf_counter(), os.times()
    run(n)
    wall, c1 = time.perf_counter() - t0, os.times()
    redis_us = _redis_usec(r) - usec
    return {"per_s": n / wall, "wall_us": wall / n * 1e6,
            "user_us": (c1.user - c0.user) / n * 1e6,
            "sys_us": (c1.system - c0.system) / n * 1e6, "redis_us": redis_us / n}


def _clean(r: redis.Redis, pattern: str) -> None:
    """Delete this run's keys (its fusionworker prefix, its Dramatiq namespace)."""
    for key in r.scan_iter(match=pattern, count=1000):
        r.delete(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL",
                                                              "redis://127.0.0.1:6379/13"))
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    opts = parser.parse_args()
    systems = [s for s in opts.systems.split(",") if s]
    r = redis.Redis.from_url(opts.redis_url, decode_responses=True)
    tag = uuid.uuid4().hex[:8]
    figures: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    try:
        for rnd in range(opts.rounds):
            for system in (systems if rnd % 2 == 0 else systems[::-1]):
                name = f"pp{tag}{system.replace('-', '')}"
                run = (_dramatiq(opts.redis_url, name) if system == "dramatiq"
                       else _fusionworker(opts.redis_url, name, system == "fw"))
                figures[system].append(_measure(r, run, opts.jobs))
                _clean(r, f"{name}*")
                f = figures[system][-1]
                print(f"round {rnd + 1} {system}: {f['per_s']:,.0f} enqueues/s", flush=True)
    finally:
        _clean(r, f"pp{tag}*")
    print(f"\n{opts.jobs} enqueues one at a time, one producer; medians of {opts.rounds} "
          "rounds; per enqueue:")
    print(f"{'system':12} {'enqueues/s':>10} {'wall µs':>8} {'user µs':>8} {'sys µs':>7} "
          f"{'Redis CPU µs':>13}")
    for system in systems:
        med = {k: statistics.median(f[k] for f in figures[system]) for k in figures[system][0]}
        print(f"{system:12} {med['per_s']:>10,.0f} {med['wall_us']:>8.0f} {med['user_us']:>8.0f} "
              f"{med['sys_us']:>7.0f} {med['redis_us']:>13.1f}")


if __name__ == "__main__":
    main()
