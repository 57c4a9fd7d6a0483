"""The worker parent: claim, fork, wait, record. Everything else is middleware.

One job, step by step, and what happens if the parent dies at each step::

    1. claim.lua          job moves pending -> started (lease deadline, token);
                          in steady state it rides at the end of the previous
                          job's finish pipeline (step 5).
                          Dies before: nothing changed. Dies after (or the reply
                          is lost): the job is in `started` with a lease nobody
                          renews -> the reaper re-queues it (attempt counted)
                          once the lease is over.
    2. fork the horse     PR_SET_PDEATHSIG kills the horse with the parent, so a
                          dead parent never leaves a job running unsupervised.
    3. heartbeat hash     state=busy, current_job: written only if the horse
                          still runs at the first horse tick (BUSY_AFTER, 50 ms);
                          a shorter job never writes it, and its finish pipeline
                          then skips the matching state=idle/current_job=''.
    4. supervise          every heartbeat_interval: touch.lua renews the lease
                          and the worker key's TTL. touch.lua answering 0 means
                          the attempt was taken back: the horse is killed, so a
                          job never has two horses.
    5. finish pipeline    finish.lua: outcome recorded, fenced by the token (a
                          late finish of a reaped attempt is refused); the
                          worker counters; then, if the loop may claim (not
                          stopping, no reload, no heartbeat due, not suspended,
                          no middleware holding claims: all known locally
                          before sending), claim.lua of the next job (step 1).
                          Redis runs a pipeline's commands in order, so a
                          claimed next job implies a recorded outcome (on a
                          Cluster: when both queues share a shard).
                          Dies after sending: the outcome stands; the claimed
                          job (if any) is step 1's "dies after". Redis
                          unreachable: the outcome is retried with backoff,
                          without the claim, until it answers (or the lease
                          runs out and the reaper takes over; our late finish
                          is then refused); a claim whose reply was lost is
                          step 1's lost reply. A shutdown signalled while the
                          pipeline ran: the claimed job never started and is
                          given back (requeue.lua 'return', attempt not counted).

Round trips per job in steady state: 1, the finish pipeline that claims the
next job (plus the busy heartbeat for a job longer than BUSY_AFTER, touch
every heartbeat_interval for long jobs, and a claim of its own for the first
job after idling, suspension, throttling or a due heartbeat).

Why the lazy busy write cannot mislead the reaper: the reaper looks only at
jobs whose lease ran out (``started`` score < now), and ``_why_dead`` keeps a
job whose worker hash names it as current_job with a last_heartbeat younger
than the lease. The lease (default 30 s >= 3 x heartbeat_interval) is set by
the claim and renewed only by touch.lua, sent in the same pipeline as the
heartbeat hash that carries current_job and last_heartbeat, and always after
the busy write (first horse tick, 50 ms). So a job that never wrote busy
ended (finish.lua took it out of ``started``) long before its lease could run
out, unless the parent died or hung (no touch for a whole lease): then
last_heartbeat is at least a lease old too (every write of it while a job
runs comes with a touch; the idle-loop heartbeats happen before the claim),
so ``_why_dead`` answers "silent" (or "heartbeat expired", "now runs
nothing") and reaps it: the verdict is the same as with an eager busy write.

Idle waiting: a pub/sub connection subscribed to ``fw:{q}:wake`` of each
queue (published by enqueue/promotion inside the scripts) and to
``fw:control`` (suspend/resume). ``get_message(timeout)`` blocks in select():
no CPU burnt, wake-up within a millisecond, a poll every ``poll_interval``
(or sooner when a scheduled job is due) as the fallback.

Signals: first SIGTERM/SIGINT = warm shutdown (finish the job, deregister,
exit 0); second = cold (kill the horse, give its job back at its original
place without counting the attempt, deregister, exit 0).

N slots (``--concurrency N``, pool.py): the table above holds for each slot.
What changes: step 1 claims up to the number of free slots in one claim.lua
call per queue (same order, cap checked per job); steps 3-4 are one
heartbeat pipeline for all slots (touch_many.lua renews every running job's
lease; current_jobs lists them all, current_job the first); step 5 records
every job that ended since the last pass and carries the claims of the freed
slots. The parent's death kills every horse (PDEATHSIG through the fork
server) and the reaper returns every job. Warm shutdown waits for every
slot; cold kills every horse and gives every job back, attempt not counted.
With N = 1 the loop below runs, unchanged.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from . import __version__
from .config import Settings, load_settings
from .connection import decoding
from .exceptions import FunctionNotAllowed, InvalidFunction
from .forkserver import ForkServer, ForkServerDied
from .functions import verify_loaded
from .horse import DeadlineBoard, Horse, HorseExit, attach_board, kill_leftovers
from .job import Job, MalformedJob, encode_fields
from .keys import Keys, check_queue_name
from .middleware import Middleware
from .queue import known_queues, scripts_for
from .registry import worker_allowed

log = logging.getLogger("fusionworker.worker")

#: Seconds a horse runs before the worker writes state=busy/current_job (first horse tick).
BUSY_AFTER = 0.05

STATES = ("started", "idle", "busy", "suspended", "throttled")

#: What an unreachable (down, restarting, stopped) Redis raises: back off, retry.
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)

#: A refusal that is not an outage (issue 18.3): OOM under maxmemory, WRONGTYPE on a key
#: somebody overwrote. The scripts check before their first write, so a refused script
#: changed nothing. A refused claim backs that queue off (the others are still served);
#: a refused outcome under OOM is retried like an outage; other refusals are logged.
REFUSED = redis.ResponseError

#: Back-off of a queue whose claim Redis refused: first delay, cap (seconds).
QUEUE_BACKOFF = (1.0, 60.0)


def _is_oom(exc: Exception) -> bool:
    """Redis is out of memory (redis-py strips the ``OOM`` prefix into the class)."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or str(exc).startswith("OOM")


