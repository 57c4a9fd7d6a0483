"""The one way a test waits: poll a condition until it holds, fail with what it last saw.

    from tests.waiting import wait_for

    job = wait_for(lambda: (j := q.fetch_job(jid)).status == "finished" and j)
    wait_for(lambda: r.llen(key) >= 5, timeout=15, what="five records")

A test never sleeps a fixed time and then asserts: it waits for the event that
makes the assertion true (a status, a log line, a process gone). ``timeout`` is
a limit for a broken run, not a measurement: every wait gets at least
:data:`MIN_TIMEOUT` seconds (a 2-core machine runs the suite in parallel, maybe
beside other work), and it ends as soon as the condition holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["MIN_TIMEOUT", "WaitTimeout", "gone", "heartbeats", "processes_of", "reaper_passes",
           "settle", "wait_for"]

#: the shortest limit of any wait, whatever the call says: a smaller one would only
#: measure how loaded the machine is
MIN_TIMEOUT = 30.0


class WaitTimeout(AssertionError):
    """The condition did not hold within the timeout (a test failure, not an error)."""


def wait_for(predicate: Callable[[], T], timeout: float = MIN_TIMEOUT, interval: float = 0.02,
             what: str | None = None,
             ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns a truthy value;
    return that value.

    ``timeout`` is raised to :data:`MIN_TIMEOUT` if shorter. ``ignore``: exception
    types that count as "not yet" (e.g. ``redis.ConnectionError``
    while a server starts); any other exception fails the test at once. On timeout
    raises :class:`WaitTimeout` naming ``what`` (default: the predicate's source
    location) and the last value or ignored error seen.
    """
    timeout = max(timeout, MIN_TIMEOUT)
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except ignore as exc:
            value, last = None, exc  # type: ignore[assignment]
        else:
            last = value
            if value:
                return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what or _describe(predicate)} not met within {timeout:g} s "
                              f"(last: {_short(last)})")
        time.sleep(interval)


def _short(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _describe(predicate: Callable[..., Any]) -> str:
    code = getattr(predicate, "__code__", None)
    if code is None:
        return repr(predicate)
    return f"condition at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


def heartbeats(r: Any, worker_key: str, count: int = 2, timeout: float = 15.0) -> None:
    """Wait until the worker behind ``worker_key`` (its heartbeat hash) wrote ``count`` more
    heartbeats: it went round its loop, with whatever was in Redis before the call,
    at least ``count - 1`` times. The event to await before asserting that a worker did
    *not* do something (claim while suspended or throttled), instead of a sleep."""
    for _ in range(count):
        last = r.hget(worker_key, "last_heartbeat")
        wait_for(lambda last=last: r.hget(worker_key, "last_heartbeat") != last,
                 timeout=timeout, what=f"a heartbeat of {worker_key}")


def reaper_passes(r: Any, lock_key: str, count: int = 2, timeout: float = 30.0) -> None:
    """Wait until ``count`` more reaper passes started (any worker's): each pass takes the
    reaper lock ``lock_key`` (``Keys(prefix).reaper_lock``) afresh, so its TTL jumps up.
    The event to await before asserting that a pass did *not* do something."""
    seen = 0
    last = r.pttl(lock_key)

    def new_pass() -> bool:
        nonlocal last, seen
        now = r.pttl(lock_key)
        fresh, last = now > last, now
        seen += fresh
        return seen >= count
    wait_for(new_pass, timeout=timeout, interval=0.01, what=f"{count} reaper passes")


def processes_of(pids: Any) -> list[Any]:
    """The processes now behind ``pids`` (``psutil.Process``, which remember their start
    time): take them before the event that should end them, then wait for :func:`gone`.
    A pid already free is left out: that process is gone."""
    import psutil

    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(int(pid)))
        except psutil.NoSuchProcess:
            pass
    return found


def gone(procs: list[Any]) -> bool:
    """Every process of ``procs`` has exited: no longer there, a zombie (dead, not yet
    reaped by whoever inherited it), or its pid now names a newer process. A bare pid
    check is wrong on a busy machine: the suite forks thousands of horses and pids
    (at most 32,768 here) are reused within seconds."""
    import psutil

    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def settle(procs: list[Any], timeout: float = 10.0) -> bool:
    """Teardown's wait for killed processes: until every one is :func:`gone` (a zombie
    counts: it can write nothing more), at most ``timeout`` s; False if some still ran.
    Not ``psutil.wait_procs``: a killed worker's fork server and horses are inherited by
    pid 1, which may reap them seconds later (~2 s here), and that waits for the reaping."""
    deadline = time.monotonic() + timeout
    while not gone(procs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
