#!/usr/bin/env python3
"""What one reaper pass costs Redis with many idle queues.

    python bench/reaper_pass.py [--queues 1000] [--passes 5] [--interval 30]

A PRIVATE redis-server (started on a free port, killed at the end: nothing else's
commands are counted) holds ``--queues`` known queues with nothing in them and a
live worker. The bench runs ``reap_once`` ``--passes`` times and prints, per pass,
the commands Redis processed (``total_commands_processed`` delta, minus the INFO
itself), the round trips (one per reply read by the client: commands sent alone, or
pipelines) and the wall time; and what that makes per second at a pass every
``--interval`` seconds (``FUSIONWORKER_REAPER_INTERVAL``, default 30 s: one pass per
interval for the whole deployment).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.redis_server import start_single
from fusionworker.core.config import load_settings
from fusionworker.core.keys import Keys
from fusionworker.middleware.reaper import reap_once


class Counting(redis.Redis):
    """A client that counts its round trips (a command sent alone, or a pipeline)."""

    trips = 0

    def parse_response(self, connection, command_name, **options):  # type: ignore[override]
        Counting.trips += 1
        return super().parse_response(connection, command_name, **options)

    def pipeline(self, transaction=True, shard_hint=None):  # type: ignore[override]
        return CountingPipeline(self.connection_pool, self.response_callbacks, transaction,
                                shard_hint)


class CountingPipeline(redis.client.Pipeline):
    def execute(self, raise_on_error=True):  # type: ignore[override]
        if self.command_stack:
            Counting.trips += 1
        return super().execute(raise_on_error)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--interval", type=float, default=30.0)
    args = parser.parse_args()
    port, stop = start_single()
    try:
        url = f"redis://127.0.0.1:{port}/0"
        settings = load_settings(environ={}, redis_url=url, prefix="rb")
        r = Counting.from_url(url, decode_responses=True)
        keys = Keys("rb")
        r.sadd(keys.queues, *[f"q{i}" for i in range(args.queues)])
        r.sadd(keys.workers, "w.1")
        r.hset(keys.worker("w.1"), mapping={"state": "idle", "lease": 60})
        cmds, trips, walls = [], [], []
        for _ in range(args.passes):
            r.delete(keys.reaper_lock)
            before = int(r.info("stats")["total_commands_processed"])
            t0, Counting.trips = time.perf_counter(), 0
            reap_once(r, settings)
            walls.append(time.perf_counter() - t0)
            trips.append(Counting.trips)
            cmds.append(int(r.info("stats")["total_commands_processed"]) - before - 1)
        print(f"{args.queues} idle queues, {args.passes} passes (medians):")
        print(f"  commands per pass {statistics.median(cmds):.0f}, round trips per pass "
              f"{statistics.median(trips):.0f}, wall {statistics.median(walls) * 1000:.0f} ms")
        print(f"  at a pass every {args.interval:g} s: "
              f"{statistics.median(cmds) / args.interval:.1f} commands/s")
    finally:
        stop()


if __name__ == "__main__":
    main()
