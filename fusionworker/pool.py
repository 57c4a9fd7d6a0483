"""Many jobs at once in one worker (``--concurrency N``): N slots, one fork server.

The worker parent runs up to N horses at once. Each job still gets a fresh
process forked by the fork server, its own death penalty (SIGALRM in the
horse, SIGTERM/SIGKILL of its process group by the parent at timeout +
kill_grace) and its own memory ceiling (``on_horse_tick`` per horse). With
``concurrency = 1`` the worker runs its classic loop (worker.py) unchanged.

The parts, each with one job:

* :class:`PoolState` — the explicit state of the loop: the running slots, the
  jobs that ended and wait to be recorded, whether a claim is wanted.
* :class:`Slot` — one running horse: its job, its deadline, its kill.
* :class:`Recorder` — the finish pipeline: the outcomes of every job that
  ended since the last pass, the worker's counters and its current jobs, and,
  when the loop may claim, the claim of as many jobs as slots are free, in
  ONE round trip. It returns the claimed jobs (nothing is left in a field).
* :class:`Pool` — the claim/dispatch loop: one ``select()`` over the fork
  server's socket (it reports each horse's exit independently), the signal
  wake-up fd and the pub/sub socket (new jobs, suspend/resume), with a timeout
  that is the nearest of: a slot's deadline, a kill escalation, the heartbeat,
  the once-a-second tick, the poll interval.

Crash points (the per-job table of worker.py holds for every slot; what differs):

    1. claim.lua with a count   takes up to ``free`` jobs atomically, each as a
                          single claim would (priority/FIFO, pause, the
                          max_active cap checked before each one). Dies after:
                          every claimed job has a lease nobody renews -> the
                          reaper re-queues each (attempt counted).
    2. spawn              every request is sent before any answer is read; the
                          fork server forks a horse per job. PDEATHSIG chain:
                          parent dies -> fork server dies -> every horse dies.
                          Fork server dies alone -> every horse it forked dies
                          with it (PDEATHSIG); each of their jobs fails as
                          killed (``fork server died``) and a new server is
                          started for the next claim.
    3. heartbeat          one pipeline: touch_many.lua per queue renews the
                          lease of every running job (a 0 for a job: taken
                          back, its horse is killed, the others run on), the
                          heartbeat hash with current_job (the first) and
                          current_jobs (all), the suspend flag. A job that is
                          not listed yet (claimed since the last write) is in
                          the same position as worker.py's lazy busy write: its
                          lease only runs out when the parent stopped touching,
                          and then last_heartbeat is as old.
    4. finish pipeline    finish.lua (or requeue.lua 'return' after a cold
                          shutdown) of every ended job, fenced by its token,
                          counters, current_jobs, then the claims. Redis runs
                          them in order: claimed jobs imply recorded outcomes.
                          Dies after sending: outcomes stand; claimed jobs are
                          step 1's "dies after". Redis unreachable: each
                          outcome is retried on its own with backoff
                          (Worker._record), without claims. Shutdown signalled
                          while it ran: claimed jobs never started and are
                          given back (requeue.lua 'return', attempt not counted).

A horse never outlives its lease, per slot: each slot holds the time its job's
last claim or renewal that reached Redis was SENT, + lease - heartbeat
interval; past it (Redis unreachable, the parent starved) the parent kills that
horse and gives the job back (``lease``, attempt not counted, fenced by the
token), before the reaper may hand the job to another worker. A queue whose
claim Redis refuses (OOM, WRONGTYPE) is backed off alone (Worker._refused).

SIGHUP: the worker starts a new fork server for the next jobs; the old one is
kept until its last horse ended, then closed (closing it at once would kill
its horses: PDEATHSIG), so no running job is dropped.

Shutdown: warm stops claiming and waits for every slot; cold kills every horse
(reason ``shutdown``) and gives every job back unstarted, without counting the
attempt, exactly as a single-slot worker does with its one job.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from .forkserver import ForkServer, ForkServerDied
from .horse import Horse, HorseExit, drain
from .job import Job, encode_fields

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Outcome, Worker

log = logging.getLogger("fusionworker.worker")

UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)

#: Seconds between SIGTERM and SIGKILL of a horse's process group.
KILL_ESCALATION = 2.0


class Slot:
    """One running horse: its job, its hard deadline, its kill."""

    def __init__(self, job: Job, horse: Horse, kill_after: float, lease_until: float) -> None:
        self.job = job
        self.horse = horse
        self.started = time.monotonic()
        self.deadline = self.started + kill_after
        #: a horse never outlives its lease: the time (monotonic) of the last claim or
        #: renewal of this job that reached Redis, + lease - margin (worker.py, horse.py)
        self.lease_until = lease_until
        self.index = 0         # its entry on the worker's deadline board, if there is one
        self.kill_at: float | None = None      # SIGKILL escalation after a SIGTERM
        self.done = False

    @property
    def pid(self) -> int:
        return self.horse.pid

    def kill(self, reason: str) -> None:
        """SIGTERM the horse's group now; SIGKILL follows at :attr:`kill_at` (never blocks)."""
        if self.horse._kill_reason is None:
            self.horse._kill_reason = reason
        if self.kill_at is None:
            self.horse._signal_group(signal.SIGTERM)
            self.kill_at = time.monotonic() + KILL_ESCALATION

    def escalate(self, now: float) -> None:
        if self.kill_at is not None and now >= self.kill_at:
            self.horse._signal_group(signal.SIGKILL)
            self.kill_at = now + KILL_ESCALATION

    def exited(self, msg: dict[str, Any]) -> None:
        """The fork server reported this horse's exit (status and report)."""
        self.horse._buffer.extend(msg.get("report", "").encode())
        self.horse._status = int(msg["status"])
        self.done = True

    def server_died(self) -> None:
        self.horse._lost_server = True
        if self.horse._kill_reason is None:
            self.horse._kill_reason = "killed"
        self.horse._signal_group(signal.SIGKILL)
        self.horse._status = signal.SIGKILL
        self.done = True

    def poll_own(self) -> None:
        """A horse forked by the worker itself (no fork server): read its pipe, reap it."""
        if self.done:
            return
        eof = self.horse._read()
        if eof:
            self.horse._reap(block=True)
        elif not self.horse._reap(block=False):
            return
        else:
            self.horse._read()
        if self.horse._fd >= 0:
            os.close(self.horse._fd)
            self.horse._fd = -1
        self.done = True

    def outcome(self) -> HorseExit:
        # a grandchild may keep the pipe of a killed horse open: the group is killed
        if self.horse._kill_reason is not None:
            self.horse._signal_group(signal.SIGKILL)
        self.horse._kill_leftovers()     # what the job left in its process group
        return self.horse._outcome(time.monotonic() - self.started)


