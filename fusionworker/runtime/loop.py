"""The claim/dispatch loop: claim, fork, wait, record, over ``concurrency`` slots.

One loop for every worker: with ``--concurrency 1`` it has one slot and runs
the same code as with N. One job, step by step, and what happens if the
parent dies at each step (each slot goes through the same steps)::

    1. claim.lua          job moves pending -> started (lease deadline, token);
                          up to ``free`` jobs in one call per queue (count form,
                          each taken as a single claim would: priority/FIFO,
                          pause, the max_active cap checked before each one).
                          In steady state it rides at the end of the previous
                          job's finish pipeline (step 5).
                          Dies before: nothing changed. Dies after (or the reply
                          is lost): every claimed job is in `started` with a
                          lease nobody renews -> the reaper re-queues it
                          (attempt not counted) once the lease is over.
    2. fork the horse     requests go to the fork server, its answers (the pids)
                          are read with the ends, never waited for (launch.py).
                          PDEATHSIG chain: parent dies -> fork server dies ->
                          every horse dies, so a dead parent never leaves a job
                          running unsupervised. The fork server dies alone ->
                          its horses die; their jobs go back uncharged (design.md).
    3. heartbeat hash     state=busy, current_job (the first), current_jobs
                          (all): written only once a job not listed yet still
                          runs BUSY_AFTER (50 ms) after its start, or in a
                          pipeline sent anyway (heartbeat, finish); a shorter
                          job at concurrency 1 never writes it, and its finish
                          pipeline then skips the matching state=idle.
    4. supervise          every heartbeat_interval, one pipeline: touch_many.lua
                          per queue renews the lease of every running job; the
                          worker key's TTL, counts (counters.py, minutes.py). A 0
                          for a job: the attempt was taken back; its horse is
                          killed (the others run on): a job never has two horses.
    5. finish pipeline    finish.lua of every job that ended since the last pass
                          (requeue.lua 'return' for one given back): outcome
                          recorded, fenced by the token (a late finish of a
                          reaped attempt is refused) and counted in memory;
                          the hash's list of running jobs if it changed; then, if
                          the loop may claim (not stopping, no reload, no
                          heartbeat due, not suspended, no middleware holding
                          claims: all known locally before sending), claim.lua
                          for the freed slots (step 1). Redis runs a pipeline's
                          commands in order, so a claimed next job implies a
                          recorded outcome (on a Cluster: when the queues share
                          a shard). The recorder RETURNS the claimed jobs.
                          Dies after sending: the outcomes stand; the claimed
                          jobs are step 1's "dies after". Redis unreachable:
                          each outcome is retried on its own with backoff,
                          without the claims, until it answers (or the lease
                          runs out and the reaper takes over; our late finish
                          is then refused); a claim whose reply was lost is
                          step 1's lost reply. A shutdown signalled while the
                          pipeline ran: the claimed jobs never started and are
                          given back (requeue.lua 'return', attempt not counted).

Round trips per job in steady state at concurrency 1: 1, the finish pipeline that claims
the next job (plus the busy write for a job longer than BUSY_AFTER, the heartbeat every
heartbeat_interval, and a claim of its own for the first job after idling, suspension,
throttling or a due heartbeat). With N slots one finish pipeline records every job that
ended since the last pass.

Why the lazy busy write of step 3 cannot mislead the reaper: heartbeat.py.

A horse never outlives its lease, per slot (slot.py, policing.py, horse/lease.py): the slot's
deadline is the time its job's last claim or renewal that reached Redis was
SENT, + lease - heartbeat interval; past it (Redis unreachable, the parent
starved) the loop kills that horse and gives the job back (``lease``, attempt
not counted, fenced by the token), before the reaper may hand it on. The
same deadline is on the shared deadline board, where the fork server's lease
watchdog (one thread for all its horses) enforces it even while this parent is
frozen; a horse the worker forked itself (no fork server) watches its own
entry. After SIGHUP every fork server maps the same board. A queue whose
claim Redis refuses (OOM, WRONGTYPE) is backed off alone.

Waiting: one ``select()`` over the fork servers' sockets (each horse's exit comes on its
own), the pipes of horses the worker forked itself, the signal wake-up fd, the stop
requests' connection (stops.py) while a job runs, and the pub/sub connection subscribed to
``fw:{q}:wake`` of each queue (published by enqueue/promotion inside the scripts) and
``fw:control`` (suspend/resume), while a slot is free. Its timeout is the nearest of: a
slot's deadline or kill escalation, a busy write due, the heartbeat, the once-a-second
tick, the next poll (``poll_interval``, or sooner when a scheduled job is due). No CPU
burnt; wake-up within a millisecond.

Signals: first SIGTERM/SIGINT = warm shutdown (claim nothing more, let every running job
finish, deregister, exit 0); second = cold (kill every horse, give every job back at its
original place without counting the attempt, deregister, exit 0). SIGHUP: the settings are
read again and a new fork server forks the next jobs; the old one is kept until its last
horse ended, then closed (closing it at once would kill its horses: PDEATHSIG)."""

