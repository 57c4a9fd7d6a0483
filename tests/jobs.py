"""Job functions the tests enqueue (imported by horses as ``tests.jobs``)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import time

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
    import asyncio  # here: a server of sync jobs does not load it

    await asyncio.sleep(0.01)
    return a + b


async def async_boom(message="async boom"):
    import asyncio  # here: a server of sync jobs does not load it

    await asyncio.sleep(0)
    raise ValueError(message)


async def async_sleep(seconds):
    import asyncio  # here: a server of sync jobs does not load it

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


def allocate(mib, seconds):
    data = bytearray(mib * 1024 * 1024)
    for i in range(0, len(data), 4096):
        data[i] = 1
    time.sleep(seconds)
    return len(data)


def patched_target(value):
    """Stands for a provider call that a user's test monkeypatches."""
    raise RuntimeError("the real provider was called")


def calls_patched_target(value):
    return patched_target(value)


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


def big_result(mib):
    return "x" * (mib * 1024 * 1024)


def sized_result(size):
    """A return value of ``size`` characters (the result cap's tests)."""
    return "x" * size


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


@functools.wraps(rq_style_callback)
def adapted_callback(job_id):
    """An adapter taking the job id, made with ``functools.wraps`` of an RQ-style callback:
    its name is the wrapped one's, which is what a worker imports and calls by it."""
    return job_id


def __getattr__(name: str):
    """A public name not defined here: a job function of tests/jobs_redis.py (its
    docstring says why they live there), imported on first use."""
    if not name.startswith("_"):
        from tests import jobs_redis

        if hasattr(jobs_redis, name):
            return getattr(jobs_redis, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
