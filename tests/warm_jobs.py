"""Job functions of the warm-horse tests (``worker --horse-jobs N``), run by horses."""

from __future__ import annotations

import os
import signal
import time

import redis

from fusionworker import current_job, job

#: what jobs leave behind in a warm horse (module state, the documented trade)
_LEFT: list[bytes] = []


def _push(url, key):
    redis.Redis.from_url(url).rpush(key, os.getpid())


def pid():
    """The horse's pid and how many jobs of this module ran in it before."""
    _LEFT.append(b"")
    return [os.getpid(), len(_LEFT) - 1]


def leak(mib):
    """Keep ``mib`` MiB (touched) in module state; the horse's pid."""
    _LEFT.append(b"x" * (mib << 20))
    return os.getpid()


def fail(url, key):
    _push(url, key)
    raise RuntimeError("fails on purpose")


def sleep(url, key, seconds, ignore_alarm=False):
    """Push the pid, then sleep (``ignore_alarm``: through the timeout's SIGALRM)."""
    if ignore_alarm:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
    _push(url, key)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
    return os.getpid()


def set_meta(tag):
    """Leave meta and progress on this job's context; the pid."""
    ctx = current_job()
    ctx.meta["tag"] = tag
    ctx.set_progress(0.5, "half")
    return os.getpid()


def read_meta():
    """What this job's context starts with (nothing of the previous job's)."""
    ctx = current_job()
    return [os.getpid(), dict(ctx.meta), ctx.progress]


@job(horse_jobs=1)
def fresh():
    """Always in a fresh horse, whatever --horse-jobs says."""
    return os.getpid()


@job(horse_jobs=2)
def pair():
    return os.getpid()


def progress_then_threads():
    """Report progress (its sender thread starts), then how many threads this horse has
    besides the main one, and how SIGTERM is handled; then ignore SIGTERM for the next."""
    import threading

    ctx = current_job()
    ctx.set_progress(0.5)
    time.sleep(0.15)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    was_default = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return [os.getpid(), others, was_default]


def spawn():
    """Leave a child process behind; the horse's pid and the child's."""
    import subprocess

    child = subprocess.Popen(["sleep", "600"])
    return [os.getpid(), child.pid]
