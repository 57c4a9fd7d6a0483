"""Fixtures: every test gets its own key prefix on the real Redis, cleaned up after.

Redis: ``REDIS_URL`` or ``redis://127.0.0.1:6379/0`` (``.ci/run`` starts it).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fusionworker.config import Settings, load_settings
from fusionworker.events import flush_default_sinks
from fusionworker.queue import Queue
from fusionworker.worker import Worker

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("FUSIONWORKER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


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


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix; every key under it is deleted after the test."""
    value = f"t{uuid.uuid4().hex[:10]}"
    yield value
    flush_default_sinks(2.0)  # producers' "queued" events land before the clean-up
    client = redis.Redis.from_url(redis_url)
    for pattern in (f"{value}:*",):
        batch = list(client.scan_iter(match=pattern, count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i:i + 500])


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def settings(prefix: str, redis_url: str) -> Settings:
    """Fast settings for tests (short polls and heartbeats)."""
    return load_settings(environ={}, redis_url=redis_url, prefix=prefix, poll_interval=0.2,
                         heartbeat_interval=0.5, max_retries=0, kill_grace=2.0,
                         allowed_modules=("tests",))


@pytest.fixture
def queue(r: redis.Redis, settings: Settings) -> Callable[[str], Queue]:
    def make(name: str = "default") -> Queue:
        return Queue(name, r, settings=settings)
    return make


@pytest.fixture
def burst(r: redis.Redis, settings: Settings) -> Callable[..., Worker]:
    """Run an in-process burst worker (no default middleware) over the given queues."""
    def run(queues: str = "default", **kwargs: Any) -> Worker:
        w = Worker(queues, r, settings=kwargs.pop("settings", settings), burst=True,
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
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def worker(self, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
        return self.start("worker", *args, **kw)

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.kill()
                proc.wait(10)


@pytest.fixture
def processes(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(settings, tmp_path)
    yield procs
    procs.stop_all()


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll until predicate() is truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
