#!/usr/bin/env python3
"""What one job costs the Redis server: fusionworker against its peers, in one run.

    python bench/redis_cost.py [--jobs 1000] [--rounds 3]
                               [--systems fw,fw-noevents,fw-warm,rq-simple,celery,dramatiq]
                               [--horse-jobs 100] [--no-split] [--json out.json]

Every system runs on a PRIVATE redis-server that the bench starts on a free
port and kills at the end (the shared Redis is never touched, nothing is
flushed there), so ``INFO cpu`` and ``INFO commandstats`` see nothing but the
system measured. Systems, each a worker of one process running one job at a
time, the same job (``bench.io_jobs:io_sleep`` with 0 s: it appends one line
to a file, which is how the bench sees it end), enqueued one call per job as a
user's code would:

* ``fw``: fusionworker, fresh horse per job, event log on (the default: a
  capped Redis stream, "queued" from the producer, "processing" and the
  outcome from the worker);
* ``fw-noevents``: the same without the event log (producer ``events=False``,
  worker middleware without ``EventsMiddleware``);
* ``fw-warm``: event log on, a horse runs up to ``--horse-jobs`` jobs (only
  where the worker has that setting; else the row says n/a);
* ``rq-simple``: RQ's ``SimpleWorker`` (``rq worker -w rq.worker.SimpleWorker``);
* ``celery``: Celery, Redis broker, ``-P solo``, results ignored (Celery's
  default without a result backend);
* ``dramatiq``: Dramatiq, Redis broker, 1 process x 1 thread.

Per system and round (the order alternates between rounds; the table shows
medians and the min-max):

1. the queue is filled with N jobs while no worker runs: **enqueue** cost;
2. a worker is started and the bench waits for the N lines: the cost of the
   worker's start-up plus N jobs; the same with 1 job (its own enqueue not
   counted) gives the start-up, so **work / job** = (N-run - 1-run) / (N - 1);
3. **whole life / job** = enqueue / job + work / job.

Figures: Redis CPU = delta of ``used_cpu_user + used_cpu_sys`` of ``INFO cpu``
(the server process: command execution, protocol parsing, network I/O), minus
the server's own idle CPU (cron) measured at start for the same duration;
commands = delta of the ``calls`` of ``INFO commandstats`` (client commands
plus those run inside scripts).

``--split`` (default on): one more run per system with ``MONITOR`` open and
``SLOWLOG`` recording every command, to split the commands and the command µs
of a job by phase (fusionworker: enqueue, claim, finish, events, other = worker
heartbeat and registration; peers: enqueue, work). Command µs are the top-level
commands' execution time as SLOWLOG reports it (a script's holds its inner
commands'; ``INFO commandstats`` counts both, so it cannot give this). A split
run includes the worker's start-up and is slower (MONITOR costs the server):
its figures are for the split, the table's are the ones to compare.

Before each round, the **floor**: the Redis CPU of a bare round trip on the same
server (PINGs one after the other, and pipelines of ten SETs). A round trip costs
the server about the same whatever it carries (reading, replying, its event
loop), and a job needs one from its producer and one from its worker at least.

The machine running this bench is usually shared: keep ``--jobs`` small and
read the figures as relative ones (say so next to them).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import lines_in, stop_group  # noqa: E402
from bench.run import Monitor as RunMonitor  # noqa: E402

SYSTEMS = ("fw", "fw-noevents", "fw-warm", "rq-simple", "celery", "dramatiq")
LABEL = {"fw": "fusionworker fresh, events on", "fw-noevents": "fusionworker fresh, events off",
         "fw-warm": "fusionworker warm ({h}), events on", "rq-simple": "RQ SimpleWorker",
         "celery": "Celery solo (Redis broker)", "dramatiq": "Dramatiq 1x1 (Redis broker)"}
QUEUE = "ioq"   # the queue of bench/io_peers.py's actors
PREFIX = "fwcost"
#: seconds waited after the last job's line before the figures are read (both the N-job
#: and the 1-job run: what the worker sends while idle then cancels out)
SETTLE = 0.5


# -- the worker process of the fusionworker systems ---------------------------------------


def fw_worker(argv: list[str]) -> int:
    """``redis_cost.py worker fw|fw-noevents|fw-warm URL [QUEUE] [--burst]``: one worker
    (bench/cluster_scale.py runs it too)."""
    burst = "--burst" in argv
    kind, url, *rest = [a for a in argv if a != "--burst"]
    queue = rest[0] if rest else QUEUE
    from fusionworker.core.config import load_settings
    from fusionworker.core.connection import connect
    from fusionworker.events.middleware import EventsMiddleware
    from fusionworker.middleware import default_middleware
    from fusionworker.worker import Worker

    settings = load_settings(redis_url=url)
    chain = default_middleware(settings)
    if kind == "fw-noevents":
        chain = [mw for mw in chain if not isinstance(mw, EventsMiddleware)]
    worker = Worker(queue, connect(url), settings=settings, defaults=False, middleware=chain,
                    burst=burst)
    return int(worker.work() or 0)


def horse_jobs_supported() -> bool:
    from fusionworker.core.config import Settings

    return "horse_jobs" in getattr(Settings, "__dataclass_fields__", {})


# -- the private server ---------------------------------------------------------------


class Server:
    """A private redis-server on a free port (bench/redis_server.py starts it)."""

    def __init__(self) -> None:
        from bench.redis_server import start_single

        self.port, self._stop = start_single("--appendonly", "no")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.r = redis.Redis(port=self.port, decode_responses=True)
        self.idle_cpu_per_s = self._idle_rate()

    def _idle_rate(self, seconds: float = 1.0) -> float:
        a = self.cpu()
        time.sleep(seconds)
        return (self.cpu() - a) / seconds

    def cpu(self) -> float:
        info = self.r.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def commandstats(self) -> dict[str, tuple[int, int]]:
        out = {}
        for key, value in self.r.info("commandstats").items():
            out[key.removeprefix("cmdstat_")] = (int(value["calls"]), int(value["usec"]))
        return out

    def reset(self) -> None:
        self.r.flushall()
        self.r.config_resetstat()

    def stop(self) -> None:
        self.r.close()
        self._stop()


def round_trip_floor(server: Server, n: int = 3000) -> dict[str, float]:
    """Redis CPU of a bare round trip on this server, in µs: ``n`` PINGs one after the
    other, and ``n`` pipelines of ten SETs (what a round trip costs the server whatever it
    carries: reading the request, writing the reply, the event loop). A job whose
    producer and worker make one round trip each cannot cost less than twice ``ping``."""
    out = {}
    for name, call in (("ping", lambda: server.r.ping()),
                       ("pipeline_of_10", lambda: server.r.pipeline(transaction=False)
                        .set("fwfloor:a", 1).set("fwfloor:b", 2).set("fwfloor:c", 3)
                        .set("fwfloor:d", 4).set("fwfloor:e", 5).set("fwfloor:f", 6)
                        .set("fwfloor:g", 7).set("fwfloor:h", 8).set("fwfloor:i", 9)
                        .set("fwfloor:j", 10).execute())):
        meter = Meter(server)
        for _ in range(n):
            call()
        out[name] = meter.read()["cpu_us"] / n
    server.reset()
    return out


class Meter:
    """One measured stretch: CPU and commandstats deltas, the server's idle CPU taken off."""

    def __init__(self, server: Server) -> None:
        self.server = server
        server.r.config_resetstat()
        self.t0 = time.monotonic()
        self.cpu0 = server.cpu()

    def read(self) -> dict[str, Any]:
        cpu = self.server.cpu() - self.cpu0
        took = time.monotonic() - self.t0
        stats = self.server.commandstats()
        # the INFO and CONFIG calls of the meter itself are not the system's
        for own in ("info", "config|resetstat"):
            stats.pop(own, None)
        calls = sum(c for c, _ in stats.values())
        return {"cpu_us": max(0.0, cpu - self.server.idle_cpu_per_s * took) * 1e6,
                "calls": calls, "seconds": took,
                "by_command": {k: v[0] for k, v in stats.items()}}


