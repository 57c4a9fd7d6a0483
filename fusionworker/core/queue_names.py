"""The names of the queues: the set of the known ones (``fw:queues``) and the
search of the queue that holds a job. Plain reads on a client, no ``Queue``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .keys import Keys, is_queue_name
from .redis_client import decoding, texts

if TYPE_CHECKING:  # pragma: no cover
    from .redis_client import RedisClient

log = logging.getLogger("fusionworker.queue")

#: (prefix, name) of bad members of the known queues already logged by this process
_SKIPPED: set[tuple[str, str]] = set()


def known_queues(connection: RedisClient, prefix: str = "fw") -> list[str]:
    """Every queue ever enqueued to, sorted. A member of the set that is no queue
    name (written by something else: ``SADD fw:queues '"><x'``) is skipped and
    logged (once per process and name): no loop over the queues, the reaper's, a
    worker's ``all``, a page's or the CLI's, stops at it."""
    names = []
    for name in texts(decoding(connection).smembers(Keys(prefix).queues)):
        if is_queue_name(name):
            names.append(name)
        elif (prefix, name) not in _SKIPPED:
            if len(_SKIPPED) < 1000:
                _SKIPPED.add((prefix, name))
            log.warning("Skipped %r in the set of known queues %s: not a queue name "
                        "(remove it: SREM %s <name>)", name[:200], Keys(prefix).queues,
                        Keys(prefix).queues)
    return sorted(names)


def find_queue_of(connection: RedisClient, job_id: str, prefix: str = "fw",
                  queue: str | None = None) -> str | None:
    """The queue holding job ``job_id`` (searching every known queue unless given; of
    several, the first by name: :func:`queues_of` lists them all)."""
    found = queues_of(connection, job_id, prefix, queue)
    return found[0] if found else None


def queues_of(connection: RedisClient, job_id: str, prefix: str = "fw",
              queue: str | None = None) -> list[str]:
    """Every queue holding a job ``job_id`` (an id is unique in its queue only: a job id
    given twice, to two queues, names two jobs), by name; only ``queue`` if given."""
    connection = decoding(connection)
    names = [queue] if queue else known_queues(connection, prefix)
    keys = Keys(prefix)
    pipe = connection.pipeline(transaction=False)
    for name in names:
        pipe.exists(keys.queue(name).job(job_id))
    return [name for name, found in zip(names, pipe.execute()) if found]


def ambiguous(job_id: str, names: list[str]) -> str:
    """What a command says of ``job_id`` held by jobs of several queues (``names``, from
    :func:`queues_of`): it never acts on a guess."""
    return (f"job id {job_id!r} names a job in each of the queues {', '.join(names)}: "
            "say which with --queue")
