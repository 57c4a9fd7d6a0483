"""Job functions of the tests that talk to Redis, reached as ``tests.jobs:<name>``.

``tests.jobs`` hands them out on first use (its ``__getattr__``), so a fork server
whose jobs are the light ones there never imports redis (0.15 s of CPU per fork
server and per first horse with the OpenTelemetry SDK installed, which redis-py
imports), while one that runs these preloads redis with them for its horses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import redis


def _redis(url):
    return redis.Redis.from_url(url, decode_responses=True)


def record(url, key, value, seconds=0.0):
    """Append value to a Redis list (proof of execution), optionally after a sleep."""
    if seconds:
        time.sleep(seconds)
    _redis(url).rpush(key, value)
    return value


def record_span(url, key, value, seconds=0.0):
    """Record start and end (for overlap checks)."""
    r = _redis(url)
    r.rpush(key, f"start:{value}:{time.time()}")
    if seconds:
        time.sleep(seconds)
    r.rpush(key, f"end:{value}:{time.time()}")
    return value


def flaky(url, key, fail_times):
    """Fail with a retryable error the first ``fail_times`` calls, then succeed."""
    n = _redis(url).incr(key)
    if n <= fail_times:
        raise ConnectionError(f"transient failure {n}")
    return n


def enqueue_child(url, prefix):
    """A job that enqueues another job (its 'queued' event must not be lost)."""
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    settings = load_settings(environ={}, redis_url=url, prefix=prefix,
                             allowed_modules=("tests",))
    return Queue("child", _redis(url), settings=settings).enqueue("tests.jobs:noop").id


def pid_then_sleep(url, key, seconds):
    """Record this horse's pid, then sleep (for tests that must find the running horse)."""
    _redis(url).rpush(key, os.getpid())
    time.sleep(seconds)


def pid_then_sleep_first(url, key, n, seconds, then=0.0):
    """``pid_then_sleep``, sleeping ``seconds`` in the first ``n`` runs recorded in ``key``
    and ``then`` in every later one: the runs a test kills stay running until it does,
    their reruns do not make it wait again."""
    position = _redis(url).rpush(key, os.getpid())
    time.sleep(seconds if position <= n else then)


def enqueue_child_with_env_settings(url, prefix):
    """Enqueue a job on queue 'child' with settings from the environment (+ url, prefix)."""
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    settings = load_settings(redis_url=url, prefix=prefix, allowed_modules=("tests",))
    return Queue("child", _redis(url), settings=settings, events=False).enqueue(
        "tests.jobs:noop").id


def spawn_sleeper(url, key, seconds=600):
    """Start a child process of the job that outlives it unless someone kills it."""
    import subprocess

    child = subprocess.Popen(["sleep", str(seconds)])
    _redis(url).rpush(key, child.pid)
    return child.pid


def exclusive(url, key, marker, seconds, then=None):
    """Count executions from inside the job; an execution that finds another live one
    holding the exclusive marker (an flock, released when its holder dies) records
    ``overlap``. It sleeps ``seconds``; with ``then``, only the first execution recorded
    in ``key`` does, and the later ones sleep ``then``."""
    import fcntl

    r = _redis(url)
    first = r.rpush(key, f"start:{os.getpid()}") == 1
    fd = os.open(marker, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        r.rpush(key, "overlap")
    time.sleep(seconds if then is None or first else then)
    r.rpush(key, f"end:{os.getpid()}")
    return os.getpid()


def record_exclusive(url, key, value, seconds, marker_dir):
    """``record``, holding an exclusive marker (an flock on ``marker_dir/value``) while it
    runs: a second execution of the same job running at the same time appends
    ``overlap:<value>`` to ``key + ':overlap'``. The marker is released when the run
    returns or raises (a warm horse lives on after its job: a lock kept until the
    process exits would flag a later, legitimate run) and when its holder is killed."""
    with _exclusive(url, key, value, marker_dir):
        return record(url, key, value, seconds)


async def record_exclusive_async(url, key, value, seconds, marker_dir):
    """:func:`record_exclusive` as an ``async def`` job (it awaits its sleep: async horses
    run it beside others; an flock is per open file, so two runs in one process clash
    too)."""
    with _exclusive(url, key, value, marker_dir):
        if seconds:
            await asyncio.sleep(seconds)
        _redis(url).rpush(key, value)
        return value


@contextlib.contextmanager
def _exclusive(url, key, value, marker_dir):
    """Holds an flock on ``marker_dir/value`` while the block runs; finding it held (a
    second run of the same job at the same time) appends ``overlap:<value>`` to
    ``key + ':overlap'``."""
    import fcntl

    fd = os.open(os.path.join(marker_dir, value), os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _redis(url).rpush(key + ":overlap", f"overlap:{value}")
        yield
    finally:
        os.close(fd)


def batch_callback(batch_id):
    """A batch callback: appends the batch id to ``<prefix>:callbacks`` (the worker's env)."""
    r = _redis(os.environ["REDIS_URL"])
    r.rpush(f"{os.environ['FUSIONWORKER_PREFIX']}:callbacks", batch_id)
    return batch_id


def count_active(url, key, seconds):
    """Count the jobs running at once (``key``) and record each count seen (``key:seen``)."""
    r = _redis(url)
    r.rpush(f"{key}:seen", r.incr(key))
    try:
        time.sleep(seconds)
    finally:
        r.decr(key)


def barrier(url, key, n, timeout=60.0):
    """Arrive, then wait until ``n`` jobs arrived (True) or ``timeout`` passed (False):
    all n ran at the same time exactly when every one of them returns True."""
    r = _redis(url)
    r.incr(key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if int(r.get(key) or 0) >= n:
            r.rpush(f"{key}:met", 1)
            return True
        time.sleep(0.05)
    r.rpush(f"{key}:met", 0)
    return False


def device_at_barrier(url, key, n, timeout=60.0):
    """The GPU this job's slot gave it (``CUDA_VISIBLE_DEVICES``) and its pid, once
    ``n`` jobs arrived at the barrier ``key`` (all ran at once), or None on a timeout."""
    met = barrier(url, key, n, timeout)
    return [os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()] if met else None


def enqueue_child_from_env():
    """A job that enqueues another with the settings its worker left in the environment."""
    from fusionworker import Queue

    return Queue("child").enqueue("tests.jobs:noop").id