@dataclass
class PoolState:
    """The loop's state, all of it."""

    slots: dict[int, Slot] = field(default_factory=dict)           # by horse pid
    ended: list[tuple[Job, Outcome]] = field(default_factory=list)  # to record
    want_claim: bool = True          # claim at the next chance (wake-up, poll, freed slot)
    next_poll: float = 0.0           # claim again at this time even without a wake-up
    next_slot_tick: float = 0.0
    cold_done: bool = False          # every horse was told to stop (cold shutdown)


class Recorder:
    """The finish pipeline of a worker with many slots."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.sent = 0.0      # when the last pipeline (and the claims in it) was sent

    def record(self, ended: list[tuple[Job, Outcome]], quota: dict[str, int] | None,
               current: list[Job]) -> list[Job]:
        """Record every outcome; claim ``quota`` (queue -> count) in the same round trip.

        Returns the claimed jobs. ``current``: the jobs still running (for the hash).
        """
        w = self.w
        pipe = w.connection.pipeline(transaction=False)
        finish_args: list[list[Any] | None] = []
        counters = {"successful": 0, "failed": 0}
        working = 0.0
        for job, outcome in ended:
            base = w.keys.queue(job.queue).base
            if outcome.status == "requeued":
                w.scripts.requeue.queue_by_sha(pipe, [base], [job.id, "return", job.token or "",
                                                              w.settings.failed_ttl])
                finish_args.append(["requeue", base, job.id, "return", job.token or "",
                                    w.settings.failed_ttl])
            else:
                fields = encode_fields(
                    result=outcome.result, error_type=outcome.error_type,
                    error_message=outcome.error_message, traceback=outcome.traceback,
                    failure_reason=None if outcome.status == "finished" else outcome.reason,
                    duration=round(outcome.duration, 6),
                )
                args = [job.id, job.token or "", outcome.status, w.settings.result_ttl,
                        w.settings.failed_ttl, outcome.retry_delay or 0,
                        w.settings.dedup_window, *fields]
                w.scripts.finish.queue_by_sha(pipe, [base], args)
                finish_args.append(["finish", base, *args])
            name = {"finished": "successful", "failed": "failed"}.get(outcome.status)
            if name:
                counters[name] += 1
            working += outcome.duration
        for name, n in counters.items():
            if n:
                pipe.hincrby(w.key, name, n)
        pipe.hincrbyfloat(w.key, "total_working_time", working)
        pipe.hset(w.key, mapping=current_fields(current, w.state))
        claims = list((quota or {}).items())
        token = uuid.uuid4().hex
        for queue, count in claims:
            w.scripts.claim.queue_by_sha(pipe, [w.keys.queue(queue).base],
                                         [w.name, token, w.lease, w.settings.failed_ttl, count])
        self.sent = time.monotonic()
        try:
            replies = pipe.execute(raise_on_error=False)
            for i, reply in enumerate(replies[:len(ended)]):
                if isinstance(reply, redis.exceptions.NoScriptError):
                    # Redis restarted or failed over: the Script call loads it and runs it once
                    kind, base, *args = finish_args[i]  # type: ignore[misc]
                    replies[i] = getattr(w.scripts, kind)(keys=[base], args=args)
        except UNREACHABLE as exc:
            log.warning("Worker %s: Redis unreachable while recording %d job(s) (%s); "
                        "recording each on its own", w.name, len(ended), exc)
            for job, outcome in ended:
                w._record(job, outcome)
            return []
        for (job, outcome), reply in zip(ended, replies):
            if isinstance(reply, Exception):
                log.error("Worker %s: recording job %s failed: %s; recording it again",
                          w.name, job.id, reply)
                w._record(job, outcome)
                continue
            w.total_working_time += outcome.duration
            if reply[0] in ("stale", "skipped"):
                outcome.recorded = False
                log.warning("Worker %s: outcome of job %s refused: the attempt was taken back "
                            "meanwhile (attempt token no longer current)", w.name, job.id)
                continue
            w._log_outcome(job, outcome)
        claimed: list[Job] = []
        for (queue, _), reply in zip(claims, replies[len(replies) - len(claims):]):
            claimed.extend(parse_claim(w, queue, reply))
        return claimed


def _requeued(exit_: HorseExit) -> Outcome:
    from .worker import Outcome

    return Outcome(status="requeued", reason=exit_.reason, duration=exit_.duration,
                   error_type=exit_.error_type, error_message=exit_.error_message,
                   traceback=exit_.traceback)


def current_fields(current: list[Job], state: str) -> dict[str, Any]:
    """Heartbeat-hash fields naming every running job (``current_job``: the first)."""
    first = current[0] if current else None
    return {"current_job": first.id if first else "",
            "current_queue": first.queue if first else "",
            "current_jobs": ",".join(job.id for job in current),
            "state": "busy" if current else state}


def parse_claim(w: Worker, queue: str, reply: Any) -> list[Job]:
    """The jobs of one claim.lua reply (count form or single)."""
    refused = getattr(w, "_refused", None)    # OOM, WRONGTYPE...: back that queue off
    if (refused is not None and isinstance(reply, redis.ResponseError)
            and not isinstance(reply, redis.exceptions.NoScriptError)):
        refused(queue, reply)
        return []
    if isinstance(reply, Exception) or not reply:
        return []       # e.g. NOSCRIPT after a Redis restart: the loop's claim loads it
    kind = reply[0]
    if kind == "job":
        jobs = []
        for item in reply[2:]:
            if not isinstance(item, list):
                w._log_missing(queue, ["missing", item])
            elif item and isinstance(item[0], list):   # {hash, claimed id}
                data = dict(zip(item[0][::2], item[0][1::2]))
                jobs.append(w._job_from(queue, data, item[1]))
            else:
                jobs.append(w._job_from(queue, dict(zip(item[::2], item[1::2]))))
        return jobs
    if kind == "missing":
        w._log_missing(queue, reply)
    if kind == "limited":
        w._rate_held = True       # jobs wait for a rate-limit slot: a burst worker waits too
    if kind in ("empty", "limited") and reply[1]:   # limited: the next rate-limit slot
        due = float(reply[1])
        w._next_due = due if w._next_due is None else min(w._next_due, due)
    return []


class Pool:
    """The claim/dispatch loop of a worker with ``concurrency`` slots."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.n = worker.concurrency
        self.state = PoolState()
        self.recorder = Recorder(worker)
        self.claim_sent = 0.0
        self.retiring: list[ForkServer] = []     # old fork servers still running horses
        #: the horses' own lease deadlines in shared memory (horse.DeadlineBoard), one entry
        #: per slot, enforced by a watchdog inside each horse; None: the parent alone
        board = getattr(worker, "_board", None)
        self.board = board if board is not None and board.slots >= self.n else None
        self.free_index = list(range(self.n - 1, -1, -1))
        #: renewals are sent every heartbeat; the horse must die a heartbeat before its lease
        self.margin = worker.settings.heartbeat_interval

    # -- claiming --------------------------------------------------------------

    def _quota(self, free: int) -> dict[str, int]:
        """``free`` claims spread over the queues round-robin (weights repeat a queue)."""
        w = self.w
        cycle = w._cycle
        quota: dict[str, int] = {}
        for i in range(free):
            q = cycle[(w._pos + i) % len(cycle)]
            quota[q] = quota.get(q, 0) + 1
        w._pos = (w._pos + free) % len(cycle)
        return quota

    def _claim(self, free: int) -> list[Job]:
        """Claim up to ``free`` jobs: one pipeline of claim.lua calls (one per queue)."""
        w = self.w
        if not w._cycle:
            if any(n == "all" for n, _ in w._spec):
                w._resolve_queues()
            return []
        w._next_due = None
        w._rate_held = False
        jobs: list[Job] = []
        backed_off = getattr(w, "_backed_off", None)   # a queue whose claim Redis refused
        queues = {q for q in w.queue_names if not (backed_off and backed_off(q))}
        for _ in range(len(w.queue_names) + 1):   # queues that ran dry hand over their share
            want = free - len(jobs)
            if want <= 0 or not queues:
                break
            quota = {q: c for q, c in self._quota(want).items() if q in queues}
            if not quota:
                quota = {q: want for q in sorted(queues)[:1]}
            items = list(quota.items())
            token = uuid.uuid4().hex
            self.claim_sent = time.monotonic()
            try:
                pipe = w.connection.pipeline(transaction=False)
                calls = [([w.keys.queue(queue).base],
                          [w.name, token, w.lease, w.settings.failed_ttl, count])
                         for queue, count in items]
                for keys, args in calls:
                    w.scripts.claim.queue_by_sha(pipe, keys, args)
                replies = pipe.execute(raise_on_error=False)
                for i, reply in enumerate(replies):
                    if isinstance(reply, redis.exceptions.NoScriptError):
                        # Redis restarted or failed over: the Script call loads it, runs it once
                        replies[i] = w.scripts.claim(keys=calls[i][0], args=calls[i][1])
            except UNREACHABLE as exc:
                w._redis_down(exc)
                return jobs
            for (queue, count), reply in zip(items, replies):
                got = parse_claim(w, queue, reply)
                jobs.extend(got)
                missing = isinstance(reply, list) and reply and reply[0] == "missing"
                if len(got) < count and not missing:
                    queues.discard(queue)
        return jobs

    def _claim_quota(self, free: int) -> dict[str, int] | None:
        """The claims that may ride in the finish pipeline (``Worker._prefetch_queue``'s
        rules: only when the loop would claim right away anyway)."""
        if free <= 0 or self.w._prefetch_queue() is None:
            return None
        return self._quota(free)

    # -- slots -----------------------------------------------------------------

    def _start(self, jobs: list[Job], sent: float) -> None:
        """Fork a horse for each job (refused jobs end at once, without a fork)."""
        w = self.w
        if w._stop is not None:          # shutdown began meanwhile: never started
            for job in jobs:
                w._give_back(job)
            return
        to_fork: list[tuple[Job, Horse]] = []
        for job in jobs:
            log.info("Worker %s pulled job %s from %s (%s, priority %d, attempt %d)",
                     w.name, job.id, job.queue, job.func, job.priority, job.attempts)
            refusal = w._refusal(job)
            if refusal is not None:
                w._call("after_claim", job)
                self.state.ended.append((job, w._decide(job, refusal)))
                continue
            to_fork.append((job, Horse(job, allowed=w.allowed, retryable=w.settings.retryable,
                                       server=w._forkserver,
                                       kill_children=w.settings.kill_job_children)))
        if not to_fork:
            return
        indexes = [self.free_index.pop() for _ in to_fork]
        for index in indexes:
            self._board_set(index, sent + w.lease - self.margin)
        pids: list[int] | None = None
        server = w._forkserver
        if server is not None:
            if not server.alive:      # died unnoticed: its horses are gone; it restarts
                self._server_died(server)
            try:
                pids = server.spawn_many([job for job, _ in to_fork], indexes)
            except ForkServerDied as exc:
                log.warning("Worker %s: fork server unavailable (%s): forking from the worker",
                            w.name, exc)
                self._server_died(server)
        now = time.monotonic()
        for i, (job, horse) in enumerate(to_fork):
            if pids is not None:
                horse.pid, horse._started = pids[i], now
            else:
                horse.server = None
                self._start_own(horse, indexes[i])
            slot = Slot(job, horse, job.timeout + w.settings.kill_grace,
                        sent + w.lease - self.margin)
            slot.index = indexes[i]
            self.state.slots[horse.pid] = slot
            w._call("after_claim", job)
        self._sync_current()

    def _board_set(self, index: int, deadline: float) -> None:
        if self.board is not None:
            self.board.set(deadline, index)

    @staticmethod
    def _start_own(horse: Horse, index: int) -> None:
        """Fork a horse from the worker itself (no fork server); it watches entry ``index``."""
        from . import horse as horse_mod

        if hasattr(horse_mod, "watch_slot"):
            horse_mod.watch_slot = index       # read by horse_main in the child
        horse.start()

    def _servers(self) -> list[ForkServer]:
        """Every fork server a running horse was forked by (after SIGHUP: old and new)."""
        found: dict[int, ForkServer] = {}
        for slot in self.state.slots.values():
            if slot.horse.server is not None and not slot.done:
                found[id(slot.horse.server)] = slot.horse.server
        return list(found.values())

    def _server_died(self, server: ForkServer) -> None:
        """A fork server is gone: its horses died with it (PDEATHSIG)."""
        exits, _ = server.exits()          # what it reported before it went
        for slot in self.state.slots.values():
            if slot.horse.server is server and not slot.done:
                if slot.pid in exits:
                    slot.exited(exits[slot.pid])
                else:
                    slot.server_died()

    def _collect(self) -> None:
        """Slots whose horse ended -> outcomes waiting to be recorded."""
        w = self.w
        for server in self._servers():
            exits, died = server.exits()
            for pid, msg in exits.items():
                slot = self.state.slots.get(pid)
                if slot is not None and slot.horse.server is server:
                    slot.exited(msg)
            if died:
                self._server_died(server)
        for slot in list(self.state.slots.values()):
            if slot.horse.server is None:
                slot.poll_own()
            if not slot.done:
                continue
            del self.state.slots[slot.pid]
            self._board_set(slot.index, 0.0)
            self.free_index.append(slot.index)
            exit_ = slot.outcome()
            if (not exit_.ok and exit_.reason in ("killed", "lease") and w._stop != "cold"
                    and time.monotonic() >= slot.lease_until):
                # died of the lease: given back (attempt not counted), not failed
                exit_.reason, exit_.error_type = "lease", "LeaseExpired"
                exit_.error_message = ("the worker could not renew the job's lease in time "
                                       "(frozen or cut off from Redis): its horse was killed")
            outcome = (w._decide(slot.job, exit_) if exit_.reason != "lease" else
                       _requeued(exit_))
            outcome.duration = time.monotonic() - slot.started
            self.state.ended.append((slot.job, outcome))

    def _police(self, now: float) -> None:
        """Deadlines, kill escalations, cold shutdown, and the per-horse tick (memory)."""
        w = self.w
        st = self.state
        if w._stop == "cold" and not st.cold_done:
            st.cold_done = True
            for slot in st.slots.values():
                slot.kill("shutdown")
        tick = now >= st.next_slot_tick
        if tick:
            st.next_slot_tick = now + 1.0
        for slot in st.slots.values():
            if now >= slot.deadline and slot.horse._kill_reason is None:
                slot.kill("timeout")
            if (now >= slot.lease_until and slot.horse._kill_reason is None
                    and w._stop != "cold"):
                log.warning("Worker %s: could not renew the lease of job %s in time; killing "
                            "its horse before the reaper may hand the job on", w.name,
                            slot.job.id)
                slot.kill("lease")
            slot.escalate(now)
            if tick and slot.kill_at is None:
                reason = w._call("on_horse_tick", slot.job, slot.pid)
                if reason:
                    slot.kill(reason)

    def _sync_current(self) -> None:
        jobs = [s.job for s in self.state.slots.values()]
        self.w.current_job = jobs[0] if jobs else None
        self.w.current_jobs = jobs
        if jobs:
            self.w.state = "busy"

    # -- heartbeat -------------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew the worker key and, in one pipeline, the lease of every running job."""
        w = self.w
        w._next_heartbeat = time.monotonic() + w.settings.heartbeat_interval
        slots = [s for s in self.state.slots.values() if not s.done]
        by_queue: dict[str, list[Slot]] = {}
        for slot in slots:
            by_queue.setdefault(slot.job.queue, []).append(slot)
        fields: dict[str, Any] = {"last_heartbeat": time.time()}
        fields.update(current_fields([s.job for s in slots], w.state))
        for mw in w.middleware:
            fields.update(mw.describe())
        try:
            pipe = w.connection.pipeline(transaction=False)
            for queue, group in by_queue.items():
                args: list[Any] = [w.lease]
                for slot in group:
                    args += [slot.job.id, slot.job.token or ""]
                w.scripts.touch_many(keys=[w.keys.queue(queue).base], client=pipe, args=args)
            pipe.hset(w.key, mapping=fields)
            pipe.expire(w.key, w.settings.worker_ttl)
            pipe.sadd(w.keys.workers, w.name)
            pipe.exists(w.keys.suspended)
            sent = time.monotonic()
            replies = pipe.execute()
        except UNREACHABLE as exc:
            w._redis_down(exc)
            return
        except redis.ResponseError as exc:   # e.g. OOM: these renewals did not happen
            log.warning("Worker %s: Redis refused the heartbeat (%s)", w.name, exc)
            return
        w._set_suspended(bool(replies[-1]))
        for group, reply in zip(by_queue.values(), replies):
            for slot, owned in zip(group, reply):
                if owned:     # this renewal reached Redis: the horse may live on
                    slot.lease_until = sent + w.lease - self.margin
                    self._board_set(slot.index, slot.lease_until)
                elif slot.horse._kill_reason is None:
                    log.warning("Worker %s: job %s was taken back while running; killing its "
                                "horse", w.name, slot.job.id)
                    slot.kill("lost")
        if any(n == "all" for n, _ in w._spec):
            before = list(w.queue_names)
            w._resolve_queues()
            if w.queue_names != before:
                log.info("Worker %s now serves %s", w.name, ",".join(w.queue_names))
                w._drop_pubsub()

    # -- waiting ---------------------------------------------------------------

    def _pubsub_sock(self) -> Any:
        """The pub/sub socket to select() on, after handling what it already holds."""
        w = self.w
        try:
            pubsub = w._subscribe()
            while True:
                msg = pubsub.get_message(timeout=0)
                if msg is None:
                    break
                self._on_message(msg)
            conn = pubsub.connection
            return conn._sock if conn is not None else None
        except UNREACHABLE as exc:
            w._redis_down(exc)
            return None

    def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "message":
            return
        if msg.get("channel") == self.w.keys.control:
            self.w._on_message(msg)
            self.state.want_claim = True     # resume: claim at once
        else:
            self.state.want_claim = True     # a job was enqueued or promoted

    def _wait(self, free: int) -> None:
        w = self.w
        st = self.state
        now = time.monotonic()
        until = min(w._next_heartbeat, w._next_tick, st.next_slot_tick)
        for slot in st.slots.values():
            until = min(until, slot.deadline if slot.kill_at is None else slot.kill_at,
                        slot.lease_until)
        fds: list[Any] = [w._wake_r] if w._wake_r >= 0 else []
        fds.extend(server.sock for server in self._servers() if server.sock is not None)
        fds.extend(s.horse._fd for s in st.slots.values() if s.horse._fd >= 0)
        sock = None
        if free and w._stop is None:
            until = min(until, st.next_poll)
            sock = self._pubsub_sock()
            if sock is not None:
                fds.append(sock)
            if st.want_claim:
                return
        if st.ended:
            return
        try:
            readable, _, _ = select.select(fds, [], [], max(0.0, until - now))
        except (OSError, ValueError):   # a socket closed under us: go round again
            return
        if w._wake_r in readable:
            drain(w._wake_r)
        if sock is not None and sock in readable:
            self._pubsub_sock()

    def _reload(self) -> None:
        """SIGHUP. When reload() renews the fork server (so that the next jobs import
        changed code), horses still running on the old one must not die with it: the
        old server is kept until its last horse ended, the new one forks the next jobs."""
        w = self.w
        old = w._forkserver
        busy = old is not None and any(s.horse.server is old for s in self.state.slots.values())
        if not (busy and hasattr(w, "_renew_forkserver")):
            w.reload()
            return
        w._forkserver = None          # reload() closes the server it holds: none
        w.reload()
        w._start_forkserver()
        self.retiring.append(old)

    def _retire(self) -> None:
        """Close old fork servers (SIGHUP) once no horse of theirs runs."""
        in_use = {id(server) for server in self._servers()}
        for old in [o for o in self.retiring if id(o) not in in_use]:
            self.retiring.remove(old)
            old.close()

    # -- the loop --------------------------------------------------------------

    def run(self) -> int:
        try:
            return self._run()
        finally:
            for old in self.retiring:
                old.close()

    def _run(self) -> int:
        w = self.w
        st = self.state
        w.current_jobs = []
        while True:
            if w._reload_requested:
                self._reload()
            now = time.monotonic()
            if now >= w._next_heartbeat:
                self.heartbeat()
            if now >= w._next_tick:
                w._next_tick = now + 1.0
                w._call("on_tick")
            self._police(time.monotonic())
            self._collect()
            if self.retiring:
                self._retire()
            if st.ended:
                ended, st.ended = st.ended, []
                free = self.n - len(st.slots)
                quota = self._claim_quota(free)
                current = [s.job for s in st.slots.values()]
                if not current and w.state == "busy":
                    w.state = "idle"
                claimed = self.recorder.record(ended, quota, current)
                for job, outcome in ended:
                    w._call("after_finish", job, outcome)
                if quota is None or len(claimed) >= sum(quota.values()):
                    st.want_claim = True   # not carried, or queues may hold more
                else:
                    st.want_claim = False
                    st.next_poll = time.monotonic() + w.settings.poll_interval
                self._start(claimed, self.recorder.sent)
                self._sync_current()
                continue
            if w._stop is not None and not st.slots:
                break
            free = self.n - len(st.slots)
            if free and w._stop is None and (st.want_claim or time.monotonic() >= st.next_poll):
                jobs: list[Job] = []
                if w._may_claim():
                    jobs = self._claim(free)
                    if len(jobs) < free:
                        st.want_claim = False
                        st.next_poll = time.monotonic() + (
                            w._idle_timeout() if not st.slots and not jobs
                            else w.settings.poll_interval)
                    if not jobs and not st.slots:
                        if w.burst and not getattr(w, "_rate_held", False):
                            log.info("Worker %s: queues empty, burst done", w.name)
                            break
                        w._set_state("idle")
                else:
                    st.want_claim = False
                    st.next_poll = time.monotonic() + w.settings.poll_interval
                if jobs:
                    self._start(jobs, self.claim_sent)
                    continue
            self._wait(free)
        return 0