@dataclass
class Outcome:
    """What the worker recorded for one attempt."""

    status: str              # finished | retry | failed | requeued (cold shutdown)
    reason: str              # ok | exception | timeout | segfault | crash | killed | exit |
    #                          memory | refused | malformed | lost | shutdown
    duration: float = 0.0
    result: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    retry_delay: float | None = None
    recorded: bool = True    # False: the attempt's token was stale (reaped meanwhile)


class _Interrupted(Exception):  # noqa: N818 - internal control flow, never escapes
    """Raised by the signal handler to leave an idle wait at once."""


def parse_queue_spec(spec: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"sms:3,email"`` -> ``[("sms", 3), ("email", 1)]``; ``all`` stays ``all``."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        name, _, weight = part.partition(":")
        try:
            w = int(weight) if weight else 1
        except ValueError:
            raise ValueError(f"bad weight in {part!r}: expected NAME:INTEGER") from None
        if w < 1:
            raise ValueError(f"weight of {name!r} must be >= 1")
        if name != "all":
            check_queue_name(name)
        out.append((name, w))
    if not out:
        raise ValueError("no queue given")
    return out


def _mismatch(data: dict[str, str], queue: str, claimed_id: str | None) -> str | None:
    """Why a claimed record disagrees with the key it was claimed under, or None.

    A missing field is no disagreement: the claimed id and queue fill it in.
    """
    if claimed_id is not None and data.get("id") not in (None, claimed_id):
        return (f"job record field 'id' ({data.get('id')!r}) disagrees with the claimed "
                f"id {claimed_id!r}")
    if data.get("queue") not in (None, "", queue):
        return (f"job record field 'queue' ({data.get('queue')!r}) disagrees with the queue "
                f"{queue!r} it was claimed from")
    return None


def backoff_delay(settings: Settings, attempt: int, initial: float | None = None) -> float:
    """Delay before retry number ``attempt`` (1-based): initial * backoff^(n-1), capped, jittered."""
    base = settings.retry_delay if initial is None else initial
    delay = min(settings.retry_max_delay, base * settings.retry_backoff ** max(attempt - 1, 0))
    return delay * (1.0 + settings.retry_jitter * random.random())


def default_middleware(settings: Settings) -> list[Middleware]:
    """The middleware every worker runs, in order."""
    from .callbacks import FailureCallbacks
    from .connection import FollowSentinelMaster
    from .cron import CronScheduler
    from .events import EventsMiddleware
    from .governor import build_governors
    from .metrics import MetricsMiddleware
    from .notify import NotifyMiddleware
    from .reaper import ReaperMiddleware
    from .workflows import DependencyMiddleware

    chain: list[Middleware] = [*build_governors(settings), NotifyMiddleware(),
                               ReaperMiddleware(settings), FailureCallbacks(settings),
                               CronScheduler(), DependencyMiddleware()]
    if settings.redis_url.startswith("redis+sentinel"):
        chain.append(FollowSentinelMaster())
    chain.append(EventsMiddleware())
    if settings.metrics_port:
        chain.append(MetricsMiddleware(settings.metrics_port, addr=settings.metrics_bind))
    if settings.otel:
        from .otel import OtelMiddleware

        chain.append(OtelMiddleware(settings))
    return chain


class Worker:
    """A worker parent process serving one or more queues."""

    def __init__(
        self,
        queues: str | Sequence[str],
        connection: Any = None,
        *,
        settings: Settings | None = None,
        name: str | None = None,
        burst: bool = False,
        middleware: Iterable[Middleware] | None = None,
        reload_settings: Callable[[], Settings] | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        #: what jobs may run: FUSIONWORKER_IMPORTS imported, their registered functions
        #: plus the allow-list (functions.py). Neither: ConfigError, one line.
        self.allowed = worker_allowed(self.settings)
        #: SIGHUP calls this for fresh settings (the CLI re-reads its -c file); see reload()
        self._reload_settings = reload_settings
        self._reload_requested = False
        if connection is None:
            from .connection import connect

            connection = connect(self.settings.redis_url)
        self.connection = decoding(connection)   # any redis-py client; replies as str
        connection = self.connection
        self.keys = Keys(self.settings.prefix)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.name = name or f"{self.host}.{self.pid}"
        self.burst = burst
        self._spec = parse_queue_spec(queues)
        self.queue_names: list[str] = []
        self._cycle: list[str] = []
        self._resolve_queues()
        self.scripts = scripts_for(connection)
        self.middleware = list(default_middleware(self.settings) if middleware is None
                               else middleware)
        self.state = "started"
        #: the state the heartbeat hash is known to hold (None: unknown, e.g. a write failed)
        self._published: str | None = None
        self.current_job: Job | None = None
        #: every job running now (a worker with --concurrency N runs up to N; see pool.py)
        self.current_jobs: list[Job] = []
        self.concurrency = int(self.settings.concurrency)
        if self.concurrency < 1:
            raise ValueError(f"FUSIONWORKER_CONCURRENCY ({self.concurrency}) must be at least 1")
        self.successful = 0
        self.failed = 0
        self.total_working_time = 0.0
        self.lease = self.settings.lease
        if self.lease < 3 * self.settings.heartbeat_interval:
            raise ValueError(f"FUSIONWORKER_LEASE ({self.lease:g} s) must be at least 3 x the "
                             f"heartbeat interval ({self.settings.heartbeat_interval:g} s)")
        self._pos = 0
        self._stop: str | None = None           # None | "warm" | "cold"
        self._waiting = False
        self._suspended = False
        self._hold_reason: str | None = None
        self._next_due: float | None = None
        self._rate_held = False  # the last claim round met a rate-limited queue with jobs
        self._next_tick = 0.0
        self._next_heartbeat = 0.0
        self._pubsub: Any = None
        #: the next job, claimed in the finish pipeline of the previous one (see _record)
        self._prefetched: Job | None = None
        self._forkserver: ForkServer | None = None
        self._wake_r = self._wake_w = -1
        #: a horse never outlives its lease (horse.py docstring): the horse's deadline in
        #: shared memory, and when the last claim/renewal that set it was SENT (monotonic)
        self._board: DeadlineBoard | None = None
        self._lease_sent = 0.0
        self._horse_deadline: float | None = None
        #: queue -> (monotonic time until which it is not claimed from, current delay)
        self._queue_backoff: dict[str, tuple[float, float]] = {}

    # -- set-up ----------------------------------------------------------------

    def _resolve_queues(self) -> None:
        names: list[str] = []
        cycle: list[str] = []
        for name, weight in self._spec:
            expanded = (known_queues(self.connection, self.settings.prefix)
                        if name == "all" else [name])
            for q in expanded:
                if q not in names:
                    names.append(q)
                    cycle.extend([q] * weight)
        self.queue_names, self._cycle = names, cycle

    @property
    def key(self) -> str:
        return self.keys.worker(self.name)

    def register(self) -> None:
        """Check the name is free, then write the heartbeat hash and join ``fw:workers``."""
        existing = self.connection.hget(self.key, "pid")
        if existing is not None and existing != str(self.pid):
            raise ValueError(f"a live worker named {self.name!r} exists already")
        now = time.time()
        pipe = self.connection.pipeline(transaction=False)
        pipe.delete(self.key)
        pipe.hset(self.key, mapping={
            "name": self.name, "host": self.host, "pid": self.pid, "birth": now,
            "queues": ",".join(self.queue_names), "state": "started", "current_job": "",
            "last_heartbeat": now, "version": __version__, "successful": 0, "failed": 0,
            "total_working_time": 0.0, "heartbeat_interval": self.settings.heartbeat_interval,
            "lease": self.lease, "concurrency": self.concurrency, "current_jobs": "",
            # the reaper ages heartbeats as worker_ttl - PTTL: Redis time, not our clock
            "worker_ttl": self.settings.worker_ttl,
        })
        pipe.expire(self.key, self.settings.worker_ttl)
        pipe.sadd(self.keys.workers, self.name)
        pipe.execute()
        self._published = "started"
        self._next_heartbeat = 0.0  # the first tick heartbeats: it also reads the suspend flag

    def deregister(self) -> None:
        pipe = self.connection.pipeline(transaction=False)
        pipe.srem(self.keys.workers, self.name)
        pipe.delete(self.key)
        pipe.execute()

    # -- signals ---------------------------------------------------------------

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _restore_signals(self) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._stop is None:
            self._stop = "warm"
            log.info("Worker %s got %s: warm shutdown (finishing the current job; "
                     "send it again for a cold shutdown)", self.name, name)
        else:
            self._stop = "cold"
            log.warning("Worker %s got %s again: cold shutdown", self.name, name)
        if self._waiting:
            raise _Interrupted()

    def _on_hup(self, signum: int, frame: Any) -> None:
        self._reload_requested = True
        if self._waiting:
            raise _Interrupted()

    #: Settings SIGHUP may change in a running worker; the rest need a restart.
    RELOADABLE = ("memory_check_interval", "memory_throttle_threshold",
                  "memory_resume_threshold", "swap_throttle_threshold",
                  "gpu_throttle_threshold", "gpu_resume_threshold", "max_horse_memory",
                  "log_level")

    def reload(self) -> None:
        """Re-read the settings and apply :data:`RELOADABLE` ones (SIGHUP, like nginx)."""
        self._reload_requested = False
        try:
            fresh = self._reload_settings() if self._reload_settings else load_settings()
        except (ValueError, OSError) as exc:  # ConfigError is a ValueError
            log.error("Worker %s: reload failed, keeping the current settings: %s",
                      self.name, exc)
            return
        changes = {name: getattr(fresh, name) for name in self.RELOADABLE
                   if getattr(fresh, name) != getattr(self.settings, name)}
        self.settings = self.settings.replace(**changes)
        logging.getLogger("fusionworker").setLevel(self.settings.log_level.upper())
        log.info("Worker %s reloaded its settings: %s", self.name,
                 ", ".join(f"{k}={v}" for k, v in changes.items()) or "nothing changed")
        self._renew_forkserver()
        self._call("reload", self.settings)

    def _renew_forkserver(self) -> None:
        """SIGHUP: a fresh fork server, so changed job code is seen by the next job.

        The old server preloaded the modules of jobs that ran; a new interpreter
        imports them again from disk. reload() runs between jobs (from _tick,
        never while a horse runs; the finish pipeline claims nothing while a
        reload is pending), so no job is dropped: a running job ended on the old
        server, the next one forks from the new one.
        """
        old, self._forkserver = self._forkserver, None
        if old is None:
            return
        old.close()
        self._start_forkserver()
        log.info("Worker %s: new fork server; the next job imports its code afresh", self.name)

    def request_stop(self, mode: str = "warm") -> None:
        """Ask the loop to stop (from a middleware or a test)."""
        self._stop = mode

    # -- the loop --------------------------------------------------------------

    def work(self) -> int:
        """Run until shut down (or, in burst mode, until the queues are empty). Exit code."""
        self._install_signals()
        try:
            self.register()
            log.info("Worker %s started on queues %s (pid %s, version %s)",
                     self.name, ",".join(self.queue_names) or "-", self.pid, __version__)
            self._warn_eviction()
            self._start_forkserver()
            self._call("on_start")
            self._set_state("idle")
            # N slots: the pool's loop (pool.py); a subclass that runs jobs its own way
            # (testing.InProcessWorker overrides _run_horse) keeps the one-job loop
            if self.concurrency > 1 and type(self)._run_horse is Worker._run_horse:
                from .pool import Pool

                return Pool(self).run()
            while self._stop is None:
                self._tick()
                job, self._prefetched = self._prefetched, None
                if job is not None:          # claimed by the previous job's finish pipeline
                    if self._stop is not None:
                        self._prefetched = job   # _shutdown gives it back
                        break
                    self.perform(job, prefetch=True)
                    continue
                if not self._may_claim():
                    self._wait(self.settings.poll_interval)
                    continue
                job = self._claim_next()
                if job is not None:
                    self.perform(job, prefetch=True)
                elif self.burst and not self._rate_held:  # held jobs are not "empty"
                    log.info("Worker %s: queues empty, burst done", self.name)
                    break
                else:
                    self._set_state("idle")
                    self._wait(self._idle_timeout())
            return 0
        finally:
            self._shutdown()

    def _warn_eviction(self) -> None:
        """Loudly, at start: an evicting maxmemory-policy loses jobs silently (issue 18.5)."""
        from .health import eviction_warning

        try:
            warning = eviction_warning(self.connection)
        except redis.RedisError:
            return
        if warning:
            log.error("Worker %s: %s", self.name, warning)

    def _start_forkserver(self) -> None:
        """Horses are forked by a lean child process (see forkserver.py): cheaper forks."""
        otel = next((mw.horse_tracing() for mw in self.middleware
                     if hasattr(mw, "horse_tracing")), None)   # OpenTelemetry: otel.py
        try:
            self._board = DeadlineBoard(slots=self.concurrency)   # one entry per slot
            attach_board(self._board)      # horses forked by the worker itself inherit it
        except OSError as exc:             # no memfd: the parent's own tick still kills
            log.warning("Worker %s: no shared memory for horse deadlines (%s)", self.name, exc)
        server = ForkServer(self.allowed, self.settings.retryable, otel=otel,
                            board_fd=self._board.fd if self._board is not None else -1)
        try:
            server.start()
        except ForkServerDied as exc:
            log.warning("Worker %s: %s; forking horses from the worker itself", self.name, exc)
            return
        self._forkserver = server

    def _shutdown(self) -> None:
        kill_leftovers(wait=2.0)
        if self._prefetched is not None:   # shutdown began during the finish pipeline
            self._give_back(self._prefetched)
        if self._forkserver is not None:
            self._forkserver.close()
            self._forkserver = None
        self._call("on_stop")
        try:
            self.deregister()
        except redis.RedisError as exc:
            log.warning("Worker %s could not deregister: %s", self.name, exc)
        self._drop_pubsub()
        self._restore_signals()
        log.info("Worker %s stopped (%d finished, %d failed)",
                 self.name, self.successful, self.failed)

    def _call(self, hook: str, *args: Any) -> Any:
        """Run a hook on every middleware; the first non-None answer wins. Never raises."""
        answer = None
        for mw in self.middleware:
            try:
                value = getattr(mw, hook)(self, *args)
            except Exception:  # noqa: BLE001 - a broken middleware must not stop jobs
                log.exception("middleware %s.%s failed", type(mw).__name__, hook)
                continue
            if answer is None and value is not None:
                answer = value
        return answer

    def _tick(self) -> None:
        kill_leftovers()     # what finished jobs left in their process groups (horse.py)
        if self._reload_requested:
            self.reload()
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self.heartbeat()
        if now >= self._next_tick:
            self._next_tick = now + 1.0
            self._call("on_tick")

    def _may_claim(self) -> bool:
        self._drain_control()
        if self._suspended:
            self._set_state("suspended")
            return False
        reason = self._call("before_claim")
        if reason != self._hold_reason:
            self._hold_reason = reason
            self._set_state("throttled" if reason else "idle", force=True)
        return reason is None

    def _claim_next(self) -> Job | None:
        """Try each queue once, round-robin (weights repeat a queue in the cycle)."""
        if not self._cycle:
            if any(n == "all" for n, _ in self._spec):
                self._resolve_queues()
            return None
        tried: set[str] = set()
        self._next_due = None
        self._rate_held = False
        n = len(self._cycle)
        for i in range(n):
            name = self._cycle[(self._pos + i) % n]
            if name in tried:
                continue
            tried.add(name)
            if self._backed_off(name):
                continue
            job = self._claim_from(name)
            if job is not None:
                self._pos = (self._pos + i + 1) % n
                return job
        return None

    def _claim_from(self, queue: str) -> Job | None:
        qkeys = self.keys.queue(queue)
        while True:
            token = uuid.uuid4().hex
            self._lease_sent = time.monotonic()
            try:
                reply = self.scripts.claim(
                    keys=[qkeys.base],
                    args=[self.name, token, self.lease, self.settings.failed_ttl],
                )
            except UNREACHABLE as exc:
                self._redis_down(exc)
                return None
            except REFUSED as exc:
                self._refused(queue, exc)
                return None
            self._queue_backoff.pop(queue, None)
            kind = reply[0]
            if kind == "job":
                data = dict(zip(reply[2][::2], reply[2][1::2]))
                return self._job_from(queue, data, reply[3] if len(reply) > 3 else None)
            if kind == "missing":
                self._log_missing(queue, reply)
                continue
            if kind == "limited":
                self._rate_held = True  # jobs wait for a slot: a burst worker waits too
            if kind in ("empty", "limited") and reply[1]:  # limited: the next rate-limit slot
                due = float(reply[1])
                self._next_due = due if self._next_due is None else min(self._next_due, due)
            return None

    def _backed_off(self, queue: str) -> bool:
        until = self._queue_backoff.get(queue, (0.0, 0.0))[0]
        return time.monotonic() < until

    def _refused(self, queue: str, exc: Exception) -> None:
        """Redis refused a claim on ``queue`` (OOM, WRONGTYPE...): back this queue off,
        doubling up to QUEUE_BACKOFF[1]; the worker goes on with its other queues."""
        delay = min(self._queue_backoff.get(queue, (0.0, QUEUE_BACKOFF[0] / 2))[1] * 2,
                    QUEUE_BACKOFF[1])
        self._queue_backoff[queue] = (time.monotonic() + delay, delay)
        log.error("Worker %s: Redis refused to claim from queue %s (%s); backing this queue "
                  "off for %.0f s", self.name, queue, exc, delay)

    @staticmethod
    def _log_missing(queue: str, reply: list[Any]) -> None:
        log.error("Queue %s held job id %s without a job record: moved to failed",
                  queue, reply[1])

    def _prefetch_queue(self) -> str | None:
        """The queue whose claim may ride in this job's finish pipeline, or None.

        Only when the loop would claim right away anyway, from facts known here
        without a round trip: not stopping, no reload pending, no heartbeat due
        (it reads the suspend flag first), not suspended (pub/sub already read),
        no middleware holding claims. The queue is the one ``_claim_next`` would
        try first (round-robin order unchanged).
        """
        if (self._stop is not None or self._reload_requested or not self._cycle
                or time.monotonic() >= self._next_heartbeat):
            return None
        self._drain_control()
        if self._suspended or self._hold_reason is not None:
            return None
        if self._call("before_claim") is not None:
            return None
        return self._cycle[self._pos % len(self._cycle)]

    def _take_prefetch(self, queue: str, reply: Any) -> None:
        """The claim reply of the finish pipeline: a job to run next, or nothing."""
        if isinstance(reply, REFUSED) and not isinstance(reply, redis.exceptions.NoScriptError):
            self._refused(queue, reply)
            return
        if isinstance(reply, Exception) or not reply:
            return       # e.g. NOSCRIPT after a Redis restart: the loop's claim loads it
        kind = reply[0]
        if kind == "job":
            self._pos = (self._pos + 1) % len(self._cycle)
            self._prefetched = self._job_from(queue, dict(zip(reply[2][::2], reply[2][1::2])),
                                              reply[3] if len(reply) > 3 else None)
        elif kind == "missing":
            self._log_missing(queue, reply)

    def _give_back(self, job: Job) -> None:
        """Shutdown began after the finish pipeline claimed ``job``: it never ran, return it
        at its place without counting the attempt (as a cold shutdown does)."""
        self._prefetched = None
        try:
            self.scripts.requeue(keys=[self.keys.queue(job.queue).base],
                                 args=[job.id, "return", job.token or "",
                                       self.settings.failed_ttl])
        except redis.RedisError as exc:
            log.error("Worker %s: Redis unreachable at shutdown (%s); job %s stays started "
                      "and the reaper will recover it", self.name, exc, job.id)
            return
        log.info("Worker %s: gave job %s back to %s (claimed as shutdown began, not started)",
                 self.name, job.id, job.queue)

    def _job_from(self, queue: str, data: dict[str, str], claimed_id: str | None = None) -> Job:
        """The claimed job. The key we claimed is the truth (issue 18.6): a record whose
        ``id`` or ``queue`` field disagrees with it is failed as malformed, under the
        claimed id and queue, without running."""
        try:
            job = Job.from_hash(data, strict=True)
            mismatch = _mismatch(data, queue, claimed_id)
            if mismatch:
                raise MalformedJob(mismatch)
            return job
        except MalformedJob as exc:
            job = Job.from_hash(data)
            job.error_type, job.error_message = "MalformedJob", str(exc)
            job.failure_reason = "malformed"
        job.queue = queue
        if claimed_id:
            job.id = claimed_id
        return job

    # -- one job ---------------------------------------------------------------

    def perform(self, job: Job, prefetch: bool = False) -> Outcome:
        """Run one claimed job in a horse and record its outcome.

        ``prefetch``: the finish pipeline may claim the next job too (the work loop);
        it is left in ``self._prefetched``.
        """
        self.current_job = job
        log.info("Worker %s pulled job %s from %s (%s, priority %d, attempt %d)",
                 self.name, job.id, job.queue, job.func, job.priority, job.attempts)
        started = time.monotonic()
        exit_ = self._refusal(job)
        if exit_ is None:
            exit_ = self._run_horse(job)
        else:
            self._call("after_claim", job)
        exit_ = self._lease_verdict(exit_)
        self._set_deadline(None)
        outcome = self._decide(job, exit_)
        outcome.duration = time.monotonic() - started
        self._record(job, outcome, claim=self._prefetch_queue() if prefetch else None)
        self.current_job = None
        self._call("after_finish", job, outcome)
        return outcome

    def _run_horse(self, job: Job) -> HorseExit:
        """Run the job in a fresh forked horse and supervise it to its end."""
        horse = Horse(job, allowed=self.allowed,
                      retryable=self.settings.retryable, server=self._forkserver,
                      kill_children=self.settings.kill_job_children)
        # the claim hooks overlap the fork server's fork; the busy heartbeat waits for
        # the first horse tick (BUSY_AFTER): a short job never writes it (docstring)
        self._set_deadline(self._lease_sent)   # before the fork: the horse reads it
        horse.start(while_forking=lambda: self._call("after_claim", job))
        return horse.supervise(
            kill_after=job.timeout + self.settings.kill_grace,
            tick=lambda: self._horse_tick(job, horse),
            # ticks at least every heartbeat: renewals (and the lease check) on time
            tick_interval=min(1.0, self.settings.heartbeat_interval),
            first_tick=BUSY_AFTER,
            wake_fd=self._wake_r if self._wake_r >= 0 else None,
        )

    def _refusal(self, job: Job) -> HorseExit | None:
        """Fail bad jobs without forking: malformed payload, refused module."""
        if job.failure_reason == "malformed":
            return HorseExit(ok=False, reason="malformed", error_type=job.error_type,
                             error_message=job.error_message)
        try:
            verify_loaded(job.func, self.allowed)
        except (FunctionNotAllowed, InvalidFunction) as exc:
            return HorseExit(ok=False, reason="refused", error_type=type(exc).__name__,
                             error_message=str(exc))
        except Exception:  # noqa: BLE001 - a module's own __getattr__ failing: the horse reports it
            return None
        return None

    # -- a horse never outlives its lease (horse.py docstring, issue 18.2) --------

    def _lease_margin(self) -> float:
        return self.settings.heartbeat_interval

    def _set_deadline(self, sent: float | None) -> None:
        """The running horse may live until ``sent`` (when the claim or renewal that reached
        Redis was sent) + lease - margin; None: no horse runs."""
        self._horse_deadline = (None if not sent   # 0: a job not claimed by this loop
                                else sent + self.lease - self._lease_margin())
        if self._board is not None:
            self._board.set(self._horse_deadline or 0.0)

    def _lease_over(self) -> bool:
        deadline = self._horse_deadline
        return deadline is not None and time.monotonic() >= deadline

    def _lease_verdict(self, exit_: HorseExit) -> HorseExit:
        """A horse killed (by its watchdog or our tick) once its deadline passed died of
        the lease: the job is given back, not failed."""
        if (not exit_.ok and exit_.reason in ("killed", "lease") and self._lease_over()
                and self._stop != "cold"):
            exit_.reason, exit_.error_type = "lease", "LeaseExpired"
            exit_.error_message = ("the worker could not renew the job's lease in time (frozen "
                                   "or cut off from Redis): its horse was killed")
        return exit_

    def _horse_tick(self, job: Job, horse: Horse) -> str | None:
        if self._stop == "cold":
            return "shutdown"
        if self.state != "busy":    # first tick: the horse outlived BUSY_AFTER
            self._set_busy(job)
        if time.monotonic() >= self._next_heartbeat:
            if not self.heartbeat(job):
                log.warning("Worker %s: job %s was taken back while running; killing its horse",
                            self.name, job.id)
                return "lost"
        if self._lease_over():
            log.warning("Worker %s: could not renew the lease of job %s in time; killing its "
                        "horse before the reaper may hand the job on", self.name, job.id)
            return "lease"
        self._next_tick = time.monotonic() + 1.0
        self._call("on_tick")
        return self._call("on_horse_tick", job, horse.pid)

    def _decide(self, job: Job, exit_: HorseExit) -> Outcome:
        common = dict(reason=exit_.reason, duration=exit_.duration, error_type=exit_.error_type,
                      error_message=exit_.error_message, traceback=exit_.traceback)
        if exit_.ok:
            return Outcome(status="finished", reason="ok", duration=exit_.duration,
                           result=exit_.result_json)
        if exit_.reason in ("shutdown", "lease"):
            return Outcome(status="requeued", **common)
        if exit_.retryable and job.attempts <= job.max_retries:
            delay = (exit_.retry_delay if exit_.retry_delay is not None
                     else backoff_delay(self.settings, job.attempts, job.retry_delay))
            return Outcome(status="retry", retry_delay=max(0.0, float(delay)), **common)
        return Outcome(status="failed", **common)

    def _record(self, job: Job, outcome: Outcome, claim: str | None = None) -> None:
        """One round trip: the fenced outcome script plus the worker's counters.

        ``claim``: a queue; claim.lua for it ends the same pipeline (after the
        outcome, so a claimed next job implies a recorded outcome); the job it
        returns is left in ``self._prefetched``. Not re-sent after a lost reply.
        """
        qkeys = self.keys.queue(job.queue)
        delay = 0.5
        retrying = False
        while True:
            try:
                if retrying and self._landed(job, outcome):
                    reply = ["ok"]  # the lost reply's write went through: do not count twice
                    break
                pipe = self.connection.pipeline(transaction=False)
                finish_args: list[Any] | None = None
                if outcome.status == "requeued":
                    self.scripts.requeue(keys=[qkeys.base], client=pipe,
                                         args=[job.id, "return", job.token or "",
                                               self.settings.failed_ttl])
                else:
                    fields = encode_fields(
                        result=outcome.result, error_type=outcome.error_type,
                        error_message=outcome.error_message, traceback=outcome.traceback,
                        failure_reason=None if outcome.status == "finished" else outcome.reason,
                        duration=round(outcome.duration, 6),
                    )
                    finish_args = [job.id, job.token or "", outcome.status,
                                   self.settings.result_ttl, self.settings.failed_ttl,
                                   outcome.retry_delay or 0, self.settings.dedup_window, *fields]
                    self.scripts.finish.queue_by_sha(pipe, [qkeys.base], finish_args)
                counter = {"finished": "successful", "failed": "failed"}.get(outcome.status)
                if counter:
                    pipe.hincrby(self.key, counter, 1)
                pipe.hincrbyfloat(self.key, "total_working_time", outcome.duration)
                if self._published != "idle":  # a short job never wrote busy: nothing to undo
                    pipe.hset(self.key, mapping={"current_job": "", "state": "idle"})
                if claim is not None and not retrying:
                    self.scripts.claim.queue_by_sha(
                        pipe, [self.keys.queue(claim).base],
                        [self.name, uuid.uuid4().hex, self.lease, self.settings.failed_ttl])
                if claim is not None and not retrying:
                    self._lease_sent = time.monotonic()
                replies = pipe.execute(raise_on_error=False)
                if claim is not None and not retrying:
                    self._take_prefetch(claim, replies.pop())
                reply = replies[0]
                if finish_args is not None and isinstance(reply, redis.exceptions.NoScriptError):
                    # Redis restarted or failed over: the Script call loads it and runs it once
                    reply = self.scripts.finish(keys=[qkeys.base], args=finish_args)
                    replies[0] = reply
                for value in replies:
                    if isinstance(value, Exception):
                        raise value
                break
            except UNREACHABLE as exc:
                if self._stop == "cold":
                    log.error("Worker %s: Redis unreachable at cold shutdown; job %s stays "
                              "started and the reaper will recover it", self.name, job.id)
                    return
                log.warning("Worker %s: Redis unreachable while recording job %s (%s); "
                            "retrying in %.1f s", self.name, job.id, exc, delay)
                retrying = True
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
            except REFUSED as exc:
                if self._stop == "cold" or not _is_oom(exc):
                    # e.g. WRONGTYPE: retrying cannot help; the job stays started and the
                    # reaper takes it back once its lease is over
                    log.error("Worker %s: Redis refused the outcome of job %s (%s); it stays "
                              "started until the reaper recovers it", self.name, job.id, exc)
                    self.state, self._published = "idle", None
                    return
                log.warning("Worker %s: Redis refused the outcome of job %s (%s); retrying "
                            "in %.1f s", self.name, job.id, exc, delay)
                retrying = True
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        self.state = self._published = "idle"
        self.total_working_time += outcome.duration
        if reply[0] in ("stale", "skipped"):
            outcome.recorded = False
            log.warning("Worker %s: outcome of job %s refused: the attempt was taken back "
                        "meanwhile (attempt token no longer current)", self.name, job.id)
            return
        self._log_outcome(job, outcome)

    def _landed(self, job: Job, outcome: Outcome) -> bool:
        """After a lost reply: did our outcome write reach Redis before the connection broke?

        The scripts drop the token when they record; the job then shows the state
        our outcome gives it, under our worker name (a reaper's re-queue or another
        worker's claim looks different).
        """
        token, worker, status, reason = self.connection.hmget(
            self.keys.queue(job.queue).job(job.id), "token", "worker", "status", "failure_reason")
        if status is None:  # finished with result_ttl 0, or deleted
            return outcome.status == "finished"
        expected = {"finished": "finished", "retry": "scheduled", "failed": "failed",
                    "requeued": "queued"}[outcome.status]
        return (token != job.token and worker == self.name and status == expected
                and (outcome.status != "failed" or reason == outcome.reason))

    def _log_outcome(self, job: Job, outcome: Outcome) -> None:
        ms = outcome.duration * 1000
        if outcome.status == "finished":
            self.successful += 1
            log.info("Worker %s finished job %s in %.1f ms", self.name, job.id, ms)
        elif outcome.status == "retry":
            log.warning("Worker %s: job %s failed (%s: %s); retry %d/%d in %.1f s",
                        self.name, job.id, outcome.error_type, outcome.error_message,
                        job.attempts, job.max_retries, outcome.retry_delay or 0)
        elif outcome.status == "requeued":
            why = ("cold shutdown" if outcome.reason == "shutdown"
                   else "its lease could not be renewed")
            log.warning("Worker %s: job %s interrupted by %s, put back on %s",
                        self.name, job.id, why, job.queue)
        else:
            self.failed += 1
            log.error("Worker %s: job %s failed [%s] %s: %s", self.name, job.id,
                      outcome.reason, outcome.error_type, outcome.error_message)

    # -- heartbeat, state, waiting ---------------------------------------------

    def heartbeat(self, job: Job | None = None) -> bool:
        """Renew the worker key (and the running job's lease). False: the job was lost."""
        self._next_heartbeat = time.monotonic() + self.settings.heartbeat_interval
        fields: dict[str, Any] = {"last_heartbeat": time.time()}
        if job is not None:  # again, in case _set_busy met a Redis outage
            fields["current_job"] = job.id
            self._published = None      # the finish pipeline must write idle again
        for mw in self.middleware:
            try:  # guarded like every other hook (see _call)
                fields.update(mw.describe())
            except Exception:  # noqa: BLE001 - a broken middleware must not stop jobs
                log.exception("middleware %s.describe failed", type(mw).__name__)
        try:
            pipe = self.connection.pipeline(transaction=False)
            if job is not None:
                self.scripts.touch(keys=[self.keys.queue(job.queue).base], client=pipe,
                                   args=[job.id, job.token or "", self.lease])
            sent = time.monotonic()
            pipe.hset(self.key, mapping=fields)
            pipe.expire(self.key, self.settings.worker_ttl)
            pipe.sadd(self.keys.workers, self.name)
            pipe.exists(self.keys.suspended)
            replies = pipe.execute()
        except UNREACHABLE as exc:
            self._redis_down(exc)
            return True
        except REFUSED as exc:   # e.g. OOM: this renewal did not happen; try next interval
            log.warning("Worker %s: Redis refused the heartbeat (%s)", self.name, exc)
            return True
        self._set_suspended(bool(replies[-1]))
        if any(n == "all" for n, _ in self._spec):
            before = list(self.queue_names)
            self._resolve_queues()
            if self.queue_names != before:
                log.info("Worker %s now serves %s", self.name, ",".join(self.queue_names))
                self._drop_pubsub()
        if job is not None and replies[0] == 1:
            self._set_deadline(sent)     # this renewal reached Redis: the horse may live on
        return replies[0] == 1 if job is not None else True

    def _set_state(self, state: str, force: bool = False) -> None:
        if state == self.state and not force:
            return
        self.state = state
        self._published = None
        try:
            self.connection.hset(self.key, mapping={"state": state,
                                                    "throttle": self._hold_reason or ""})
        except UNREACHABLE as exc:
            self._redis_down(exc)
            return
        except REFUSED as exc:
            log.warning("Worker %s: Redis refused the state write (%s)", self.name, exc)
            return
        self._published = state

    def _set_busy(self, job: Job) -> None:
        self.state = "busy"
        self._published = None
        try:
            pipe = self.connection.pipeline(transaction=False)
            pipe.hset(self.key, mapping={"state": "busy", "current_job": job.id,
                                         "current_queue": job.queue,
                                         "current_job_started": time.time()})
            pipe.expire(self.key, self.settings.worker_ttl)
            pipe.execute()
        except UNREACHABLE as exc:
            self._redis_down(exc)
            return
        except REFUSED as exc:
            log.warning("Worker %s: Redis refused the busy write (%s)", self.name, exc)
            return
        self._published = "busy"

    def _set_suspended(self, suspended: bool) -> None:
        if suspended != self._suspended:
            self._suspended = suspended
            log.warning("Worker %s %s", self.name,
                        "suspended: claiming nothing until resumed" if suspended else "resumed")

    def _drop_pubsub(self) -> None:
        old, self._pubsub = self._pubsub, None
        if old is not None:
            try:
                old.close()
            except (redis.RedisError, OSError):
                pass

    def _redis_down(self, exc: Exception) -> None:
        log.warning("Worker %s: Redis unreachable (%s); backing off", self.name, exc)
        self._drop_pubsub()
        if self._stop is None:
            time.sleep(min(self.settings.poll_interval * 2, 5.0))

    def _subscribe(self) -> Any:
        if self._pubsub is None:
            from .connection import new_pubsub_connection

            pubsub = new_pubsub_connection(self.connection, ignore_subscribe_messages=True)
            pubsub.subscribe(self.keys.control,
                             *(self.keys.queue(q).wake for q in self.queue_names))
            self._pubsub = pubsub
        return self._pubsub

    def _drain_control(self) -> None:
        """Read whatever pub/sub already holds (no round trip) for suspend/resume."""
        if self._pubsub is None:
            return
        try:
            while True:
                msg = self._pubsub.get_message(timeout=0)
                if msg is None:
                    return
                self._on_message(msg)
        except UNREACHABLE:
            self._drop_pubsub()

    def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "message" or msg.get("channel") != self.keys.control:
            return
        data = msg.get("data")
        if data == "suspend":
            self._set_suspended(True)
        elif data == "resume":
            self._set_suspended(False)

    def _idle_timeout(self) -> float:
        timeout = self.settings.poll_interval
        if self._next_due is not None:
            try:
                now = self.connection.time()
                server_now = now[0] + now[1] / 1e6
                timeout = min(timeout, max(0.0, self._next_due - server_now))
            except UNREACHABLE:
                pass
        return timeout

    def _wait(self, timeout: float) -> None:
        """Block until a wake-up message, a signal, or ``timeout``; burns no CPU."""
        if self._stop is not None:
            return
        try:
            pubsub = self._subscribe()
        except UNREACHABLE as exc:
            self._redis_down(exc)
            return
        self._waiting = True
        try:
            if self._stop is not None:
                return
            msg = pubsub.get_message(timeout=timeout)
            self._waiting = False
            while msg is not None:
                self._on_message(msg)
                msg = pubsub.get_message(timeout=0)
        except _Interrupted:
            self._drop_pubsub()  # the read may have been cut mid-reply: start afresh
        except UNREACHABLE as exc:
            self._waiting = False
            self._redis_down(exc)
        finally:
            self._waiting = False
