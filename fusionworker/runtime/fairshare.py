"""Fair share by use (``worker --fair``, ``FUSIONWORKER_QUEUE_ORDER=fair``): the next
claim goes to the queue that used the least worker time lately, weighted.

Seed 003's scheduler "selects the queue that has used the least resources, weighted by
priority"; Sidekiq's weighted queues (``-q sms,3 -q email,1``) instead pick a queue at
random with probability by weight, per *fetch*, so a queue of slow jobs beside a queue
of fast ones takes most of the time. Here the weight is a share of worker time:
``sms:3,email:1`` gives sms three seconds of work per second of email while both have
jobs, whatever their jobs' lengths.

Use is kept in Redis per queue (``fw:{q}:use``, ``use.lua``): an exponentially decayed
sum of the seconds attempts ran (fork to outcome), halving every ``fair_window``
seconds, written by the finish pipeline of whichever worker ran the job (no extra
round trip: the script rides with the outcome), so every worker serving the queue
sees the same use. The same pipeline (and a claim of the worker's own) reads the use
of the worker's other queues; in between, the worker adds what its own jobs used as
they end. A claim then asks the queue whose ``use / weight`` is lowest (a queue never
used: 0), skipping queues found dry, paused or backed off, exactly as round-robin
skips them.

What a process dying does: an attempt whose outcome never lands adds no use (its
worker time is forgotten, as its outcome is retried by the reaper); the use hash
expires after 20 half-lives without an attempt. Nothing else is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis

from ..core.keys import Keys
from ..core.scripts import replies

__all__ = ["FairShare"]

#: weight of the newest duration in a queue's mean job length (what a claim of several
#: slots expects each job to add to the queue's use)
_EWMA = 0.2


class FairShare:
    """The use of a worker's queues as last read, and the order it asks them in."""

    def __init__(self, keys: Keys, scripts: Any, *, half_life: float) -> None:
        self.keys, self.scripts, self.half_life = keys, scripts, float(half_life)
        #: queue -> (decayed worker seconds, server time of that value)
        self.use: dict[str, tuple[float, float]] = {}
        #: queue -> mean seconds of its jobs here (their expected cost when planning)
        self.mean: dict[str, float] = {}

    # -- choosing ----------------------------------------------------------------

    def _now(self) -> float:
        return max((at for _, at in self.use.values()), default=0.0)

    def score(self, queue: str, weight: int, now: float | None = None) -> float:
        """``use / weight``, every queue's use decayed to the same (latest) time."""
        value, at = self.use.get(queue, (0.0, 0.0))
        if value <= 0:
            return 0.0
        ref = self._now() if now is None else now
        decay = 0.5 ** (max(0.0, ref - at) / self.half_life)
        return float(value * decay / max(1, weight))

    def share(self, want: int, queues: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """``want`` slots dealt one by one to the queue (``(name, weight)``, in the
        worker's order: the first wins a tie) whose score, with the jobs dealt to it so
        far at their mean length, is lowest. Returns ``(queue, count)`` cheapest first."""
        if not queues or want <= 0:
            return []
        now = self._now()
        scores = {name: self.score(name, weight, now) for name, weight in queues}
        weights = dict(queues)
        counts: dict[str, int] = {}
        for _ in range(want):
            name = min(weights, key=lambda q: (scores[q], list(weights).index(q)))
            counts[name] = counts.get(name, 0) + 1
            scores[name] += self.mean.get(name, 0.0) / max(1, weights[name])
        return sorted(counts.items(), key=lambda item: list(weights).index(item[0]))

    # -- learning ----------------------------------------------------------------

    def note(self, queue: str, seconds: float) -> None:
        """A job of ``queue`` ran ``seconds`` here: counted at once (until Redis says)."""
        seconds = max(0.0, float(seconds))
        value, at = self.use.get(queue, (0.0, self._now()))
        self.use[queue] = (value + seconds, at)
        old = self.mean.get(queue)
        self.mean[queue] = seconds if old is None else old + _EWMA * (seconds - old)

    def queue_writes(self, pipe: Any, ended: Iterable[tuple[str, float]]) -> list[str]:
        """Queue ``use.lua`` on ``pipe`` for each (queue, seconds) ended; their queues."""
        names = []
        for queue, seconds in ended:
            self.scripts.use.queue_by_sha(pipe, [self.keys.queue(queue).base],
                                          [f"{max(0.0, seconds):.6f}", self.half_life])
            names.append(queue)
        return names

    def queue_reads(self, pipe: Any, queues: Iterable[str]) -> list[str]:
        """Queue an ``HMGET v t`` of each queue's use on ``pipe``; their names."""
        names = list(queues)
        for queue in names:
            pipe.hmget(self.keys.queue(queue).use, ["v", "t"])
        return names

    def learn(self, written: Sequence[str], read: Sequence[str], answers: Sequence[Any]) -> None:
        """The answers of :meth:`queue_writes` then :meth:`queue_reads` (in that order). A
        failed write (Redis refused, the script not loaded after a restart) or read keeps
        the local value: fair share is a preference, never a reason to lose a job."""
        for queue, reply in zip(written, answers):
            if isinstance(reply, Exception):
                continue
            try:
                self.use[queue] = replies.use(reply)
            except (ValueError, IndexError, TypeError):
                continue
        for queue, reply in zip(read, answers[len(written):]):
            if isinstance(reply, Exception) or not reply or reply[0] is None:
                continue
            try:
                self.use[queue] = (float(reply[0]), float(reply[1]))
            except (ValueError, TypeError):
                continue

    def refresh(self, connection: Any, queues: Sequence[str]) -> None:
        """Read the use of ``queues`` on its own (one round trip); unreachable: kept."""
        try:
            pipe = connection.pipeline(transaction=False)
            read = self.queue_reads(pipe, queues)
            self.learn([], read, pipe.execute(raise_on_error=False))
        except (redis.RedisError, OSError):
            return
