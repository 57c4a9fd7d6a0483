"""Job functions of the progress/meta tests (``fusionworker.current_job()``), run by horses."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import redis

from fusionworker import Retry, current_job
from fusionworker.exceptions import MetaTooLarge


def _redis(url):
    return redis.Redis.from_url(url, decode_responses=True)


def tight_loop(n, seconds=0.0):
    """At least ``n`` progress calls (and for at least ``seconds``) as fast as they come,
    then a last value and one meta change. Returns how many calls came before the last."""
    job = current_job()
    end = time.monotonic() + seconds
    calls = 0
    while calls < n or time.monotonic() < end:
        job.set_progress((calls % n) / n)
        calls += 1
    job.set_progress(1.0, "done")
    job.meta["calls"] = calls + 1
    return calls


def context():
    job = current_job()
    return {"id": job.id, "queue": job.queue, "func": job.func, "attempt": job.attempt,
            "max_retries": job.max_retries, "meta": dict(job.meta),
            "progress": job.progress}


def rq_names(*args, **kwargs):
    """What RQ's ``get_current_job()`` offers, read through fusionworker's names."""
    job = current_job()
    return {"get_id": job.get_id(), "origin": job.origin, "func_name": job.func_name,
            "args": job.args, "kwargs": job.kwargs}


def report_then_wait(url, key, fraction, message):
    """Report, wait until the test pushes to ``key``, report the end."""
    job = current_job()
    job.set_progress(fraction, message)
    job.meta.update(stage="running", fraction=fraction)
    _redis(url).blpop(key, timeout=60)
    job.set_progress(1.0, f"{message}: done")
    job.meta["stage"] = "done"
    return message


async def async_report(fraction):
    job = current_job()
    await asyncio.sleep(0)
    job.set_progress(fraction, "async")
    job.meta["loop"] = "asyncio"
    return job.attempt


def bad_values():
    """Every refusal happens at the call, in the job; the meta keeps only good values."""
    job = current_job()
    job.meta["ok"] = 1
    errors = {}
    attempts = {
        "object": lambda: job.meta.__setitem__("when", object()),
        "key": lambda: job.meta.__setitem__(1, "x"),
        "nan": lambda: job.meta.update(x=float("nan")),
        "big": lambda: job.meta.__setitem__("big", "x" * 70000),
        "fraction": lambda: job.set_progress(1.5),
        "type": lambda: job.set_progress("half"),
        "message": lambda: job.set_progress(0.5, "m" * 5000),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
        except (TypeError, ValueError) as exc:
            errors[name] = [type(exc).__name__, str(exc),
                            isinstance(exc, MetaTooLarge)]
    return {"errors": errors, "meta": dict(job.meta), "progress": job.progress}


def bad_meta_uncaught():
    current_job().meta["when"] = {"nested": [object()]}


def loop_until_taken_back(url, key):
    """The first run reports a new step every 10 ms (and stamps it in ``key``) until its
    horse is killed; a later run returns 2 at once, reporting nothing (a run given back by
    the reaper is not counted as an attempt: runs are told apart by ``key + ":ran"``)."""
    job = current_job()
    r = _redis(url)
    if not r.set(f"{key}:ran", 1, nx=True):
        return 2
    step = 0
    while True:
        step += 1
        job.set_progress(0.5, f"attempt 1 step {step}")
        job.meta["step"] = step
        r.set(key, step)
        time.sleep(0.01)


def then_kill_self(url, key):
    """Report, wait for the test, report again and die at once (SIGKILL)."""
    job = current_job()
    job.set_progress(0.3, "before")
    _redis(url).blpop(key, timeout=60)
    job.set_progress(0.9, "lost with the horse")
    os.kill(os.getpid(), signal.SIGKILL)


def resumable(url, key):
    """The first run keeps a checkpoint in meta and waits (its worker is killed); a later
    run finds the checkpoint (runs told apart by ``key + ":ran"``: a run the reaper gave
    back is not counted as an attempt)."""
    job = current_job()
    if _redis(url).set(f"{key}:ran", 1, nx=True):
        job.meta["next_row"] = 500
        job.set_progress(0.5, "half way")
        _redis(url).blpop(key, timeout=60)
        return "the first run ended"
    return {"attempt": job.attempt, "meta": dict(job.meta)}


def retry_with_checkpoint():
    job = current_job()
    if job.attempt == 1:
        job.meta["next_row"] = 7
        raise Retry("again", delay=0)
    return job.meta["next_row"]


def in_place(save):
    """A value changed in place is published by the next assignment or save_meta()."""
    job = current_job()
    job.meta["ids"] = [1]
    job.meta["ids"].append(2)
    if save:
        job.save_meta()
    return list(job.meta["ids"])
