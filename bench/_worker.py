"""One benchmark worker process: import, build the worker, wait for "go", work.

    python bench/_worker.py fw|rq|rq-simple QUEUE REDIS_URL [--burst]

Prints ``ready <pid>`` on stdout once imports are done and the worker object is
built, then blocks on a line from stdin: the bench releases every worker of a
run at the same moment, so interpreter start-up is never part of a measurement.

``BENCH_COUNT_FILE`` set: every request the process (or a child it forks)
writes to Redis appends one byte to that file. redis-py sends a pipeline as
one packed write, so the file's size is the number of client round trips.

``BENCH_CPU_FILE`` set: at exit, the CPU seconds (user + system) used from the
gate on are written there as JSON: ``self`` (this process) and ``children``
(the fork server and the horses it reaped, once waited for).
"""

from __future__ import annotations

import os
import sys


def _count_round_trips(path: str) -> None:
    import redis.connection

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    original = redis.connection.AbstractConnection.send_packed_command

    def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        os.write(fd, b".")
        return original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = send_packed_command


def main() -> int:
    kind, queue, url = sys.argv[1:4]
    burst = "--burst" in sys.argv[4:]
    if os.environ.get("BENCH_COUNT_FILE"):
        _count_round_trips(os.environ["BENCH_COUNT_FILE"])

    if kind == "fw":
        from fusionworker.core.config import load_settings
        from fusionworker.core.connection import connect
        from fusionworker.core.logs import setup_logging
        from fusionworker.worker import Worker

        settings = load_settings(redis_url=url)
        setup_logging(settings.log_level, settings.log_format)   # as the CLI does
        worker = Worker(queue, connect(url), settings=settings, burst=burst)
        run = worker.work
    else:
        from redis import Redis
        from rq import SimpleWorker
        from rq import Worker as RQWorker

        cls = SimpleWorker if kind == "rq-simple" else RQWorker
        rq_worker = cls([queue], connection=Redis.from_url(url))

        def run() -> int:
            rq_worker.work(burst=burst, logging_level="INFO")   # as `rq worker` does
            return 0

    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    os.dup2(2, 1)       # nobody reads the pipe after "ready": RQ logs to stdout, send it to the log
    if not sys.stdin.readline():          # bench gone: do nothing
        return 1
    cpu_file = os.environ.get("BENCH_CPU_FILE")
    if not cpu_file:
        return int(run() or 0)
    import json
    import resource

    def used(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    before = used(resource.RUSAGE_SELF), used(resource.RUSAGE_CHILDREN)
    code = int(run() or 0)
    with open(cpu_file, "w", encoding="ascii") as fh:
        json.dump({"self": used(resource.RUSAGE_SELF) - before[0],
                   "children": used(resource.RUSAGE_CHILDREN) - before[1]}, fh)
    return code


if __name__ == "__main__":
    sys.exit(main())
