#!/usr/bin/env python3
"""Scale-out over a real 3-master Redis Cluster: jobs/s and Redis CPU per shard
with 1, 2 and 3 shards busy.

    python bench/cluster_scale.py [--jobs 600] [--rounds 2] [--events on|off]
                                  [--workers-per-queue 1] [--json out.json]

The bench starts its own cluster (3 masters, no replicas, on free loopback
ports, by ``tests/redis_servers.py``) and kills it at the end. A queue lives on
the shard of its hash tag (``fw:{queue}:...``): the bench picks one queue name
per master (``s0-…``, ``s1-…``, ``s2-…``) whose slot that master serves.

Per round and k = 1, 2, 3: N jobs (``bench.io_jobs:io_sleep`` with 0 s, one line
per job to a file) are put on each of the first k queues with ``enqueue_many``
(not measured), then one burst worker per queue (``--workers-per-queue``) is
started on that queue alone, and the bench waits for every line. Figures:

* jobs/s = all jobs / (last job's end - first job's start), from the lines;
* per shard: Redis CPU (``used_cpu_user + used_cpu_sys`` of ``INFO cpu``) over
  the run, in µs per job of its queue and in % of one core over the span; the
  shard that holds the global keys (``fw:events``, ``fw:queues``, ``fw:workers``,
  on one slot each) is marked: every job writes there too.

This machine has 2 cores shared with the workers (and usually other work): the
jobs/s of k shards is bounded by the workers' CPU, not by Redis; the Redis CPU
per shard is what shows how the cluster scales. Keep runs short.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import lines_in  # noqa: E402

PREFIX = "fwcl"
GLOBAL_KEYS = ("events", "queues", "workers")


def shard_queues(client: redis.Redis, ports: list[int]) -> list[tuple[str, int]]:
    """One queue name per master, in port order: (name, port of its master)."""
    ranges: list[tuple[int, int, int]] = []
    for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):
        ranges.append((int(start), int(end), int(master[1])))

    def owner(name: str) -> int:
        slot = key_slot(name.encode())
        return next(port for lo, hi, port in ranges if lo <= slot <= hi)

    out: dict[int, str] = {}
    i = 0
    while len(out) < len(ports):
        for shard in range(len(ports)):
            name = f"s{shard}-{i}"
            port = owner(name)
            if port == ports[shard] and port not in out:
                out[port] = name
        i += 1
    return [(out[p], p) for p in ports]


def global_shard(client: redis.Redis, ports: list[int]) -> dict[str, int]:
    """The master port that holds each global key of the prefix."""
    ranges = [(int(s), int(e), int(m[1])) for s, e, m, *_ in
              client.execute_command("CLUSTER SLOTS")]
    out = {}
    for name in GLOBAL_KEYS:
        slot = key_slot(f"{PREFIX}:{name}".encode())
        out[name] = next(port for lo, hi, port in ranges if lo <= slot <= hi)
    return out


class Cluster:
    def __init__(self) -> None:
        from bench.redis_server import start_cluster

        self.ports, self._stop = start_cluster(3)
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.nodes = {p: redis.Redis(port=p, decode_responses=True) for p in self.ports}

    def cpu(self) -> dict[int, float]:
        out = {}
        for port, node in self.nodes.items():
            info = node.info("cpu")
            out[port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return out

    def flush(self) -> None:
        for node in self.nodes.values():
            node.flushall()

    def stop(self) -> None:
        for node in self.nodes.values():
            node.close()
        self._stop()


def run_k(args: argparse.Namespace, cluster: Cluster, queues: list[tuple[str, int]], k: int,
          workdir: Path, tag: str) -> dict[str, Any]:
    from fusionworker.core.config import load_settings
    from fusionworker.core.connection import connect
    from fusionworker.core.queue import Queue

    cluster.flush()
    client = connect(cluster.url)
    settings = load_settings(environ={}, redis_url=cluster.url, prefix=PREFIX,
                             allowed_modules=("bench",))
    paths = []
    for name, _ in queues[:k]:
        path = str(workdir / f"{tag}-{name}.lines")
        paths.append(path)
        q = Queue(name, client, settings=settings, events=False if args.events == "off" else None)
        q.enqueue_many([q.prepare("bench.io_jobs:io_sleep", path, time.time(), 0.0)
                        for _ in range(args.jobs)])
    from fusionworker.events import flush_default_sinks

    flush_default_sinks()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "REDIS_URL": cluster.url, "FUSIONWORKER_PREFIX": PREFIX,
           "FUSIONWORKER_ALLOWED_MODULES": "bench", "FUSIONWORKER_LOG_LEVEL": "WARNING"}
    kind = "fw" if args.events == "on" else "fw-noevents"
    cpu0 = cluster.cpu()
    t0 = time.monotonic()
    procs = []
    for name, _ in queues[:k]:
        for _ in range(args.workers_per_queue):
            log = open(workdir / f"{tag}-{name}-{len(procs)}.log", "w")  # noqa: SIM115
            procs.append((subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "redis_cost.py"), "worker", kind,
                 cluster.url, name, "--burst"],
                env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True), log))
    try:
        deadline = time.monotonic() + args.timeout
        while sum(lines_in(p) for p in paths) < k * args.jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"k={k}: {sum(lines_in(p) for p in paths)} of "
                                   f"{k * args.jobs} jobs ran (logs in {workdir})")
            time.sleep(0.02)
        cpu1 = cluster.cpu()
        wall = time.monotonic() - t0
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            log.close()
    rows = [tuple(map(float, line.split())) for p in paths
            for line in Path(p).read_text().splitlines() if line.count(" ") == 2]
    span = max(e for _, _, e in rows) - min(s for _, s, _ in rows)
    per_queue = {port: args.jobs if i < k else 0 for i, (_, port) in enumerate(queues)}
    shards = {}
    for port in cluster.ports:
        used = cpu1[port] - cpu0[port]
        shards[port] = {"cpu_ms": used * 1000, "busy_pct": used / wall * 100,
                        "us_per_job": used * 1e6 / per_queue[port] if per_queue[port] else None}
    return {"k": k, "jobs": len(rows), "jobs_per_s": len(rows) / span, "span_s": span,
            "wall_s": wall, "shards": shards}


def report(results: list[dict[str, Any]], queues: list[tuple[str, int]],
           globals_at: dict[str, int]) -> str:
    out = []
    marks = {p: "+".join(n for n, gp in globals_at.items() if gp == p) for _, p in queues}
    head = ["busy shards", "jobs/s", "x of 1"] + [
        f"shard {i} ({name}{', ' + marks[p] if marks[p] else ''}) µs/job, % core"
        for i, (name, p) in enumerate(queues)]
    rows = []
    base = statistics.median(r["jobs_per_s"] for r in results if r["k"] == 1)
    for k in (1, 2, 3):
        mine = [r for r in results if r["k"] == k]
        if not mine:
            continue
        jps = [r["jobs_per_s"] for r in mine]
        row = [str(k), f"{statistics.median(jps):.0f} ({min(jps):.0f}-{max(jps):.0f})",
               f"{statistics.median(jps) / base:.2f}"]
        for _, port in queues:
            per = [r["shards"][port]["us_per_job"] for r in mine]
            busy = statistics.median(r["shards"][port]["busy_pct"] for r in mine)
            per_txt = f"{statistics.median(per):.0f}" if per[0] is not None else "-"
            row.append(f"{per_txt}, {busy:.0f} %")
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    out.append("| " + " | ".join(c.ljust(w) for c, w in zip(head, widths)) + " |")
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=600, help="jobs per busy queue")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--events", choices=("on", "off"), default="on")
    p.add_argument("--workers-per-queue", type=int, default=1)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="fwcluster-"))
    cluster = Cluster()
    load = os.getloadavg()
    results = []
    try:
        any_node = cluster.nodes[cluster.ports[0]]
        queues = shard_queues(any_node, cluster.ports)
        globals_at = global_shard(any_node, cluster.ports)
        for rnd in range(args.rounds):
            for k in ((1, 2, 3) if rnd % 2 == 0 else (3, 2, 1)):
                res = run_k(args, cluster, queues, k, workdir, f"r{rnd}k{k}")
                results.append(res)
                print(f"round {rnd + 1}/{args.rounds}, {k} busy: {res['jobs_per_s']:.0f} jobs/s",
                      file=sys.stderr, flush=True)
    finally:
        cluster.stop()
    print(f"{args.jobs} jobs per busy queue, {args.workers_per_queue} burst worker(s) per queue, "
          f"event log {args.events}, {args.rounds} rounds, medians (min-max); "
          f"{os.cpu_count()} CPUs, load average before {load[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}")
    print("global keys: " + ", ".join(f"{PREFIX}:{n} on shard "
                                      f"{[pt for _, pt in queues].index(pt)}"
                                      for n, pt in globals_at.items()))
    print(report(results, queues, globals_at))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "queues": queues,
                                               "globals": globals_at}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
