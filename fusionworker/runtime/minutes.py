"""The per-minute outcome counts of each queue (``fw:{q}:minute:<m>``, the dashboard's
chart and ``info``'s last hour), counted in the worker and written with its heartbeat.

finish.lua answers the server time of each outcome it records; the recorder counts the
outcome here under (queue, that epoch minute, outcome), and the heartbeat's pipeline
(heartbeat.py) carries one ``minutes.lua`` call per queue with counts, as it carries
the worker's own counters (counters.py); the worker writes them once more as it stops.
minutes.lua adds them (``HINCRBY``), sets the key's TTL when it makes a field and, the
first time a minute counts ``finished``, prunes the ``finished`` registry, as finish.lua
did when it counted each outcome itself: one ``HINCRBY`` less per job.

What the chart says is at most one heartbeat interval behind the recorded outcomes while
Redis answers; a worker killed with SIGKILL loses its last interval's counts. Counts
that did not land (refused, a lost connection) are given back to the next heartbeat; a
lost reply may count them twice: statistics, never read by a decision. Counts older
than the keys live (``MINUTE_COUNTS_TTL``) are dropped, not sent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

from ..core.admin import MINUTE_COUNTS_TTL
from ..core.keys import Keys
from ..core.redis_client import execute_settled
from ..core.scripts import replies

#: (queue, epoch minute, outcome)
Slot = tuple[str, int, str]


class MinuteCounts:
    """The outcome counts not written yet, and their write (one script call per queue)."""

    def __init__(self, scripts: Any, keys: Keys, result_ttl: int) -> None:
        self.scripts, self.keys, self.result_ttl = scripts, keys, result_ttl
        self.unwritten: Counter[Slot] = Counter()

    def count(self, queue: str, at: float | None, outcome: str) -> None:
        """One outcome finish.lua recorded at server time ``at`` (None: not known, e.g.
        found landed after a lost reply: this host's clock)."""
        minute = int((time.time() if at is None else at) // 60)
        self.unwritten[(queue, minute, outcome)] += 1

    def queue(self, pipe: Any) -> list[tuple[str, list[Any], list[Any], list[Slot]]]:
        """Queue one minutes.lua call per queue with counts on ``pipe`` and take the
        counts: returns per call (script, keys, args, the slots sent), for
        :meth:`settle` (or :meth:`give_back` when the pipeline raised)."""
        taken, self.unwritten = self.unwritten, Counter()
        oldest = int(time.time() // 60) - MINUTE_COUNTS_TTL // 60
        by_queue: dict[str, list[Slot]] = {}
        for slot in sorted(taken):
            if slot[1] >= oldest:
                by_queue.setdefault(slot[0], []).append(slot)
        calls = []
        for queue, slots in by_queue.items():
            args: list[Any] = [self.result_ttl]
            for slot in slots:
                args += [slot[1], slot[2], taken[slot]]
            keys = [self.keys.queue(queue).base]
            self.scripts.minutes.queue_by_sha(pipe, keys, args)
            calls.append(("minutes", keys, args, slots))
        return calls

    def settle(self, calls: Sequence[tuple[str, list[Any], list[Any], list[Slot]]],
               answers: Sequence[Any]) -> None:
        """The answers of the calls :meth:`queue` queued: what a call did not take (a
        refusal, or the triples after one) is given back."""
        for (_, _, args, slots), answer in zip(calls, answers, strict=True):
            done = 0 if isinstance(answer, Exception) else replies.minutes(answer)
            for i, slot in enumerate(slots[done:], start=done):
                self.unwritten[slot] += int(args[3 + 3 * i])

    def reload(self, calls: Sequence[tuple[str, list[Any], list[Any], list[Slot]]],
               answers: list[Any]) -> None:
        """Settle ``answers`` (theirs, in order) after calling once more, directly, each
        call Redis did not know the script of (restarted, failed over); raises what such a
        call raised but a refusal, what did not land given back."""
        try:
            self.scripts.reload_missing(answers, [c[:3] for c in calls])
        finally:
            self.settle(calls, answers)

    def give_back(self, calls: Sequence[tuple[str, list[Any], list[Any], list[Slot]]]) -> None:
        self.settle(calls, [RuntimeError("not sent")] * len(calls))

    def flush(self, connection: Any) -> None:
        """Write the counts now, in a round trip of their own (at stop). Raises what
        Redis raised, what was not written given back."""
        pipe = connection.pipeline(transaction=False)
        calls = self.queue(pipe)
        if not calls:
            return
        execute_settled(pipe, partial(self.give_back, calls), partial(self.reload, calls))
