"""Job functions the tests enqueue (imported by horses as ``tests.jobs``)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
import time

import redis

from fusionworker import Retry, job


def add(a, b):
    return a + b


def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


def identity(value):
    return value


def noop():
    return None


def boom(message="boom"):
    raise ValueError(message)


def sleep(seconds):
    time.sleep(seconds)
    return seconds


async def async_add(a, b):
    await asyncio.sleep(0.01)
    return a + b


async def async_boom(message="async boom"):
    await asyncio.sleep(0)
    raise ValueError(message)


async def async_sleep(seconds):
    await asyncio.sleep(seconds)
    return seconds


def returns_awaitable(value):
    """A plain function that returns a coroutine (e.g. a decorator around async code)."""
    return async_add(value, 0)


def ignore_alarm_and_sleep(seconds):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(seconds)


def segfault():
    ctypes.string_at(0)


def hard_exit(code=3):
    os._exit(code)


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def not_serializable():
    return object()


def retry_me(delay=None):
    raise Retry("asked to retry", delay=delay)


def conn_error():
    raise ConnectionError("network unreachable")


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


def allocate(mib, seconds):
    data = bytearray(mib * 1024 * 1024)
    for i in range(0, len(data), 4096):
        data[i] = 1
    time.sleep(seconds)
    return len(data)


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


def patched_target(value):
    """Stands for a provider call that a user's test monkeypatches."""
    raise RuntimeError("the real provider was called")


def calls_patched_target(value):
    return patched_target(value)


def enqueue_child_with_env_settings(url, prefix):
    """Enqueue a job on queue 'child' with settings from the environment (+ url, prefix)."""
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue

    settings = load_settings(redis_url=url, prefix=prefix, allowed_modules=("tests",))
    return Queue("child", _redis(url), settings=settings, events=False).enqueue(
        "tests.jobs:noop").id


def surrogate_error():
    """A job whose error carries a lone surrogate (text from an undecodable file name)."""
    raise ValueError("cannot parse caf\udce9.csv")


def surrogate_result():
    return "caf\udce9"


class _BadStr(Exception):
    def __str__(self):
        raise RuntimeError("__str__ itself fails")


def bad_str_error():
    raise _BadStr()


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


def big_result(mib):
    return "x" * (mib * 1024 * 1024)


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


def sized_result(size):
    """A return value of ``size`` characters (the result cap's tests)."""
    return "x" * size


def device_at_barrier(url, key, n, timeout=60.0):
    """The GPU this job's slot gave it (``CUDA_VISIBLE_DEVICES``) and its pid, once
    ``n`` jobs arrived at the barrier ``key`` (all ran at once), or None on a timeout."""
    met = barrier(url, key, n, timeout)
    return [os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()] if met else None


def device_of_horse():
    """This horse's ``CUDA_VISIBLE_DEVICES`` and pid."""
    return [os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()]


def writes_refusal(folder, seconds):
    """A hostile job in a warm horse: its first run writes a warm horse's refusal
    (``\x15\n``, protocol.REFUSED + STAY) on every pipe it may write (its report pipe
    among them) and runs on. Each run writes ``start <pid>`` to ``folder``/runs, then
    ``overlap <pid>`` for each earlier run's process still alive, and, after
    ``seconds``, ``end <pid>``."""
    import fcntl
    import stat

    path = os.path.join(folder, "runs")
    earlier = []
    with contextlib.suppress(FileNotFoundError), open(path) as fh:
        earlier = [line.split()[1] for line in fh if line.startswith("start ")]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, f"start {os.getpid()}\n".encode())
    for pid in earlier:
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                os.write(fd, f"overlap {pid}\n".encode())
    with contextlib.suppress(FileExistsError):
        os.close(os.open(os.path.join(folder, "refused"), os.O_CREAT | os.O_EXCL))
        for other in range(3, 256):
            with contextlib.suppress(OSError):
                if (stat.S_ISFIFO(os.fstat(other).st_mode)
                        and fcntl.fcntl(other, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY):
                    os.write(other, b"\x15\n")
    time.sleep(seconds)
    os.write(fd, f"end {os.getpid()}\n".encode())
    os.close(fd)


def sleep_first(folder, seconds, then=0.0):
    """Sleep ``seconds`` in the first run (a marker file in ``folder``), ``then`` in any
    later one: a run a test kills holds on until it does, its rerun does not."""
    try:
        os.close(os.open(os.path.join(folder, "first"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        seconds = then
    time.sleep(seconds)


@job(horse_jobs=1)
def fresh_pid():
    """Always in a fresh horse, whatever --horse-jobs says: its pid."""
    return os.getpid()


def _write_ends() -> list[int]:
    """The pipe write ends this process holds (its report pipe among them)."""
    import fcntl
    import stat

    ends = []
    for fd in range(3, 256):
        try:
            if (stat.S_ISFIFO(os.fstat(fd).st_mode)
                    and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY):
                ends.append(fd)
        except OSError:
            continue
    return ends


def flood_report_pipe(mib, seconds=0.0):
    """The hostile job: ``mib`` MiB of no report on every pipe it can write (its report
    pipe among them), then sleep ``seconds`` (its horse should be dead by then)."""
    chunk = b"x" * (1 << 20)
    for _ in range(int(mib)):
        for fd in _write_ends():
            try:
                os.write(fd, chunk)
            except OSError:
                pass
    time.sleep(seconds)
    return "flooded"


def rq_style_callback(job, connection, result, *args, **kwargs):
    """A callback as RQ calls one, (job, connection, result): refused at enqueue here."""
    return result


def enqueue_child_from_env():
    """A job that enqueues another with the settings its worker left in the environment."""
    from fusionworker import Queue

    return Queue("child").enqueue("tests.jobs:noop").id


@functools.wraps(rq_style_callback)
def adapted_callback(job_id):
    """An adapter taking the job id, made with ``functools.wraps`` of an RQ-style callback:
    its name is the wrapped one's, which is what a worker imports and calls by it."""
    return job_id
