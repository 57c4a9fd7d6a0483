"""The heartbeat hash (loop.py, steps 3 and 4): what it says (:func:`view_of`), its
own write, and the heartbeat round trip: the worker key with the job counters
counted since the last heartbeat (counters.py), the queues' per-minute outcome
counts (minutes.py) and, in the same pipeline,
touch_many.lua per queue, which renews the lease of every running job whose
attempt still owns it.

:meth:`Heartbeat.send` only writes and reads: what the answers mean (a lease
renewed, a job taken back, a stop asked, the suspend flag, a shutdown asked of this
worker) is the loop's to decide.

Why the lazy busy write cannot mislead the reaper: the reaper looks only at
jobs whose lease ran out (``started`` score < now), and ``_why_dead`` keeps a
job whose worker hash names it (current_job or current_jobs) with a
last_heartbeat younger than the lease. The lease (default 30 s >= 3 x
heartbeat_interval) is set by the claim and renewed only by touch_many.lua,
sent in the same pipeline as the heartbeat hash that lists every running job
and last_heartbeat. So a job not listed yet ended long before its lease could
run out, unless the parent died or hung (no touch for a whole lease): then
last_heartbeat is at least a lease old too (every write of it while a job runs
comes with a touch), so ``_why_dead`` answers "silent" (or "heartbeat
expired", "now runs nothing") and reaps it: the verdict is the same as with
an eager busy write.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.typing import EncodableT

from ..core.admin import SHUTDOWN_FIELD, shown_state
from ..core.hooks import WorkerContext
from ..core.redis_client import text
from ..core.scripts import replies
from .counters import Counters
from .minutes import MinuteCounts
from .slot import Slot
from .state import LoopState, View

log = logging.getLogger(__name__)

#: Seconds a job runs before the heartbeat hash lists it on its own write (loop.py,
#: step 3); a horse not forked yet is ticked this soon too.
BUSY_AFTER = 0.05


def view_of(st: LoopState, running: Sequence[Slot]) -> tuple[View, dict[EncodableT, Any]]:
    """What the hash should say about the work now (step 3), and the fields that say it."""
    state = st.state(busy=bool(running))
    view = View(state, st.hold or "", tuple(s.job.id for s in running))
    first = running[0] if running else None
    return view, {"state": str(state), "throttle": view.throttle,
                  "current_job": first.job.id if first else "",
                  "current_queue": first.job.queue if first else "",
                  "current_jobs": ",".join(view.jobs),
                  "current_job_started": first.started_at if first else ""}


@dataclass
class Renewal:
    """What a heartbeat that Redis took said."""

    sent: float                          # monotonic time it was sent: leases start later
    #: per running slot: 0 its attempt no longer owns its job, 1 it does, 2 (STOP_ASKED)
    #: it does and its stop was asked
    owned: list[tuple[Slot, int]]
    suspended: bool                      # the deployment-wide suspend flag is set
    #: a stop asked from elsewhere (admin.request_shutdown): 'warm', 'cold' or None
    shutdown: str | None = None


class Heartbeat:
    """Sends the heartbeat pipeline of one worker."""

    def __init__(self, ctx: WorkerContext, scripts: Any, *, lease: float) -> None:
        self.ctx, self.scripts, self.lease = ctx, scripts, lease
        self.key = ctx.keys.worker(ctx.name)
        #: the hash's fields that never change (Worker.identity), written again when a
        #: heartbeat finds the worker gone from ``fw:workers``: Redis restarted empty,
        #: failed over to an empty replica, or the reaper took the worker for dead
        self.identity: Callable[[], dict[EncodableT, Any]] | None = None
        #: when a heartbeat last failed to reach Redis (monotonic; None: the last reached it)
        self.lost_at: float | None = None
        self._rewrite = False          # the identity's last write failed: write it again
        #: the pid its registration names (register): a hash naming another is not its own
        self.pid: str | None = None

    def register(self, identity: dict[EncodableT, Any]) -> None:
        """Check the name is free, then write the heartbeat hash and join ``fw:workers``.
        The registration of another process is a live worker of this name (refused),
        unless it is silent (its last heartbeat older than its lease: it died, and its
        key lives on for ``worker_ttl``): then it is taken over, and said so."""
        conn, name = self.ctx.connection, self.ctx.name
        self.pid = str(identity.get("pid", os.getpid()))
        pid, beat, lease = (text(v) if v is not None else None for v in conn.hmget(
            self.key, "pid", "last_heartbeat", "lease"))
        if pid is not None and pid != self.pid:
            if shown_state({"last_heartbeat": beat or "", "lease": lease or ""},
                           time.time()) != "silent":
                raise ValueError(f"a live worker named {name!r} exists already")
            log.warning("Worker %s: takes over the name of worker pid %s, silent past its "
                        "lease (dead: its jobs are the reaper's)", name, pid)
        now = time.time()
        pipe = conn.pipeline(transaction=False)
        pipe.delete(self.key)
        pipe.hset(self.key, mapping={
            **identity, "state": "started", "current_job": "", "last_heartbeat": now,
            "successful": 0, "failed": 0, "total_working_time": 0.0, "current_jobs": ""})
        pipe.expire(self.key, self.ctx.settings.worker_ttl)
        pipe.sadd(self.ctx.keys.workers, name)
        pipe.execute()

    def deregister(self) -> None:
        """Leave ``fw:workers`` and delete the heartbeat hash, unless another worker of
        this name holds it now (registered while this one was cut off past its lease)."""
        conn = self.ctx.connection
        pid = conn.hget(self.key, "pid")
        if pid is not None and self.pid is not None and text(pid) != self.pid:
            return
        pipe = conn.pipeline(transaction=False)
        pipe.srem(self.ctx.keys.workers, self.ctx.name)
        pipe.delete(self.key)
        pipe.execute()

    def write(self, fields: dict[EncodableT, Any]) -> None:
        """The hash's fields on their own (a state change with no pipeline going anyway);
        raises what Redis raised."""
        pipe = self.ctx.connection.pipeline(transaction=False)
        pipe.hset(self.key, mapping=fields)
        pipe.expire(self.key, self.ctx.settings.worker_ttl)
        pipe.execute()

    def send(self, running: Sequence[Slot], fields: dict[EncodableT, Any],
             counters: Counters, minutes: MinuteCounts) -> Renewal | Exception:
        """Renew every running slot's lease and write ``fields`` and the ``counters``
        not written yet to the hash, and the per-minute outcome counts (``minutes``), in
        one round trip. Raises when Redis is unreachable; returns the refusal (e.g. OOM:
        these renewals did not happen) or the :class:`Renewal`. Counts that did not land
        are given back to ``counters`` and ``minutes``."""
        ctx = self.ctx
        by_queue: dict[str, list[Slot]] = {}
        for slot in running:
            by_queue.setdefault(slot.job.queue, []).append(slot)
        touches = []
        pipe = ctx.connection.pipeline(transaction=False)
        for queue, group in by_queue.items():
            args: list[Any] = [self.lease]
            for slot in group:
                args += [slot.job.id, slot.job.token or ""]
            touches.append(([ctx.keys.queue(queue).base], args))
            self.scripts.touch_many.queue_by_sha(pipe, *touches[-1])
        calls = minutes.queue(pipe)
        pipe.hset(self.key, mapping=fields)
        counted, n_counted = counters.queue(pipe, self.key)
        pipe.expire(self.key, ctx.settings.worker_ttl)
        pipe.sadd(ctx.keys.workers, ctx.name)
        pipe.hget(self.key, SHUTDOWN_FIELD)
        pipe.exists(ctx.keys.suspended)
        pipe.hget(self.key, "pid")       # another worker's: it took the name (register)
        sent = time.monotonic()
        try:
            answers = pipe.execute(raise_on_error=False)
        except Exception:
            counters.give_back(counted)
            minutes.give_back(calls)
            self.lost_at = self.lost_at or sent
            raise
        self._back(answers[-4])
        first = len(touches) + len(calls) + 1          # the counters' answers
        counters.settle(counted, answers[first:first + n_counted])
        # Redis restarted or failed over: the Script call loads it and runs it again
        mine = answers[len(touches):len(touches) + len(calls)]
        minutes.reload(calls, mine)
        answers[len(touches):len(touches) + len(calls)] = mine
        self.scripts.reload_missing(answers, [("touch_many", keys, args)
                                              for keys, args in touches])
        # the chart's counts never make a heartbeat look refused (given back above)
        refused = next((r for i, r in enumerate(answers) if isinstance(r, Exception)
                        and not len(touches) <= i < len(touches) + len(calls)), None)
        if refused is not None:
            return refused
        owned = [(slot, ok) for group, reply in zip(by_queue.values(), answers)
                 for slot, ok in zip(group, replies.touch_many(reply))]
        return Renewal(sent, owned, bool(answers[-2]), self._shutdown(answers[-3], answers[-1]))

    def _shutdown(self, asked: Any, holder: Any) -> str | None:
        """The stop the heartbeat read (``asked``: admin.request_shutdown's), or a warm one
        when the hash names another process (``holder``: another worker of this name
        registered while this one was cut off past its lease, and its jobs were taken
        back)."""
        if holder is not None and self.pid is not None and text(holder) != self.pid:
            log.error("Worker %s: another worker (pid %s) registered this name while this "
                      "one was cut off past its lease (its jobs were taken back): stopping",
                      self.ctx.name, text(holder))
            return "warm"
        return text(asked) if asked else None

    def _back(self, joined: Any) -> None:
        """After a heartbeat Redis took: say so if the one before did not reach it, and
        write the worker's identity again if it was not in ``fw:workers`` (``joined``:
        the SADD's answer, 1). Without it a live worker was listed with no name, no
        queues and no pid, and ``health`` found no worker serving its queues."""
        name = self.ctx.name
        if self.lost_at is not None:
            log.warning("Worker %s: Redis answers again (its heartbeats failed for %.0f s)",
                        name, time.monotonic() - self.lost_at)
            self.lost_at = None
        if (joined == 1 or self._rewrite) and self.identity is not None:
            if not self._rewrite:
                log.warning("Worker %s: its registration was gone from Redis (restarted "
                            "empty, failed over, or the worker taken for dead): written "
                            "again", name)
            try:
                self.write(self.identity())
                self._rewrite = False
            except Exception as exc:  # noqa: BLE001 - the next heartbeat tries again
                self._rewrite = True
                log.warning("Worker %s: its registration could not be written again: %s",
                            name, exc)
