"""Fixtures: every test gets its own key prefix on the real Redis, cleaned up after.

Redis: ``REDIS_URL`` or ``redis://127.0.0.1:6379/0`` (``.ci/run`` starts it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from fusionworker.core.config import Settings, load_settings
from fusionworker.core.queue import Queue
from fusionworker.events import flush_default_sinks
from fusionworker.worker import Worker
from tests.children import die_with_parent
from tests.waiting import settle, wait_for  # noqa: F401 - the one wait helper; also importable from here

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("FUSIONWORKER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


#: tests that use one of these fixtures share what it starts once per xdist worker (a private
#: Redis Cluster): ``--dist loadgroup`` runs them all on one worker, so a run starts one
GROUP_BY_FIXTURE = {"redis_cluster": "redis-cluster"}

#: a test that starts worker processes or private Redis servers is ``slow`` (seconds of
#: process start-up and shutdown): ``-m "not slow"`` runs what stays in this process
SLOW_FIXTURES = frozenset({"processes", "redis_single", "redis_cluster", "redis_sentinel"})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups, before -m selects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SLOW_FIXTURES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("serial") is not None:   # one at a time under -n too
            item.add_marker(pytest.mark.xdist_group("serial"))
        for fixture, group in GROUP_BY_FIXTURE.items():
            if fixture in fixtures:
                item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two xdist workers per core. Most tests wait (on worker processes,
    leases running out, sleeps inside jobs, Redis): with one per core and one more, the
    parallel part kept a quiet 2-core machine's cores about half busy (~360 s of CPU in
    ~416 s); the CPU-bound scenarios run alone after it (``serial``)."""
    return max(2, 2 * (os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _restore_fusionworker_logger() -> Iterator[None]:
    """In-process CLI runs configure the ``fusionworker`` logger; undo it after each test."""
    logger = logging.getLogger("fusionworker")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # pragma: no cover
        pytest.exit(f"tests need a Redis server at {REDIS_URL}: {exc}", returncode=3)
    return REDIS_URL


def _drop_sinks_of(prefix: str) -> None:
    """Close and forget this process's shared producer sinks of ``prefix`` (a test's own,
    never used again). One left holding events for a server its test stopped would make
    every later flush in this process wait out its whole timeout: 2 s at each test's
    teardown, 5 s where a test flushes (and that flush would report a failure)."""
    from fusionworker.events import registry

    with registry._DEFAULT_LOCK:
        sinks = [registry._DEFAULT_SINKS.pop(key) for key in list(registry._DEFAULT_SINKS)
                 if key[1] == prefix]
    for sink in sinks:
        sink.close(0)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix; every key that starts with it is deleted after the test (a
    test's own keys beside the deployment's too: ``<prefix>order``, ``<prefix>-other:*``)."""
    value = f"t{uuid.uuid4().hex[:10]}"
    yield value
    flush_default_sinks(2.0)  # producers' "queued" events land before the clean-up
    _drop_sinks_of(value)
    client = redis.Redis.from_url(redis_url)
    for pattern in (f"{value}*",):
        batch = list(client.scan_iter(match=pattern, count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i:i + 500])


def _forget_module(name: str) -> None:
    """``name`` as if this process had never imported it, nor checked a reference into
    it: the producer's check remembers a walk that passed (``functions._WALKED``), so a
    test of this process that enqueued one of its functions before would spare the next
    one the import it means to see."""
    from fusionworker.core import functions

    sys.modules.pop(name, None)
    functions._WALKED.difference_update(
        [key for key in functions._WALKED if key[0].startswith(name + ":")])
    functions._IMPORTED.discard(name)
    functions._KEPT_OUT.discard(name)


@pytest.fixture
def fresh_defaults_module() -> Iterator[None]:
    """``tests.defaults_jobs`` not imported yet: the producer's check (a ``Queue``'s, the
    CLI's) imports it (allow-listed)."""
    _forget_module("tests.defaults_jobs")
    yield
    _forget_module("tests.defaults_jobs")


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def settings(prefix: str, redis_url: str) -> Settings:
    """Fast settings for tests: short polls, heartbeats, leases and reaper passes, so no
    test ever waits out a production default (a 30 s lease, a 30 s reaper interval).

    ``worker_env``/``processes`` hand the same values to worker processes. The lease
    (10 s, 20 heartbeats) is a third of the default, and still long enough that a live
    horse on a machine loaded far past its cores is never killed by its own lease
    watchdog (horse.py: it dies when no renewal reached Redis for lease - heartbeat).
    A test of crash recovery sets a shorter one (``FUSIONWORKER_LEASE=1.5``).
    """
    return load_settings(environ={}, redis_url=redis_url, prefix=prefix, poll_interval=0.2,
                         heartbeat_interval=0.5, lease=10.0, reaper_interval=0.5,
                         max_retries=0, kill_grace=2.0, allowed_modules=("tests",))


@pytest.fixture
def queue(r: redis.Redis, settings: Settings) -> Callable[[str], Queue]:
    def make(name: str = "default") -> Queue:
        return Queue(name, r, settings=settings)
    return make


@pytest.fixture
def burst(r: redis.Redis, settings: Settings) -> Callable[..., Worker]:
    """Run an in-process burst worker (no built-in middleware: ``defaults=False``)."""
    def run(queues: str = "default", **kwargs: Any) -> Worker:
        w = Worker(queues, r, settings=kwargs.pop("settings", settings), burst=True, defaults=False,
                   middleware=kwargs.pop("middleware", []), **kwargs)
        assert w.work() == 0
        return w
    return run


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "REDIS_URL": settings.redis_url,
        "FUSIONWORKER_PREFIX": settings.prefix,
        "FUSIONWORKER_POLL_INTERVAL": str(settings.poll_interval),
        "FUSIONWORKER_HEARTBEAT_INTERVAL": str(settings.heartbeat_interval),
        "FUSIONWORKER_LEASE": str(settings.lease),
        "FUSIONWORKER_REAPER_INTERVAL": str(settings.reaper_interval),
        "FUSIONWORKER_KILL_GRACE": str(settings.kill_grace),
        "FUSIONWORKER_ALLOWED_MODULES": ",".join(settings.allowed_modules),
        "FUSIONWORKER_MAX_RETRIES": str(settings.max_retries),
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


class WorkerProcesses:
    """Start real ``run_worker.py`` processes; all are killed at teardown."""

    def __init__(self, settings: Settings, tmp_path: Path) -> None:
        self.settings = settings
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"worker{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "run_worker.py"), *args],
            env={**worker_env(self.settings), **(env or {})}, stdout=log,
            stderr=subprocess.STDOUT, cwd=str(ROOT),
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl() only, before exec
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def worker(self, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
        return self.start("worker", *args, **kw)

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]

    def stop_all(self) -> None:
        """SIGKILL every process started and all their descendants. A ``--processes``
        supervisor's children live in their own process groups and shut down warm
        when it dies (PDEATHSIG=SIGTERM): left alone, they would write their last
        events and heartbeats after the test's keys were deleted."""
        killed, trees = [], []
        for proc in self.procs:          # every tree killed first, then one wait for all
            if proc.poll() is None:
                try:
                    tree = psutil.Process(proc.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    tree = []
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.kill()
                for child in tree:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        child.kill()
                killed.append(proc)
                trees += tree
        for proc in killed:
            proc.wait(10)
        settle(trees)


def run_one(queue: Any, burst: Any, func: str, *args: Any, **options: Any) -> Any:
    """Enqueue one job on a fresh queue (the ``queue`` fixture), run a burst worker (the
    ``burst`` fixture), and return the job as Redis holds it afterwards."""
    q = queue()
    job = q.enqueue(func, *args, **options)
    burst()
    return q.fetch_job(job.id)


@pytest.fixture
def processes(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(settings, tmp_path)
    yield procs
    procs.stop_all()