# -- the systems -------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace, server: Server, workdir: Path) -> None:
        self.args = args
        self.server = server
        self.workdir = workdir
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep
                    + os.environ.get("PYTHONPATH", ""), "REDIS_URL": server.url,
                    "BENCH_REDIS_URL": server.url, "FUSIONWORKER_PREFIX": PREFIX,
                    "FUSIONWORKER_ALLOWED_MODULES": "bench", "FUSIONWORKER_LOG_LEVEL": "WARNING"}
        self._n = 0

    def command(self, system: str) -> tuple[list[str], dict[str, str]]:
        py, url = sys.executable, self.server.url
        if system.startswith("fw"):
            extra = ({"FUSIONWORKER_HORSE_JOBS": str(self.args.horse_jobs)}
                     if system == "fw-warm" else {})
            return [py, str(Path(__file__).resolve()), "worker", system, url], extra
        if system == "rq-simple":
            return [py, "-m", "rq.cli", "worker", "-w", "rq.worker.SimpleWorker", "--url", url,
                    "-q", QUEUE], {}
        if system == "celery":
            return [py, "-m", "celery", "-A", "bench.io_peers:celery_app", "worker", "-P",
                    "solo", "-Q", QUEUE, "--loglevel", "WARNING", "--without-gossip",
                    "--without-mingle", "--without-heartbeat"], {"BENCH_PEER": "celery"}
        if system == "dramatiq":
            return [py, "-m", "dramatiq", "bench.io_peers:dramatiq_broker", "-p", "1", "-t", "1",
                    "-Q", QUEUE], {"BENCH_PEER": "dramatiq"}
        raise ValueError(system)

    def enqueue(self, system: str, path: str, n: int) -> None:
        url = self.server.url
        if system.startswith("fw"):
            from fusionworker.core.config import load_settings
            from fusionworker.core.queue import Queue
            from fusionworker.events import flush_default_sinks

            q = Queue(QUEUE, redis.Redis.from_url(url, decode_responses=True),
                      settings=load_settings(environ={}, redis_url=url, prefix=PREFIX,
                                             allowed_modules=("bench",)),
                      events=False if system == "fw-noevents" else None)
            for _ in range(n):
                q.enqueue_call("bench.io_jobs:io_sleep", args=[path, time.time(), 0.0])
            flush_default_sinks()                  # the "queued" events are written now
        elif system == "rq-simple":
            from rq import Queue as RQQueue

            rq_queue = RQQueue(QUEUE, connection=redis.Redis.from_url(url))
            for _ in range(n):
                rq_queue.enqueue("bench.io_jobs.io_sleep", path, time.time(), 0.0)
        elif system == "celery":
            from celery import Celery

            app = Celery("bench_io", broker=url)
            with app.producer_or_acquire() as producer:
                for _ in range(n):
                    app.send_task("bench.io_sleep", args=[path, time.time(), 0.0], queue=QUEUE,
                                  producer=producer)
        elif system == "dramatiq":
            import dramatiq
            from dramatiq.brokers.redis import RedisBroker

            broker = RedisBroker(url=url)
            for _ in range(n):
                broker.enqueue(dramatiq.Message(queue_name=QUEUE, actor_name="io_sleep",
                                                args=(path, time.time(), 0.0), kwargs={},
                                                options={}))
            broker.close()

    def work(self, system: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(enqueue meter, worker meter) of N jobs: enqueued first, then one worker drains them."""
        self.server.reset()
        self._n += 1
        path = str(self.workdir / f"{system}-{self._n}.lines")
        meter = Meter(self.server)
        self.enqueue(system, path, n)
        enq = meter.read()
        argv, extra = self.command(system)
        log = open(self.workdir / f"{system}-{self._n}.log", "w")  # noqa: SIM115
        meter = Meter(self.server)
        proc = subprocess.Popen(argv, env={**self.env, **extra}, cwd=str(ROOT), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + self.args.timeout
            while lines_in(path) < n:
                if time.monotonic() > deadline or proc.poll() is not None:
                    log.flush()
                    tail = Path(log.name).read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{system}: {lines_in(path)} of {n} jobs ran; its log:\n"
                                       f"{tail}")
                time.sleep(0.01)
            time.sleep(SETTLE)      # the events a worker's sink sends from its thread
            worked = meter.read()
        finally:
            stop_group(proc)
            log.close()
        return enq, worked

    def measure(self, system: str) -> dict[str, Any]:
        n = self.args.jobs
        enq, full = self.work(system, n)
        _, one = self.work(system, 1)
        out: dict[str, Any] = {}
        for key, name in (("cpu_us", "cpu"), ("calls", "commands")):
            out[f"enqueue_{name}"] = enq[key] / n
            out[f"work_{name}"] = (full[key] - one[key]) / (n - 1)
            out[f"total_{name}"] = out[f"enqueue_{name}"] + out[f"work_{name}"]
        by_command = Counter(enq["by_command"])
        by_command.update({k: v - one["by_command"].get(k, 0)
                           for k, v in full["by_command"].items()})
        out["by_command"] = {k: v / n for k, v in by_command.most_common() if v > 0}
        out["work_seconds"] = full["seconds"]
        return out

    # -- the split run ---------------------------------------------------------------

    def split(self, system: str) -> dict[str, Any]:
        """Commands (a MONITOR run) and top-level command µs (a SLOWLOG run) per job and
        phase. Two runs: MONITOR slows every command down, SLOWLOG would see that."""
        n = self.args.jobs
        names = script_names()
        usec = self._split_run(system, names, None)
        monitor = Monitor(self.server.port)
        try:
            self._split_run(system, names, monitor)
        finally:
            counts = monitor.by_phase(names)
        phases: dict[str, dict[str, float]] = {}
        for source, div in ((counts, n), (usec, n)):
            key = "commands" if source is counts else "cmd_us"
            for (phase, kind), value in source.items():
                fig = phases.setdefault(_phase(system, phase, kind),
                                        {"commands": 0.0, "cmd_us": 0.0})
                fig[key] += value / div
        return {"phases": phases,
                "detail": {f"{p}:{k}": c / n for (p, k), c in counts.most_common()}}

    def _split_run(self, system: str, names: dict[str, str],
                   monitor: Monitor | None) -> Counter[tuple[str, str]]:
        """N jobs enqueued, then drained by a worker; with SLOWLOG recording every
        command (no monitor) or the monitor told the phase."""
        n, r = self.args.jobs, self.server.r
        usec: Counter[tuple[str, str]] = Counter()
        r.flushall()
        if monitor is None:
            r.config_set("slowlog-max-len", max(128, n * 40))
            r.config_set("slowlog-log-slower-than", 0)
            r.slowlog_reset()
        else:
            monitor.phase = "enqueue"
        path = str(self.workdir / f"{system}-split.lines")
        try:
            self.enqueue(system, path, n)
            time.sleep(SETTLE)
            if monitor is None:
                usec.update(_slowlog_us(r, names, "enqueue"))
                r.slowlog_reset()
            else:
                monitor.phase = "work"
            argv, extra = self.command(system)
            log = open(self.workdir / f"{system}-split.log", "w")  # noqa: SIM115
            proc = subprocess.Popen(argv, env={**self.env, **extra}, cwd=str(ROOT), stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                deadline = time.monotonic() + self.args.timeout * 3
                while lines_in(path) < n:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"{system} (split): {lines_in(path)} of {n} jobs ran")
                    time.sleep(0.02)
                time.sleep(SETTLE)
                if monitor is None:
                    usec.update(_slowlog_us(r, names, "work"))
            finally:
                stop_group(proc)
                log.close()
        finally:
            if monitor is None:
                r.config_set("slowlog-log-slower-than", 10000)
                r.slowlog_reset()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return usec


def _phase(system: str, phase: str, kind: str) -> str:
    """The phase of a command: what the producer sent is enqueue; of fusionworker's
    worker, a script by its name, XADD = events, the rest (heartbeat, registration) =
    other. A peer's commands are enqueue or work."""
    if not system.startswith("fw"):
        return phase
    if phase == "enqueue":
        return "events" if kind.startswith("xadd") else "enqueue"
    if kind.startswith("claim"):
        return "claim"
    if kind.startswith("finish"):
        return "finish"
    if kind.startswith("xadd"):
        return "events"
    return "other"


def script_names() -> dict[str, str]:
    """SHA1 of every fusionworker script's full text -> its name."""
    from fusionworker.core import scripts

    return {hashlib.sha1(scripts.source(name).encode()).hexdigest(): name
            for name in scripts.NAMES}


def _slowlog_us(r: redis.Redis, names: dict[str, str], phase: str) -> Counter[tuple[str, str]]:
    """µs of every top-level command in the slow log (all of them), by script or command."""
    out: Counter[tuple[str, str]] = Counter()
    for entry in r.slowlog_get(-1):
        command = entry["command"]
        words = (command if isinstance(command, str)
                 else command.decode(errors="replace")).split()
        kind = _kind(words, names)
        if kind in ("slowlog", "config", "info", "flushall", "monitor"):
            continue
        out[(phase, kind)] += int(entry["duration"])
    return out


def _kind(words: list[str], names: dict[str, str]) -> str:
    head = words[0].lower().strip('"') if words else "?"
    if head == "evalsha" and len(words) > 1:
        return names.get(words[1].strip('"'), "evalsha:other")
    if head == "eval":
        return "eval"
    return head


class Monitor(RunMonitor):
    """Keeps MONITOR lines by phase: a script's inner commands (``[0 lua]``) go to the
    script before them (Redis runs a script whole, and shows it first)."""

    def __init__(self, port: int) -> None:
        self.phase = "enqueue"
        self.lines: list[tuple[str, bytes]] = []
        super().__init__(f"redis://127.0.0.1:{port}/0", 0)

    def take(self, lines: list[bytes]) -> None:
        self.lines.extend((self.phase, line) for line in lines)

    def by_phase(self, names: dict[str, str]) -> Counter[tuple[str, str]]:
        """Stop, and count the lines kept: (phase, command or script>inner command)."""
        self.close()
        counts: Counter[tuple[str, str]] = Counter()
        script = "?"
        for phase, line in self.lines:
            try:
                _, rest = line.split(b"] ", 1)
            except ValueError:
                continue
            words = [w.strip('"') for w in rest.decode(errors="replace").split(" ", 2)[:2]]
            if b" lua]" in line[:40]:
                counts[(phase, f"{script}>{words[0].lower()}")] += 1
                continue
            kind = _kind(words, names)
            if kind in ("slowlog", "config", "info", "flushall", "monitor", "ping"):
                continue
            script = kind
            counts[(phase, kind)] += 1
        return counts


# -- the report ----------------------------------------------------------------------------


def _fmt(values: list[float], digits: int = 0) -> str:
    if not values:
        return "n/a"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


ROWS = (("Redis CPU µs / job, whole life", "total_cpu", 0),
        ("  enqueue", "enqueue_cpu", 0), ("  work (claim, finish, events, heartbeat)",
                                          "work_cpu", 0),
        ("commands / job, whole life", "total_commands", 1), ("  enqueue", "enqueue_commands", 1),
        ("  work", "work_commands", 1))


def table(results: dict[str, list[dict[str, Any]]], systems: list[str],
          args: argparse.Namespace) -> str:
    head = ["figure", *(LABEL[s].format(h=args.horse_jobs) for s in systems)]
    rows = []
    for title, key, digits in ROWS:
        rows.append([title, *(_fmt([r[key] for r in results[s]], digits) for s in systems)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(head, widths)) + " |"
    out = [line, "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return fw_worker(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--horse-jobs", type=int, default=100,
                   help="jobs per horse of the fw-warm system")
    p.add_argument("--no-split", dest="split", action="store_false",
                   help="skip the MONITOR/SLOWLOG runs that split fusionworker's cost by phase")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per worker run")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            p.error(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    if args.jobs < 2:
        p.error("--jobs must be at least 2")
    skipped = {}
    if "fw-warm" in systems and not horse_jobs_supported():
        skipped["fw-warm"] = "n/a: this worker has no horse_jobs setting (--horse-jobs)"
        systems.remove("fw-warm")
    workdir = Path(tempfile.mkdtemp(prefix="fwcost-"))
    server = Server()
    run = Run(args, server, workdir)
    version = server.r.info("server")["redis_version"]
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    splits: dict[str, Any] = {}
    load = os.getloadavg()
    floors: list[dict[str, float]] = []
    try:
        for rnd in range(args.rounds):
            floors.append(round_trip_floor(server))
            for system in (systems if rnd % 2 == 0 else systems[::-1]):
                res = run.measure(system)
                results[system].append(res)
                print(f"round {rnd + 1}/{args.rounds} {system}: {res['total_cpu']:.0f} µs, "
                      f"{res['total_commands']:.1f} commands per job", file=sys.stderr,
                      flush=True)
        if args.split:
            for system in systems:
                try:
                    splits[system] = run.split(system)
                except Exception as exc:  # noqa: BLE001 - the table is still worth printing
                    print(f"{system}: split run FAILED: {exc}", file=sys.stderr)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.jobs} jobs per run, {args.rounds} rounds, medians (min-max); private "
          f"redis-server {version} on {os.cpu_count()} CPUs, load average "
          f"before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print(table(results, systems, args))
    ping = statistics.median(f["ping"] for f in floors)
    pipe = statistics.median(f["pipeline_of_10"] for f in floors)
    print(f"floor on this server (median of {len(floors)}): one round trip (PING) {ping:.1f} µs "
          f"of Redis CPU, a pipeline of 10 SETs {pipe:.1f} µs; a job with one round trip "
          f"from its producer and one from its worker: >= {2 * ping:.0f} µs")
    for system, why in skipped.items():
        print(f"{LABEL[system].format(h=args.horse_jobs)}: {why}")
    for system, split in splits.items():
        print(f"\n{LABEL[system].format(h=args.horse_jobs)}, by phase (a MONITOR run and "
              f"a SLOWLOG run, start-up included): commands / job, top-level command µs / job")
        for phase, fig in sorted(split["phases"].items()):
            print(f"  {phase:8} {fig['commands']:6.1f}  {fig['cmd_us']:6.1f} µs")
        print("  detail: " + ", ".join(f"{k} {v:.2f}" for k, v in split["detail"].items()
                                       if v >= 0.05))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "splits": splits,
                                               "skipped": skipped, "floors": floors},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
