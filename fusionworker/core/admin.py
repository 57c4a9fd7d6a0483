"""Deployment-wide operations on Redis: suspend/resume, worker listing, one-screen status.

Reads here back the operator CLI (``info``, ``health``); every function takes a
client (any redis-py client: bytes replies are decoded, see
:func:`fusionworker.connection.decoding`) and a key prefix and nothing else,
so a script can use them too.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .keys import Keys
from .redis_client import decoding, stored_count, stored_number, texts
from .redis_client import server_time as server_time  # its home is redis_client.py
from .scripts import replies, scripts_for

if TYPE_CHECKING:  # pragma: no cover
    from .redis_client import RedisClient


class Control(StrEnum):
    """The messages on the control channel (``fw:control``) every worker listens to."""

    SUSPEND = "suspend"     #: claim nothing more until resumed (running jobs finish)
    RESUME = "resume"
    #: ``shutdown:<worker>``: that worker reads its heartbeat hash's ``shutdown`` now
    SHUTDOWN = "shutdown:"


def suspend(connection: RedisClient, prefix: str = "fw", duration: float | None = None) -> None:
    """Every worker finishes its current job, then claims nothing until :func:`resume`."""
    connection = decoding(connection)
    keys = Keys(prefix)
    if duration:
        connection.set(keys.suspended, str(time.time()), px=int(duration * 1000))
    else:
        connection.set(keys.suspended, str(time.time()))
    connection.publish(keys.control, Control.SUSPEND.value)


def resume(connection: RedisClient, prefix: str = "fw") -> None:
    connection = decoding(connection)
    keys = Keys(prefix)
    connection.delete(keys.suspended)
    connection.publish(keys.control, Control.RESUME.value)


#: The heartbeat hash's field that holds a stop asked of its worker ('warm' | 'cold').
SHUTDOWN_FIELD = "shutdown"


def request_shutdown(connection: RedisClient, name: str, prefix: str = "fw",
                     mode: str = "warm") -> None:
    """Ask worker ``name`` to stop as SIGTERM would: ``warm`` (its running jobs finish)
    or ``cold`` (they go back). Written to its heartbeat hash only while the hash
    exists, then published (docs/design.md, "Stopping one worker from elsewhere");
    :class:`~fusionworker.exceptions.InvalidOperation` when no live worker has that
    name, ValueError for another mode. Nothing is written on a refusal."""
    from ..exceptions import InvalidOperation

    if mode not in ("warm", "cold"):
        raise ValueError(f"mode must be 'warm' or 'cold', not {mode!r}")
    connection = decoding(connection)
    keys = Keys(prefix)
    key = keys.worker(name)
    # one script of one key (a Cluster takes it): only into a live worker's hash
    if not replies.ask_shutdown(scripts_for(connection).ask_shutdown(
            keys=[key], args=[SHUTDOWN_FIELD, mode])):
        raise InvalidOperation(f"no live worker named {name!r}")
    connection.publish(keys.control, f"{Control.SHUTDOWN.value}{name}")


def is_suspended(connection: RedisClient, prefix: str = "fw") -> bool:
    connection = decoding(connection)
    return bool(connection.exists(Keys(prefix).suspended))


def suspended_for(connection: RedisClient, prefix: str = "fw") -> float | None:
    """Seconds until a timed suspension ends; ``-1.0`` when suspended indefinitely;
    ``None`` when not suspended."""
    connection = decoding(connection)
    pttl = connection.pttl(Keys(prefix).suspended)
    if pttl == -2:
        return None
    if pttl == -1:
        return -1.0
    return pttl / 1000.0


def workers(connection: RedisClient, prefix: str = "fw") -> list[dict[str, str]]:
    """Heartbeat hashes of live workers (names whose key expired are left out).

    Read-only: ``info``, the exporter's scrape, the web dashboard and ``health``
    call this, and a read never writes. Names whose heartbeat key expired stay in
    ``<prefix>:workers`` until the reaper's pass drops them
    (:func:`fusionworker.middleware.reaper.prune_workers`); a worker that stops removes its
    own name.
    """
    connection = decoding(connection)
    keys = Keys(prefix)
    names = sorted(texts(connection.smembers(keys.workers)))
    pipe = connection.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.worker(name))
        pipe.pttl(keys.worker(name))
    answers = pipe.execute(raise_on_error=False)
    # a heartbeat key of another type (another program's) is no worker: left out
    return [with_beat_age(data, pttl) for data, pttl in zip(answers[::2], answers[1::2])
            if data and not isinstance(data, Exception)]


#: a read heartbeat's age on the Redis server's clock (:func:`with_beat_age`); no field
#: a worker writes starts with '_'
BEAT_AGE = "_beat_age"


def with_beat_age(data: dict[str, str], pttl: Any) -> dict[str, str]:
    """``data`` (a heartbeat hash) with how long ago its last heartbeat was, on the Redis
    server's clock: each heartbeat sets its key's TTL to ``worker_ttl`` (a field of it),
    so that is ``worker_ttl - PTTL`` (the reaper's way), whatever the clock of the
    worker's host says (its ``last_heartbeat``: a host 60 s behind read as a silent
    worker, one ahead as alive minutes after its death)."""
    ttl = _num(data.get("worker_ttl"))
    if ttl and isinstance(pttl, int) and pttl > 0:
        data[BEAT_AGE] = repr(max(0.0, ttl - pttl / 1000.0))
    return data


def _num(value: str | None, kind: type = float) -> Any:
    """A heartbeat field as a number (``kind``); None for none a page can show (not a
    number, ``inf``, ``nan``, 5,000 digits)."""
    number = stored_number(value)
    if number is None or (kind is int and abs(number) >= 1e18):
        return None
    return int(number) if kind is int else number


def _listed(value: str | None) -> list[str]:
    """The items of a comma-separated heartbeat field ([] for none)."""
    return [item for item in (value or "").split(",") if item]


def _age(now: float, since: float | None) -> float | None:
    """Seconds from ``since`` to ``now`` (never negative); None without ``since``."""
    return max(0.0, now - since) if since else None


#: the lease a heartbeat that names none is judged by (the settings' default)
DEFAULT_LEASE = 30.0


def last_beat(data: dict[str, str], now: float) -> float | None:
    """When the last heartbeat was (epoch seconds): on the Redis server's clock when
    the hash was read with its TTL (:func:`with_beat_age`, ``now`` being that clock),
    else as the worker wrote it (its host's clock)."""
    age: float | None = _num(data.get(BEAT_AGE))
    beat: float | None = now - age if age is not None else _num(data.get("last_heartbeat"))
    return beat


def shown_state(data: dict[str, str], now: float) -> str:
    """The state a reader shows: the heartbeat's, or ``silent`` once its last heartbeat
    is older than its lease (the worker died, froze or lost Redis: the state it wrote
    last, often ``busy``, is no longer true; the reaper takes its jobs back)."""
    heartbeat = last_beat(data, now)
    if heartbeat is not None and now - heartbeat > (_num(data.get("lease")) or DEFAULT_LEASE):
        return "silent"
    return data.get("state", "")


def describe_worker(data: dict[str, str], now: float) -> dict[str, Any]:
    """A heartbeat hash as typed fields with ages relative to ``now`` (the ``info`` schema)."""
    started = _num(data.get("current_job_started"))
    heartbeat = last_beat(data, now)
    birth = _num(data.get("birth"))
    current = data.get("current_job") or None
    return {
        "name": data.get("name", ""),
        "host": data.get("host", ""),
        "pid": _num(data.get("pid"), int),
        "state": shown_state(data, now),
        "throttle": data.get("throttle") or None,
        # the governor's last CPU sample (% of all cores); None while its CPU check is off
        "cpu_percent": _num(data.get("cpu_percent")),
        "queues": _listed(data.get("queues")),
        "current_job": current,
        # a worker with --concurrency N runs up to N jobs at once (current_job: the first)
        "current_jobs": _listed(data.get("current_jobs")) or ([current] if current else []),
        "concurrency": _num(data.get("concurrency"), int) or 1,
        # round-robin | strict | fair (worker --fair); None for a worker that says none
        "queue_order": data.get("queue_order") or None,
        # the devices its slots own, slot i the i-th (worker --gpus); [] without
        "gpus": _listed(data.get("gpus")),
        # those whose slots claim nothing now: over GPU_THROTTLE_THRESHOLD (--gpus only)
        "gpus_held": _listed(data.get("gpus_held")),
        "current_queue": (data.get("current_queue") or None) if current else None,
        "current_job_age": _age(now, started) if current else None,
        "heartbeat_age": _age(now, heartbeat),
        "uptime": _age(now, birth),
        "successful": _num(data.get("successful"), int) or 0,
        "failed": _num(data.get("failed"), int) or 0,
        "total_working_time": _num(data.get("total_working_time")) or 0.0,
        "lease": _num(data.get("lease")),
        "version": data.get("version") or None,
    }


def forget_worker(connection: RedisClient, name: str, pid: int, prefix: str = "fw") -> bool:
    """Remove the heartbeat of worker ``name`` if it still names ``pid`` (known dead).

    The supervisor calls this for a child it saw die: the dead worker then
    stops showing in ``info`` at once instead of after ``worker_ttl``, and a
    restarted child may take the same name. A job the dead worker held stays
    in ``started`` until its lease runs out; the reaper then re-queues it.
    """
    connection = decoding(connection)
    keys = Keys(prefix)
    key = keys.worker(name)
    if connection.hget(key, "pid") != str(pid):
        return False
    pipe = connection.pipeline(transaction=False)
    pipe.delete(key)
    pipe.srem(keys.workers, name)
    pipe.execute()
    return True


def worker_beats(connection: RedisClient, workers: dict[str, int],
                 prefix: str = "fw") -> dict[str, float | None]:
    """name -> the last heartbeat (epoch seconds, the worker's own clock) of each of
    ``workers`` (name -> pid), in one round trip; None for one whose heartbeat hash names
    another pid, or holds no heartbeat (not registered yet). A hash without a pid (a
    heartbeat written after the hash had expired) is the name's own."""
    connection = decoding(connection)
    keys = Keys(prefix)
    pipe = connection.pipeline(transaction=False)
    for name in workers:
        pipe.hmget(keys.worker(name), "pid", "last_heartbeat")
    beats: dict[str, float | None] = {}
    for (name, pid), (seen, beat) in zip(workers.items(), pipe.execute()):
        beats[name] = stored_number(beat) if seen in (None, str(pid)) else None
    return beats


def stuck_jobs(connection: RedisClient, queue: str, prefix: str = "fw",
               now: float | None = None) -> list[str]:
    """Ids of started jobs of ``queue`` whose lease deadline (score) is before ``now``."""
    connection = decoding(connection)
    if now is None:
        now = server_time(connection)
    return texts(connection.zrangebyscore(Keys(prefix).queue(queue).started, "-inf",
                                          f"({now}"))


#: Seconds the per-minute outcome counts live (set in ``scripts/minutes.lua``).
MINUTE_COUNTS_TTL = 7200


def minute_counts(connection: RedisClient, queues: list[str], prefix: str = "fw",
                  minutes: int = 60, now: float | None = None) -> list[dict[str, Any]]:
    """Jobs finished and failed per minute over the last ``minutes`` (oldest first),
    summed over ``queues``: ``[{"minute": epoch_minute, "finished": n, "failed": n}]``.

    One ``EXISTS`` of a queue's minute keys (they share its hash tag: one slot) for
    each queue, then one pipelined HGETALL per minute of the queues that have any,
    of the hashes the workers keep (a queue idle for the span costs one command, not
    ``minutes``): each outcome ``finish.lua`` records is counted in the worker, in the
    server minute of the outcome, and written by its next heartbeat or at its stop
    (``runtime/minutes.py``): the counts are at most one ``heartbeat_interval`` behind.
    """
    connection = decoding(connection)
    if now is None:
        now = server_time(connection)
    last = int(now // 60)
    span = list(range(last - minutes + 1, last + 1))
    keys = Keys(prefix)
    rows_of_keys = [[qk.minute(m) for m in span] for qk in map(keys.queue, queues)]
    pipe = connection.pipeline(transaction=False)
    for queue_keys in rows_of_keys:
        pipe.exists(*queue_keys)
    present = pipe.execute() if queues else []
    pipe = connection.pipeline(transaction=False)
    for queue_keys, count in zip(rows_of_keys, present, strict=True):
        for key in queue_keys if count else ():
            pipe.hgetall(key)
    replies = pipe.execute() if any(present) else []
    rows = [{"minute": m, "finished": 0, "failed": 0} for m in span]
    for i, data in enumerate(replies):
        row = rows[i % len(span)]
        row["finished"] += stored_count(data.get("finished"))
        row["failed"] += stored_count(data.get("failed"))
    return rows
