"""Job groups, read side: which groups are busy and how much waits behind them.

The write side lives in the Lua scripts (``_lib.lua``: ``make_ready``,
``release_group``). A job enqueued with ``group="customer-42"`` enters the
queue's pending ZSET only while it *holds* its group (``fw:{q}:groups`` maps
group -> holding job id); the group's other jobs wait, in enqueue order, on the
list ``fw:{q}:group:<g>``. So at most one job of a group is queued or running
at a time, and a worker never meets a blocked job: the next eligible job is
simply the best one in ``pending``.

The holder keeps the group through a retry (its backoff included), a cold
shutdown's give-back and the reaper's re-queue; it hands the group to the
next waiting job when it ends for good: finished, failed (timeouts and the
reaper's ``abandoned`` included), canceled or deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .keys import Keys
from .redis_client import text_hash

if TYPE_CHECKING:  # pragma: no cover
    from .redis_client import RedisClient


@dataclass
class BusyGroup:
    group: str
    job_id: str            # the job holding the group (queued, scheduled or started)
    job_status: str | None  # its status now (None: record gone)
    waiting: int           # jobs of the group waiting behind it


def busy_groups(connection: RedisClient, prefix: str, queue: str) -> dict[str, str]:
    """Group -> id of the job holding it, for every busy group of ``queue``."""
    return text_hash(connection.hgetall(Keys(prefix).queue(queue).groups))


def describe_busy_groups(connection: RedisClient, prefix: str, queue: str,
                         limit: int = 100) -> list[BusyGroup]:
    """Busy groups of ``queue`` with their holder's status and backlog: the ``limit``
    groups with the most jobs waiting, most first (ties by name)."""
    k = Keys(prefix).queue(queue)
    held = sorted(busy_groups(connection, prefix, queue).items())
    pipe = connection.pipeline(transaction=False)
    for group, job_id in held:
        pipe.hget(k.job(job_id), "status")
        pipe.llen(k.group(group))
    replies = pipe.execute()
    out = [BusyGroup(group, job_id, replies[2 * i], int(replies[2 * i + 1]))
           for i, (group, job_id) in enumerate(held)]
    out.sort(key=lambda g: (-g.waiting, g.group))
    return out[:max(limit, 0)]
