"""Run your jobs inside your own test suite.

:func:`run_burst` drains queues the way a worker does — the same claim script
(priority, FIFO, groups, pause, caps), the same JSON encoding of arguments and
results, the same outcome script (retries, dead-letter, results) — but calls
each job function **in this process**, so what your test patched (``requests``,
a provider client, the clock) is what the job sees. It returns once the
queues hold no job that is due now.

Use it with a real Redis server (give each test its own ``prefix``) or with
``fakeredis`` (``pip install 'fakeredis[lua]'``: the queue operations are Lua
scripts)::

    import fakeredis, pytest
    from fusionworker import Queue
    from fusionworker.config import load_settings
    from fusionworker.testing import run_burst

    @pytest.fixture
    def queue():
        redis = fakeredis.FakeRedis()
        settings = load_settings(environ={}, allowed_modules=("app",))
        return Queue("sms", redis, settings=settings)

    def test_send(queue, monkeypatch):
        monkeypatch.setattr("app.tasks.provider_send", lambda *a: "sent")
        job = queue.enqueue("app.tasks:send", "+1555", "hi")
        run_burst(queue)
        assert job.refresh().result == "sent"

What differs from a real worker, on purpose: no fork (so no isolation from
the test process, no per-job memory ceiling, no fork server), no background
middleware (reaper, cron, events, metrics), and delayed jobs
(``enqueue_in``/retries with a delay) run only once they are due. What a
worker does after a job ended is done too: its dependents (``depends_on``)
are released (or canceled) and a batch's callbacks enqueued, and run in the
same burst. The
timeout still applies (SIGALRM), so call it from the main thread.
``fusionworker.current_job()`` works in the job (progress, meta): its changes
are written from the job's own thread, rate-limited as in a worker, and the
last ones with the outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .core.config import Settings, load_settings
from .core.hooks import Middleware, WorkerContext
from .core.job import Job
from .core.queue import Queue
from .core.workflows import DependencyMiddleware
from .runtime.launch import InProcessLauncher
from .worker import Outcome, Worker


class InProcessWorker(Worker):
    """A :class:`~fusionworker.worker.Worker` that runs each job in this process
    (:class:`~fusionworker.runtime.launch.InProcessLauncher`).

    Everything but the horse is the real worker: claim, outcome, retries. One job
    at a time, whatever ``concurrency`` says. Its built-in middleware is the queues'
    semantics only (dependents and batch callbacks): no reaper, cron, events or
    metrics in a test process; ``middleware=`` adds yours.
    """

    def __init__(self, *args: Any, settings: Settings | None = None, **kwargs: Any) -> None:
        settings = (settings or load_settings()).replace(concurrency=1)
        kwargs.setdefault("launcher", InProcessLauncher)
        super().__init__(*args, settings=settings, **kwargs)

    def builtin_middleware(self) -> list[Middleware]:
        return [DependencyMiddleware()]


class _Collect(Middleware):
    def __init__(self) -> None:
        self.ran: list[tuple[Job[Any], Outcome]] = []

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        self.ran.append((job, outcome))


def run_burst(queue: Queue | Iterable[Queue], *, settings: Settings | None = None,
              max_jobs: int | None = None) -> list[Job[Any]]:
    """Run the due jobs of ``queue`` (or of several, round-robin) in this process.

    Returns the jobs in the order they ran, read back after their outcome
    (status, result, error, attempts); a job whose record is gone (e.g.
    ``result_ttl=0``) is returned as it was claimed. ``max_jobs`` stops early. While
    the workers are suspended (``fusionworker suspend``) it runs nothing and returns at
    once, as a ``--burst`` worker does.
    """
    queues = [queue] if isinstance(queue, Queue) else list(queue)
    if not queues:
        raise ValueError("run_burst needs at least one queue")
    first = queues[0]
    collect = _Collect()
    worker = InProcessWorker([q.name for q in queues], first.connection,
                             settings=settings or first.settings, burst=True,
                             middleware=[collect])
    worker.work(max_jobs=max_jobs or None)
    by_name = {q.name: q for q in queues}
    out: list[Job[Any]] = []
    for job, _ in collect.ran:
        fresh = by_name[job.queue].fetch_job(job.id) if job.queue in by_name else None
        out.append(fresh if fresh is not None else job)
    return out


__all__ = ["InProcessWorker", "run_burst"]