from __future__ import annotations

import logging
import math
import select
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.typing import EncodableT

from ..core.hooks import Outcome, OutcomeReason, OutcomeStatus, WorkerContext
from ..core.job import FailureReason, Job
from ..core.scripts.replies import STOP_ASKED
from .claim import Claimer, ClaimRound, Plan
from .errors import UNREACHABLE, wait_reachable
from .exits import refusal
from .gpus import FreeEntries
from .heartbeat import BUSY_AFTER as BUSY_AFTER
from .heartbeat import Heartbeat, view_of
from .hookcalls import HookCalls, Once
from .launch import Launcher
from .policing import police_slots
from .progress_store import ProgressRelay
from .protocol import drain
from .recorder import HashState, Recorder, decide
from .slot import Slot
from .solo import Solo
from .state import LoopState, Stop, View
from .stops import StopListener
from .wakeups import Heard, Wakeups

log = logging.getLogger(__name__)


class Loop:
    """The claim/dispatch loop of one worker over ``concurrency`` slots.

    Its collaborators are handed in (runtime/worker.py builds them): ``ctx`` (the
    worker: name, connection, keys, live settings), the claimer, the recorder, the
    launcher, the progress relay, the hooks. ``on_reload`` runs when SIGHUP asked for
    it; ``wake_fd`` (the signal wake-up pipe) is set while the worker's signals are
    installed."""

    def __init__(self, ctx: WorkerContext, claimer: Claimer, recorder: Recorder,
                 launcher: Launcher, relay: ProgressRelay, *, hooks: HookCalls, scripts: Any,
                 concurrency: int, lease: float, burst: bool, allowed: tuple[str, ...],
                 on_reload: Callable[[], None]) -> None:
        self.ctx = ctx
        self.claimer, self.recorder, self.launcher, self.relay = claimer, recorder, launcher, relay
        self.hooks, self.scripts = hooks, scripts
        self.concurrency, self.lease, self.burst, self.allowed = concurrency, lease, burst, allowed
        self.on_reload = on_reload
        self.key = ctx.keys.worker(ctx.name)      # the heartbeat hash
        self.wake_fd = -1
        self.state = LoopState()
        self.slots: list[Slot] = []
        #: entries of the deadline board not held by a running horse
        self.free_index = FreeEntries(concurrency, getattr(ctx, "devices", ()), ctx.middleware)
        self.burst_done = False
        self.wakeups = Wakeups(ctx.connection, ctx.keys, ctx.name, lambda: self.claimer.queue_names)
        self.stops = StopListener(ctx.connection, ctx.keys)
        self.beat = Heartbeat(ctx, scripts, lease=lease)
        self.solo = Solo(ctx, scripts, self.free_index.usable)   # a suspect runs alone
        #: what the last select() found readable: only those servers are read (None: all)
        self._readable: list[Any] | None = []
        #: no slot needs policing before this time (the least ``wakes_at`` of the slots,
        #: as of the last police; lowered by new slots, zeroed by a kill from elsewhere):
        #: at concurrency 100 the loop looks at each slot when one is due, not every turn
        self._police_due = 0.0
        #: the heartbeat hash needs a write of its own (_publish) no sooner than this,
        #: as long as it says what ``_publish_for`` said (its listed jobs)
        self._publish_due = 0.0
        self._publish_for: View | None = None

    @property
    def margin(self) -> float:
        """A horse must die this long before its lease: renewals go every heartbeat."""
        return float(self.ctx.settings.heartbeat_interval)

    def running(self) -> list[Slot]:
        return [s for s in self.slots if not s.done]

    # -- the loop ----------------------------------------------------------------

    def run(self) -> int:
        """Turn until shut down (or, in burst mode, until the queues are empty)."""
        self.state.looping = True
        try:
            self.wakeups.subscribe()
        except UNREACHABLE:
            self.drop_pubsub()      # the first wait subscribes again
        self.stops.sock()           # subscribed before the first job starts
        while self.turn():
            pass
        return 0

    def turn(self) -> bool:
        """One pass: periodic work, police the slots, record what ended (carrying the
        next claims), claim on our own, wait. False: the loop is done. In steady state
        a job takes one pass: its end is recorded, the carried claim's job started, and
        the loop waits for the next end."""
        st = self.state
        self.launcher.tidy()     # what finished jobs left behind (launch.py)
        if st.reload_requested:
            self.on_reload()
        self._periodic()
        ended = self._collect()
        self._police_when_due()
        if ended:
            self._finish(ended)
        if not self.slots and (st.stop is not None or self.burst_done):
            return False
        free = self.solo.free(self.concurrency, self.slots)
        if free and st.stop is None and (st.want_claim or time.monotonic() >= st.next_poll):
            claimed = self._claim(free)
            if claimed.jobs:
                self._start(claimed.jobs, claimed.sent)
                free = self.solo.free(self.concurrency, self.slots)
            elif self.burst_done and not self.slots:   # (suspended: said why in _claim)
                log.info("Worker %s: %s, burst done", self.ctx.name,
                         "suspended" if st.suspended else "queues empty")
                return False
        self._publish()
        self._wait(free)
        return True

    def _police_when_due(self) -> None:
        """Police the slots when one is due (or a cold shutdown has not killed them yet)."""
        st = self.state
        if self.slots:
            now = time.monotonic()
            if now >= self._police_due or (st.stop == Stop.COLD and not st.cold_done):
                self._police(now)

    def run_one(self, job: Job[Any], sent: float) -> Outcome:
        """Run one claimed job in a slot to its end and record it; no claim rides."""
        self._start([job], sent)
        while True:
            self._periodic()
            ended = self._collect()
            if ended:
                break
            self._police(time.monotonic())
            if not self.slots:      # given back: shutdown began
                return Outcome(status=OutcomeStatus.REQUEUED, reason=OutcomeReason.SHUTDOWN)
            self._publish()
            self._wait(0)
        self._record(ended, None)
        for done, outcome in ended:
            self.hooks("after_finish", done, outcome)
        return ended[0][1]

    def _periodic(self) -> None:
        st = self.state
        now = time.monotonic()
        if now >= st.next_heartbeat:
            self.heartbeat()
        if now >= st.next_tick:
            st.next_tick = now + 1.0
            self.hooks("on_tick")
        self.relay.flush_due()      # the jobs' rate-limited progress writes

    # -- claiming ----------------------------------------------------------------

    def _claim(self, free: int) -> ClaimRound:
        """A claim of our own (the loop's, not carried by a finish pipeline)."""
        st = self.state
        if not self._may_claim():
            st.want_claim = False
            # a hook's hold (the governor's) is asked again within a second, as it may
            # lift at its next sample; a suspension ends with a wake-up (state.set_suspended)
            again = self.ctx.settings.poll_interval
            held = st.hold is not None and not st.suspended
            st.next_poll = time.monotonic() + (min(again, 1.0) if held else again)
            if self.burst and st.suspended and not self.slots:   # exits, as RQ's: no hang
                if not self.claimer.nothing_due():
                    log.warning("Worker %s: suspended, a --burst worker exits with jobs still "
                                "queued (resume, then run it again)", self.ctx.name)
                self.burst_done = True
            return ClaimRound()
        claimed = self.claimer.claim(free)
        if claimed.unreachable is not None:
            self.redis_down(claimed.unreachable)
        self._after_claim(claimed)
        return claimed

    def _may_claim(self) -> bool:
        st = self.state
        self._drain_control()
        if st.suspended:
            return False
        st.hold = self.hooks("before_claim")
        return st.hold is None

    def _carried_plan(self, free: int) -> Plan | None:
        """The claims that may ride in this finish pipeline, or None.

        Only when the loop would claim right away anyway, from facts known here
        without a round trip: not stopping, no reload pending, no heartbeat due
        (it reads the suspend flag first), not suspended (pub/sub already read),
        no middleware holding claims. The places are those a claim of our own
        would take first (round-robin order unchanged)."""
        st = self.state
        if (free <= 0 or st.stop is not None or st.reload_requested
                or not self.claimer.cycle or time.monotonic() >= st.next_heartbeat):
            return None
        self._drain_control()
        if st.suspended or st.hold is not None:
            return None
        if self.hooks("before_claim") is not None:
            return None
        return self.claimer.plan(free)

    def _after_claim(self, claimed: ClaimRound, carried: bool = False) -> None:
        """After a claim round: claim again at once, or wait for a wake-up (pub/sub) or
        the poll; a burst worker with nothing left is done. ``carried``: the claim rode
        in a finish pipeline, before the after_finish hooks, which may have made jobs
        ready (a dependent, a batch callback): it cannot end a burst."""
        st = self.state
        if not claimed.short or self.claimer.untried(claimed.dry):
            st.want_claim = True    # the queues may hold more, or some were not asked
            return
        busy = bool(self.slots or claimed.jobs)
        if not busy and self.burst and not self.claimer.rate_held:   # held jobs are not "empty"
            if carried:
                st.want_claim = True      # a claim of our own decides
            else:
                self.burst_done = True
            return
        st.want_claim = False
        # busy, free slots, a time known (rate limit, scheduled job, back-off): claim then
        known = self.claimer.next_due is not None or self.claimer.backoff_end() is not None
        due_matters = not busy or (known and len(self.slots) + len(claimed.jobs)
                                   < self.concurrency)
        poll = float(self.ctx.settings.poll_interval)
        st.next_poll = time.monotonic() + (self.claimer.idle_timeout(poll) if due_matters
                                           else poll)

    # -- recording ---------------------------------------------------------------

    def _finish(self, ended: list[tuple[Job[Any], Outcome]]) -> None:
        """Record what ended; the claims of the freed slots ride in the same round trip."""
        plan = self._carried_plan(self.solo.free(self.concurrency, self.slots))
        claimed = self._record(ended, plan)
        for job, outcome in ended:
            self.hooks("after_finish", job, outcome)
        if plan is None:
            self.state.want_claim = True
        else:
            self._after_claim(claimed, carried=True)
        self._start(claimed.jobs, claimed.sent)

    def _record(self, ended: list[tuple[Job[Any], Outcome]], plan: Plan | None) -> ClaimRound:
        """The recorder's round trip (with the hash's new view when it changed); what it
        says about the hash becomes what the loop knows it says."""
        view = self._view_change()
        recorded = self.recorder.record(ended, plan, view)
        if recorded.hash == HashState.UNKNOWN:
            self.state.published = None
        elif recorded.hash == HashState.WRITTEN and view is not None:
            self.state.published = view[0]
        return recorded.claimed

    # -- slots -------------------------------------------------------------------

    def _start(self, jobs: list[Job[Any]], sent: float) -> None:
        """A slot for each claimed job: a horse, or its end at once (refused)."""
        if not jobs:
            return
        if self.state.stop is not None:      # shutdown began meanwhile: never started
            for job in jobs:
                self.recorder.give_back(job)
            return
        jobs = self.solo.sort(jobs, self.slots)
        lease_until = sent + self.lease - self.margin if sent else math.inf
        slots: list[Slot] = []
        to_fork: list[Job[Any]] = []
        for job in jobs:
            log.info("Worker %s pulled job %s from %s (%s, priority %d, attempt %d)",
                     self.ctx.name, job.id, job.queue, job.func, job.priority, job.attempts)
            refused = refusal(job, self.allowed)
            if refused is None:
                to_fork.append(job)
            else:
                slots.append(Slot.ended(job, refused))
        entries = [self.free_index.pop() for _ in to_fork]
        for entry in entries:
            self.launcher.set_deadline(entry, lease_until)
        hooks = Once(lambda: [self.hooks("after_claim", job) for job in jobs])
        for slot in self.launcher.launch(to_fork, entries, hooks):
            if slot.forked:
                slot.deadline = slot.started + slot.job.timeout + self.ctx.settings.kill_grace
                slot.lease_until = lease_until
                slot.next_tick = slot.started + BUSY_AFTER  # first horse tick: with the busy write
                self._police_due = min(self._police_due, slot.wakes_at())
            slots.append(slot)
        hooks()
        self.slots.extend(slots)
        if slots:     # young now, listed on the hash's write of its own after BUSY_AFTER
            self._publish_due = min(self._publish_due, min(s.started for s in slots) + BUSY_AFTER)

    def _collect(self) -> list[tuple[Job[Any], Outcome]]:
        """Slots whose horse ended -> their outcomes, to be recorded."""
        readable, self._readable = self._readable, []
        self.launcher.poll(readable)
        ended: list[tuple[Job[Any], Outcome]] = []
        running: list[Slot] = []
        cold = self.state.stop == Stop.COLD
        for slot in self.slots:
            if not slot.done:
                running.append(slot)
                continue
            if slot.index >= 0:
                self.launcher.set_deadline(slot.index, 0.0)
                self.free_index.append(slot.index)
            exit_ = slot.outcome(cold=cold)
            outcome = decide(self.ctx.settings, slot.job, exit_)
            outcome.duration = slot.ran_for()   # not the server's start-up, nor our delay
            # the job's last progress/meta ride with its outcome (progress_store.py)
            outcome.progress_fields[:0] = self.relay.final_fields(slot.job, exit_.progress)
            ended.append((slot.job, outcome))
        if ended:
            self.slots = running
        return ended

    def _police(self, now: float) -> None:
        """Deadlines, kill escalations, cold shutdown, and the horse tick (memory ceiling):
        BUSY_AFTER after the horse's start, then every second (or heartbeat, if shorter)."""
        st = self.state
        cold = st.stop == Stop.COLD
        if cold and not st.cold_done:
            st.cold_done = True
            for slot in self.slots:
                slot.kill(FailureReason.SHUTDOWN)
        interval = min(1.0, float(self.ctx.settings.heartbeat_interval))
        self._police_due = police_slots(self.slots, now, interval=interval, cold=cold,
                                        hooks=self.hooks, name=self.ctx.name)

    # -- the heartbeat hash --------------------------------------------------------

    def _view_change(self) -> tuple[View, dict[EncodableT, Any]] | None:
        """The view to write in a pipeline sent anyway, or None when the hash has it."""
        view, fields = view_of(self.state, self.running())
        return None if view == self.state.published else (view, fields)

    def _publish(self) -> None:
        """A write of its own, only when due: a job not listed has run BUSY_AFTER (step 3),
        or, with no job running, the state (idle, suspended, throttled) changed."""
        st = self.state
        if self.slots:
            now = time.monotonic()
            if st.published is self._publish_for and now < self._publish_due:
                return      # nothing unlisted is old enough yet (the scan below said so)
            listed = st.published.listed if st.published is not None else frozenset()
            oldest = min((s.started for s in self.slots
                          if not (s.done or s.job.id in listed)), default=math.inf)
            if oldest > now - BUSY_AFTER:     # every running job listed, or young
                self._publish_due, self._publish_for = oldest + BUSY_AFTER, st.published
                return
        change = self._view_change()
        if change is None:
            return
        view, fields = change
        st.published = None
        try:
            self.beat.write(fields)
        except UNREACHABLE as exc:
            self.redis_down(exc)
            return
        except redis.ResponseError as exc:
            log.warning("Worker %s: Redis refused the state write (%s)", self.ctx.name, exc)
            return
        st.published = view

    def heartbeat(self) -> bool:
        """Renew the worker key and, in one pipeline, the lease of every running job.

        False: a running job was taken back (its horse is being killed)."""
        st = self.state
        st.next_heartbeat = time.monotonic() + self.ctx.settings.heartbeat_interval
        running = [s for s in self.running() if s.forked]
        fields: dict[EncodableT, Any] = {"last_heartbeat": time.time()}
        fields.update(self.hooks.describe())    # guarded like every other hook
        view, current = view_of(st, running)
        fields.update(current)
        try:
            renewal = self.beat.send(running, fields, self.recorder.counters, self.recorder.minutes)
        except UNREACHABLE as exc:
            st.published = None
            self.redis_down(exc)
            return True
        if isinstance(renewal, Exception):     # e.g. OOM: these renewals did not happen
            st.published = None
            log.warning("Worker %s: Redis refused the heartbeat (%s)", self.ctx.name, renewal)
            return True
        st.published = view
        self.state.set_suspended(self.ctx.name, renewal.suspended, renewal.shutdown)
        lost = False
        for slot, owned in renewal.owned:
            if owned:     # this renewal reached Redis: the horse may live on (Slot.renew)
                if not slot.renew(renewal.sent + self.lease - self.margin,
                                  self.launcher.set_deadline):
                    self._police_due = 0.0     # its deadline had passed: it dies of it
                if owned == STOP_ASKED and self.stops.kill([slot], self.ctx.name, missed=True):
                    self._police_due = 0.0
            elif not slot.killed:
                log.warning("Worker %s: job %s was taken back while running (or its record "
                            "lost with Redis's data); killing its horse", self.ctx.name, slot.job.id)
                slot.kill(FailureReason.LOST)
                self._police_due = 0.0     # its SIGKILL escalation is due in time
                lost = True
        if self.claimer.follows_all and self.claimer.resolve():
            log.info("Worker %s now serves %s", self.ctx.name, ",".join(self.claimer.queue_names))
            self.drop_pubsub()
        return not lost

    # -- waiting -------------------------------------------------------------------

    def _wait(self, free: int) -> None:
        """Block in one select() until something is due; burns no CPU."""
        st = self.state
        now = time.monotonic()
        until = self._next_due()
        if any(slot.done for slot in self.slots):
            self._readable = None   # done since _collect (refused; a dead server's): now
            return
        if self.slots:    # a slot's tick (the first: its busy write), kill or escalation
            until = min(until, self._police_due)
        fds: list[Any] = [self.wake_fd] if self.wake_fd >= 0 else []
        fds.extend(self.launcher.waitables())
        fds.extend(stops := self.stops.waitables(bool(self.slots)))
        sock = None
        if free and st.stop is None:
            until = min(until, st.next_poll)
            sock = self._pubsub_sock()
            if sock is not None:
                fds.append(sock)
            if st.want_claim:
                self._readable = fds     # no select(): let the next turn look at every server
                return
        try:
            readable, _, _ = select.select(fds, [], [], max(0.0, until - now))
        except (OSError, ValueError):   # a socket closed under us: look at everything
            self._readable = None
            return
        self._woken(readable, stops, sock)

    def _next_due(self) -> float:
        """The nearest of the heartbeat, the tick and a rate-limited progress write."""
        until = min(self.state.next_heartbeat, self.state.next_tick)
        progress_due = self.relay.next_due()
        return until if progress_due is None else min(until, progress_due)

    def _woken(self, readable: list[Any], stops: list[Any], sock: Any) -> None:
        """What select() found readable: the signal pipe drained, stop requests acted
        on, pub/sub read; the servers' sockets are read by the next turn."""
        self._readable = readable
        if self.wake_fd >= 0 and self.wake_fd in readable:
            drain(self.wake_fd)
        if stops and stops[0] in readable and self.stops.kill(self.slots, self.ctx.name):
            self._police_due = 0.0      # the SIGKILL escalation is due in time
        if sock is not None and sock in readable:
            self._pubsub_sock()

    def drop_pubsub(self) -> None:
        """Close pub/sub; wake-ups may be missed until it is back: claim from every queue."""
        self.wakeups.drop()      # no longer confirmed: _heard, before any claim, disarms
        self.state.want_claim = True

    def _pubsub_sock(self) -> Any:
        """The pub/sub socket to select() on, after handling what it already holds."""
        heard = Heard()
        try:
            sock = self.wakeups.sock(heard)
        except UNREACHABLE as exc:
            sock = None
            self.redis_down(exc)
        self._heard(heard)
        return sock

    def _drain_control(self) -> None:
        """Read whatever pub/sub already holds (no round trip): suspend/resume, wake-ups."""
        heard = Heard()
        if not self.wakeups.drain(heard):
            self.state.want_claim = True
        self._heard(heard)

    def _heard(self, heard: Heard) -> None:
        if heard.shutdown:
            self.state.next_heartbeat = 0.0     # it reads what was asked (design.md)
        if heard.suspended is not None:
            self.state.set_suspended(self.ctx.name, heard.suspended)
        if heard.wake:
            self.state.want_claim = True     # a job was enqueued or promoted; or resumed
            self.claimer.wake(None if heard.every else heard.queues)
        self.claimer.armed = self.wakeups.confirmed and not self.burst   # quiet queues

    def redis_down(self, exc: Exception) -> None:
        log.warning("Worker %s: Redis unreachable (%s); backing off", self.ctx.name, exc)
        self.beat.lost_at = self.beat.lost_at or time.monotonic()   # heartbeat.py says when back
        self.drop_pubsub()
        if self.state.stop is None:     # a PING every 0.25 s: on as soon as it answers
            wait_reachable(self.ctx.connection, min(self.ctx.settings.poll_interval * 2, 5.0))
