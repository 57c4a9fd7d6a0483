"""Writing the events of jobs into their jobs' own histories (``history.lua``), as the
Redis stream sink's delivery pipeline does (sinks.py)."""

from __future__ import annotations

from typing import Any

from ..core.keys import Keys, QueueKeys, check_queue_name

__all__ = ["HISTORY_CAP", "HISTORY_CHUNK", "HISTORY_COPY_TTL", "HISTORY_GONE_TTL",
           "HISTORY_TTL", "HistoryRun", "queue_keys"]

#: Events kept in one job's history (the newest; a job retried many times loses its
#: oldest ones): what the job page, the API and ``events --job`` show.
HISTORY_CAP = 200
#: Seconds a job's history outlives its record when an event comes after the record is
#: gone (a job finished with ``result_ttl=0``, deleted).
HISTORY_GONE_TTL = 600
#: Seconds a new history lives until an event that ends the job gives it the record's
#: TTL (a job that lives longer loses its first events).
HISTORY_TTL = 30 * 86400
#: The events after which the history takes the record's TTL: the job ended (its script
#: set the record's TTL first) or came back (a failed job requeued: its TTL dropped).
HISTORY_COPY_TTL = frozenset(("completed", "failed", "timeout", "abandoned", "canceled",
                              "deleted", "requeued"))


#: Events of jobs per ``history.lua`` call (a single Redis): one command, not one per
#: event, and Redis busy for well under a millisecond per call.
HISTORY_CHUNK = 100


def queue_keys(prefix: str, queue: str) -> QueueKeys | None:
    """The keys of ``queue``, or None when it is not a queue's name."""
    try:
        return Keys(prefix).queue(check_queue_name(queue))
    except ValueError:
        return None


class HistoryRun:
    """The events of jobs waiting for one ``history.lua`` call in a delivery pipeline
    (``stream`` None: a Cluster, one event per call, the stream XADDed apart)."""

    def __init__(self, pipe: Any, script: Any, stream: str | None, maxlen: int) -> None:
        self.pipe, self.script, self.stream, self.maxlen = pipe, script, stream, maxlen
        self.limit = HISTORY_CHUNK if stream is not None else 1
        #: (script name, keys, args) of each command queued, None for a plain XADD
        self.calls: list[tuple[str, list[Any], list[Any]] | None] = []
        self.keys: list[Any] = []
        self.args: list[Any] = []

    def add(self, keys: tuple[str, str], copy: bool, fields: dict[Any, Any]) -> None:
        self.keys += keys
        self.args += ("copy" if copy else "keep", len(fields))
        for pair in fields.items():
            self.args += pair
        if len(self.keys) >= 2 * self.limit:
            self.send()

    def send(self) -> None:
        """Queue the call of the events added since the last one (if any)."""
        if not self.keys:
            return
        keys = self.keys + [self.stream] if self.stream is not None else self.keys
        args = [self.maxlen, *self.args]     # the cap and TTLs: _lib.lua's, the same
        self.script.queue_by_sha(self.pipe, keys, args)
        self.calls.append(("history", keys, args))
        self.keys, self.args = [], []
