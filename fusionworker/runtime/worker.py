"""The worker: the composition root. Identity, registration, signals, reload.

A :class:`Worker` is what users hold and what the middleware's hooks get (it
implements :class:`~fusionworker.core.hooks.WorkerContext`). It builds the
parts, each in its own module, and hands each its collaborators; no part holds
the worker to call back through it:

* :class:`~.claim.Claimer` (``worker.claimer``): the queues, their order, claim.lua;
* :class:`~.recorder.Recorder` (``worker.recorder``): the finish pipeline, the counters to write;
* :class:`~.progress_store.ProgressRelay` (``worker.progress``): the jobs' progress;
* a launcher (``worker.launcher``, launch.py): how a job gets its process;
* :class:`~.loop.Loop` (``worker.loop``): the claim/dispatch loop over the slots
  (:class:`~.slot.Slot`), with its explicit state (:class:`~.state.LoopState`).

The crash-point analysis of one job is loop.py's docstring.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis
from redis.typing import EncodableT

from .. import __version__
from ..core.config import SETTINGS, Settings, async_hint, async_problem, load_settings
from ..core.connection import decoding
from ..core.functions import forget_loaded
from ..core.hooks import Middleware, Outcome
from ..core.job import Job
from ..core.keys import Keys, check_worker_name
from ..core.logs import setup_default_logging
from ..core.queue import Queue, scripts_for
from ..core.tracing import otel_hint
from ..core.worker_list import WorkerInfo, live_workers
from ..events.middleware import EventsMiddleware
from ..middleware import compose, default_middleware, place
from .claim import Claimer
from .errors import PROBE_INTERVAL, REFUSED, UNREACHABLE, is_oom, wait_reachable
from .fairshare import FairShare
from .gpus import resolve_devices, share_devices
from .hookcalls import HookCalls, StopAtLastClaim
from .imports import worker_allowed
from .launch import ForkServerLauncher, Launcher, LaunchSpec
from .loop import Loop
from .progress_store import ProgressRelay
from .protocol import drain
from .recorder import Recorder
from .state import Stop, View, WorkerState

log = logging.getLogger(__name__)


class Worker:
    """A worker parent process serving one or more queues with ``concurrency`` slots.

    The composition root: it builds the parts and hands each its collaborators (no
    part holds the worker to call back through it) and is what the middleware's
    hooks get (it implements ``core.hooks.WorkerContext``).

    ``queues``: ``"sms:3,email"``, a list of names, or of :class:`~fusionworker.Queue`
    objects (RQ's ``Worker([Queue('high')])``: their connection and settings are used
    when none is given). ``strict``: serve the queues in strict order, as RQ does (a
    job of a later queue only when every earlier one has none ready); False:
    round-robin, weighted by ``name:weight``. Not given: strict for a list of
    :class:`~fusionworker.Queue` objects (RQ's ``Worker([Queue('high'), Queue('low')])``),
    round-robin for names. ``launcher``: how a job gets its process (launch.py; the
    fork server's horses by default). ``middleware``: your hooks, run after the
    built-in ones (:meth:`builtin_middleware`; ``middleware/__init__.py``);
    ``defaults=False`` runs yours alone (tests of the bare loop)."""

    def __init__(
        self,
        queues: str | Sequence[Any],
        connection: Any = None,
        *,
        settings: Settings | None = None,
        name: str | None = None,
        burst: bool = False,
        middleware: Iterable[Middleware] | None = None,
        reload_settings: Callable[[], Settings] | None = None,
        launcher: Callable[[LaunchSpec], Launcher] | None = None,
        strict: bool | None = None,
        defaults: bool = True,
    ) -> None:
        if strict is None:
            strict = not isinstance(queues, str) and any(not isinstance(q, str) for q in queues)
        queues, connection, settings = _from_queue_objects(queues, connection, settings)
        self.settings = settings or load_settings()
        #: what jobs may run: the functions FUSIONWORKER_IMPORTS registers plus the
        #: allow-list (functions.py). Neither: ConfigError, one line. The modules are
        #: imported by a child and the fork server, not here (imports.py), unless the
        #: jobs run in this process (a launcher of the caller's)
        self.allowed = worker_allowed(self.settings, here=launcher is not None
                                      and launcher is not ForkServerLauncher)
        #: SIGHUP calls this for fresh settings (the CLI re-reads its -c file); see reload()
        self._reload_settings = reload_settings
        if connection is None:
            from ..core.connection import connect

            connection = connect(self.settings.redis_url)
        self.connection = decoding(connection)   # any redis-py client; replies as str
        self.keys = Keys(self.settings.prefix)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._birth = time.time()      # the heartbeat's ``birth``, set again at register()
        self.name = f"{self.host}.{self.pid}" if name is None else check_worker_name(name)
        self._slots_and_lease()
        self.scripts = scripts_for(self.connection)
        self.middleware = compose(self.builtin_middleware() if defaults else (),
                                  middleware or ())
        self._wake_r = self._wake_w = -1
        self._build(queues, launcher or ForkServerLauncher, burst, strict)

    def _slots_and_lease(self) -> None:
        """Slots, devices and lease from the settings; ValueError for a bad combination."""
        self.concurrency = int(self.settings.concurrency)
        #: --gpus: the devices its slots own (gpus.py), inherited by its fork server
        self.devices = resolve_devices(self.settings.gpus)
        if self.devices and not self.settings.is_explicit("concurrency"):
            self.concurrency = len(self.devices)      # a GPU per slot
        share_devices(self.devices)
        if self.concurrency < 1:
            raise ValueError(f"FUSIONWORKER_CONCURRENCY ({self.concurrency}) must be at least 1")
        self.lease = self.settings.lease
        if self.lease < 3 * self.settings.heartbeat_interval:
            raise ValueError(f"FUSIONWORKER_LEASE ({self.lease:g} s) must be at least 3 x the "
                             f"heartbeat interval ({self.settings.heartbeat_interval:g} s)")
        problem = async_problem(self.settings)
        if problem:
            raise ValueError(problem)

    def _build(self, queues: str | Sequence[str], launcher: Callable[[LaunchSpec], Launcher],
               burst: bool, strict: bool = False) -> None:
        """The parts, each given what it needs."""
        s = self.settings
        self.hooks = HookCalls(self, self.middleware)
        #: progress/meta the running jobs report (progress_store.py)
        self.progress = ProgressRelay(
            self.scripts, self.keys, name=self.name, interval=s.progress_interval,
            on_progress=lambda job, value, message: self.hooks("on_progress", job, value,
                                                               message))
        fair = (FairShare(self.keys, self.scripts, half_life=s.fair_window)
                if s.queue_order == "fair" else None)
        self.claimer = Claimer(self.connection, self.scripts, self.keys, queues,
                               name=self.name, lease=self.lease, failed_ttl=s.failed_ttl,
                               strict=strict, max_args_bytes=s.max_args_bytes, fair=fair)
        self.claimer.sweep_interval = float(s.poll_interval)
        self.recorder = Recorder(self.connection, self.scripts, self.keys, s, name=self.name,
                                 claimer=self.claimer, is_cold=self._cold)
        #: how a claimed job gets its process (launch.py): the fork server's horses unless
        #: told otherwise (``fusionworker.testing`` runs each job in this process)
        self.launcher = launcher(LaunchSpec(
            allowed=tuple(self.allowed), retryable=tuple(s.retryable),
            entries=self.concurrency, deliver=self.progress.received,
            kill_children=s.kill_job_children, tracing=self._horse_tracing, name=self.name,
            warm=lambda: {"horse_jobs": self.settings.horse_jobs,
                          "max_rss_mib": self.settings.max_horse_memory,
                          "async_per_horse": self.settings.async_per_horse,
                          "slots": self.concurrency},
            imports=lambda: tuple(self.settings.imports),
            result_cap=lambda: self.settings.max_result_bytes,
            log=lambda: (self.settings.log_level, self.settings.log_format)))
        self.loop = Loop(self, self.claimer, self.recorder, self.launcher, self.progress,
                         hooks=self.hooks, scripts=self.scripts, concurrency=self.concurrency,
                         lease=self.lease, burst=burst, allowed=tuple(self.allowed),
                         on_reload=self.reload)
        self.loop.beat.identity = self.identity    # written again if Redis lost it
        self._burst = burst            # the constructor's: a work() without burst= has it

    @staticmethod
    def all(connection: Any = None, *, queue: Any = None,
            settings: Settings | None = None) -> list[WorkerInfo]:
        """RQ's ``Worker.all(connection=r)``: every live worker (of ``queue`` only), read
        from their heartbeats (core/worker_list.py: RQ's names, epoch seconds)."""
        return live_workers(connection, queue=queue, settings=settings)

    @staticmethod
    def count(connection: Any = None, *, queue: Any = None,
              settings: Settings | None = None) -> int:
        """RQ's ``Worker.count(connection=r)``: how many :meth:`all` lists."""
        return len(live_workers(connection, queue=queue, settings=settings))

    def builtin_middleware(self) -> list[Middleware]:
        """The duties and plugins every worker runs (``default_middleware``)."""
        return default_middleware(self.settings)

    def add_middleware(self, mw: Middleware, *, before: type | None = None,
                       after: type | None = None) -> None:
        """Add a hook before ``work()``: at the end, before the first middleware of class
        ``before`` or after the last of class ``after``."""
        place(self.middleware, mw, before=before, after=after)

    def _rearm(self, burst: bool | None) -> None:
        """A later ``work()`` starts afresh (RQ's tests call it again): the last run's stop,
        burst end and slots forgotten, ``burst`` this call's or the constructor's. Jobs a
        run that ended by an exception left running go to the reaper once their leases,
        no longer renewed, end: nothing is signalled (their fork server is closed and
        their pids may be another's by now)."""
        loop = self.loop
        loop.state.rearm()
        loop.burst_done = False
        loop.burst = self._burst if burst is None else burst
        if loop.slots:
            log.warning("Worker %s: its last run ended with %d job(s) running (%s): the "
                        "reaper hands them on once their leases end", self.name,
                        len(loop.slots), ", ".join(s.job.id for s in loop.slots))
            loop.slots.clear()
        loop.free_index.reset(loop.concurrency)

    def _stop_after(self, max_jobs: int | None) -> None:
        """``work(max_jobs=N)``: the claimer claims N jobs at most (however many slots
        are free); with the N-th claimed, a warm stop (the running ones finish). None: no cap
        (a later ``work()`` is not held to an earlier one's)."""
        self.claimer.left = None
        if max_jobs is None:
            return
        if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
            raise ValueError(f"max_jobs must be a whole number of at least 1, "
                             f"not {max_jobs!r}")
        self.claimer.left = max_jobs
        if not any(isinstance(mw, StopAtLastClaim) for mw in self.middleware):
            self.add_middleware(StopAtLastClaim(self.claimer))

    def _cold(self) -> bool:
        return self.loop.state.stop == Stop.COLD

    # -- what it is ----------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.keys.worker(self.name)

    @property
    def burst(self) -> bool:
        """Stop once the queues hold nothing due (``worker --burst``)."""
        return self.loop.burst

    @property
    def successful(self) -> int:
        """Jobs this worker finished (recorded)."""
        return self.recorder.counters.total.successful

    @property
    def failed(self) -> int:
        """Jobs this worker failed for good."""
        return self.recorder.counters.total.failed

    @property
    def total_working_time(self) -> float:
        """Seconds its jobs' attempts took, together."""
        return self.recorder.counters.total.working

    @property
    def queue_names(self) -> QueueNames:
        """The names of the queues it serves: a list, and callable as RQ's method."""
        return QueueNames(self.claimer.queue_names)

    @property
    def queues(self) -> list[Queue]:
        """RQ's: a ``Queue`` of each name it serves (this worker's client and settings)."""
        return [Queue(name, self.connection, settings=self.settings)
                for name in self.claimer.queue_names]

    @property
    def state(self) -> WorkerState:
        """What the worker is now (busy while a horse runs; see state.py)."""
        return self.loop.state.state(busy=bool(self.loop.running()))

    @property
    def hold_reason(self) -> str | None:
        """Why a middleware (the governor) holds claims, or None."""
        return self.loop.state.hold

    @property
    def current_jobs(self) -> list[Job[Any]]:
        """Every job running now (up to ``concurrency``)."""
        return [slot.job for slot in self.loop.running()]

    @property
    def current_job(self) -> Job[Any] | None:
        jobs = self.current_jobs
        return jobs[0] if jobs else None

    # -- registration --------------------------------------------------------------

    def register(self) -> None:
        """Check the name is free, then write the heartbeat hash and join ``fw:workers``
        (heartbeat.py: a silent worker's name is taken over)."""
        self._birth = time.time()
        self.loop.beat.register(self.identity())
        self.loop.state.published = View(WorkerState.STARTED)
        self.loop.state.next_heartbeat = 0.0  # the first turn heartbeats: reads the suspend flag

    def identity(self) -> dict[EncodableT, Any]:
        """The heartbeat hash's fields that never change while the worker lives."""
        return {
            "name": self.name, "host": self.host, "pid": self.pid,
            "birth": self._birth, "queues": ",".join(self.queue_names),
            "version": __version__, "heartbeat_interval": self.settings.heartbeat_interval,
            "lease": self.lease, "concurrency": self.concurrency,
            # the reaper ages heartbeats as worker_ttl - PTTL: Redis time, not our clock
            "worker_ttl": self.settings.worker_ttl,
            # how it picks queues (round-robin, strict, fair) and the GPUs its slots own
            "queue_order": ("strict" if self.claimer.strict else self.settings.queue_order),
            "gpus": ",".join(self.devices)}

    def deregister(self) -> None:
        self.loop.beat.deregister()

    # -- signals ---------------------------------------------------------------------

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        self.loop.wake_fd = self._wake_r
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _restore_signals(self) -> None:
        """The worker stopped: a SIGTERM from now on (systemd or an operator sending it
        again) ends the process with status 0, as the stop it asks for is done."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, _stopped_already)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        self.loop.wake_fd = -1

    def _on_signal(self, signum: int, frame: Any) -> None:
        """The wake-up fd ends the loop's select(); the loop reads the state next turn."""
        name = signal.Signals(signum).name
        st = self.loop.state
        if st.stop is None:
            st.stop = Stop.WARM
            log.info("Worker %s got %s: warm shutdown (finishing the current jobs; "
                     "send it again for a cold shutdown)", self.name, name)
        else:
            st.stop = Stop.COLD
            log.warning("Worker %s got %s again: cold shutdown", self.name, name)

    def _on_hup(self, signum: int, frame: Any) -> None:
        self.loop.state.reload_requested = True

    def request_stop(self, mode: str = "warm") -> None:
        """Ask the loop to stop (from a middleware or a test): ``warm`` or ``cold``."""
        self.loop.state.stop = Stop(mode)

    #: Settings SIGHUP may change in a running worker; the rest need a restart.
    RELOADABLE = ("memory_check_interval", "memory_throttle_threshold",
                  "memory_resume_threshold", "swap_throttle_threshold",
                  "cpu_throttle_threshold", "cpu_resume_threshold",
                  "gpu_throttle_threshold", "gpu_resume_threshold", "max_horse_memory",
                  "log_level", "horse_jobs")

    def reload(self) -> None:
        """Re-read the settings and apply :data:`RELOADABLE` ones (SIGHUP, like nginx);
        a new fork server forks the next jobs (running ones finish on the old one)."""
        self.loop.state.reload_requested = False
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
        kept = [s.env for s in SETTINGS if s.name not in self.RELOADABLE
                and getattr(fresh, s.name) != getattr(self.settings, s.name)]
        if kept:    # said, not dropped without a word
            log.warning("Worker %s: %s changed, and takes effect at a restart only", self.name,
                        ", ".join(kept))
        self.launcher.renew()
        forget_loaded()        # job modules this process imported to check a callback
        self.hooks("reload", self.settings)

    # -- running ---------------------------------------------------------------------

    def work(self, burst: bool | None = None, *, max_jobs: int | None = None,
             with_scheduler: bool | None = None) -> int:
        """Run until shut down (or, in burst mode, until the queues are empty). Exit code.

        ``burst``: as the constructor's (RQ's ``worker.work(burst=True)``). ``max_jobs``
        (RQ's): claim at most that many jobs, then stop warm once they ended.
        ``with_scheduler``: RQ's, accepted and not needed (every worker moves the
        scheduled jobs that fell due). When no
        logging handler is configured, the ``fusionworker`` loggers get the CLI's
        (stderr, ``FUSIONWORKER_LOG_LEVEL``/``_FORMAT``), as RQ's worker does. Redis down
        or refusing at start (a deploy racing a Redis restart, OOM): a worker that is
        not a burst waits for it, like a running worker does, instead of exiting."""
        self._rearm(burst)
        self._stop_after(max_jobs)
        # nothing configured logging (a script calling work()): the CLI's lines on stderr
        setup_default_logging(self.settings.log_level, self.settings.log_format)
        self._install_signals()
        try:
            registered = self._register_when_reachable()
        except BaseException:
            self._restore_signals()      # nothing of ours to undo in Redis: never registered
            raise
        if not registered:
            self._restore_signals()
            log.info("Worker %s stopped before Redis answered", self.name)
            return 0
        try:
            log.info("Worker %s started on queues %s%s (pid %s, version %s)",
                     self.name, ",".join(self.queue_names) or "-",
                     " in strict order" if self.claimer.strict
                     else " by fair share" if self.claimer.fair else "", self.pid, __version__)
            self._warn_eviction()
            for hint in (otel_hint(self.settings.otel), async_hint(self.settings)):
                if hint:
                    log.warning("Worker %s: %s", self.name, hint)
            self.launcher.start()
            self.hooks("on_start")
            self._script_events()
            return self.loop.run()
        finally:
            self._shutdown()

    def _script_events(self) -> None:
        """The job events the worker's scripts write themselves, when its event log
        allows (events/middleware.py): claim.lua's, finish.lua's and progress.lua's."""
        found = [mw for mw in self.middleware if isinstance(mw, EventsMiddleware)]
        events = found[0].script_events(self) if len(found) == 1 else None
        self.claimer.events = self.recorder.events = self.progress.events = events
        if not found and not self.settings.events:
            log.info("Worker %s: event log off (FUSIONWORKER_EVENTS=0)", self.name)
        if events is not None:
            log.info("Worker %s: its claims, progress and outcomes write their events to %s "
                     "themselves", self.name, events.stream)

    def _register_when_reachable(self) -> bool:
        """:meth:`register`, retried while Redis is unreachable or refuses for a passing
        reason (loading, OOM, a read-only replica during a failover): every 0.5 s at
        first, doubling to 30 s, logging each try; sooner once a PING (every 0.25 s)
        answers. False: a signal stopped the wait.

        A wrong password, a name in use or a wrong-typed key are not waited out: they
        raise (the CLI prints them and exits 1). A worker that never registered writes
        nothing on its way out; before this, a refused name deleted the live worker's
        heartbeat hash. A burst worker (a one-shot run) does not wait: it raises."""
        if self.burst:
            self.register()
            return True
        delay = 0.5
        while True:
            try:
                self.register()
                return True
            except (redis.AuthenticationError, redis.exceptions.AuthorizationError):
                raise
            except (*UNREACHABLE, REFUSED) as exc:
                if isinstance(exc, REFUSED) and not _passing(exc):
                    raise
                log.warning("Worker %s: Redis did not take the registration (%s); "
                            "trying again in %.1f s", self.name, exc, delay)
                down = isinstance(exc, UNREACHABLE)    # a refusal (OOM): the whole delay
            if self._wait_for_redis(delay) if down else self._wait_for_signal(delay):
                return False
            delay = min(delay * 2, 30.0)

    def _wait_for_redis(self, seconds: float) -> bool:
        """Wait up to ``seconds``, a PING every PROBE_INTERVAL: on as soon as Redis
        answers, whatever the backoff had grown to. True: a signal said stop."""
        deadline = time.monotonic() + seconds
        while True:
            if self._wait_for_signal(min(PROBE_INTERVAL, max(0.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline or wait_reachable(self.connection, 0.0):
                return False

    def _wait_for_signal(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, woken by a signal (the wake-up fd). True: stop."""
        try:
            readable, _, _ = select.select([self._wake_r], [], [], seconds)
        except InterruptedError:
            readable = []
        if readable:
            drain(self._wake_r)
        return self.loop.state.stop is not None

    def perform(self, job: Job[Any], sent: float = 0.0) -> Outcome:
        """Run one claimed job in a horse and record its outcome (no claim rides).

        ``sent``: when its claim was sent (its lease's start); 0: not known, the
        horse gets no lease deadline of its own. The worker hash's counters and the
        queue's per-minute counts take the outcome with the next :meth:`heartbeat`
        (or at stop)."""
        return self.loop.run_one(job, sent)

    def heartbeat(self) -> bool:
        """Renew the worker key and every running job's lease. False: a job was lost."""
        return self.loop.heartbeat()

    def _warn_eviction(self) -> None:
        """Loudly, at start: an evicting maxmemory-policy loses jobs silently."""
        from ..core.connection import eviction_warning

        try:
            warning = eviction_warning(self.connection)
        except redis.RedisError:
            return
        if warning:
            log.error("Worker %s: %s", self.name, warning)

    def _horse_tracing(self) -> dict[str, Any] | None:
        """OpenTelemetry in the horses (otel.py), asked when a fork server starts."""
        return next((mw.horse_tracing() for mw in self.middleware
                     if hasattr(mw, "horse_tracing")), None)

    def _shutdown(self) -> None:
        self.launcher.close()
        try:     # the counters since the last heartbeat, for on_stop hooks and readers
            self.recorder.counters.flush(self.connection, self.key, self.settings.worker_ttl)
        except redis.RedisError as exc:
            log.warning("Worker %s could not write its counters: %s", self.name, exc)
        try:     # and the queues' per-minute outcome counts (the dashboard's chart)
            self.recorder.minutes.flush(self.connection)
        except redis.RedisError as exc:
            log.warning("Worker %s could not write its outcome counts: %s", self.name, exc)
        self.hooks("on_stop")
        try:
            self.deregister()
        except redis.RedisError as exc:
            log.warning("Worker %s could not deregister: %s", self.name, exc)
        self.loop.drop_pubsub()
        self.loop.stops.drop()
        self._restore_signals()
        log.info("Worker %s stopped (%d finished, %d failed)",
                 self.name, self.successful, self.failed)


#: Refusals that pass: out of memory, a replica that is read-only until a failover
#: finished, a master or cluster that is down for now (redis-py turns each reply's
#: prefix into its class; LOADING is a ConnectionError, so UNREACHABLE already).
_PASSING = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError,
            redis.exceptions.MasterDownError, redis.exceptions.ClusterDownError,
            redis.exceptions.TryAgainError)


def _passing(exc: Exception) -> bool:
    return isinstance(exc, _PASSING) or is_oom(exc)


def _from_queue_objects(queues: str | Sequence[Any], connection: Any,
                        settings: Settings | None) -> tuple[str | list[str], Any,
                                                             Settings | None]:
    """Queue names from ``queues``; a :class:`~fusionworker.Queue` among them (RQ's
    habit) gives its name, and the first one its connection and settings when none
    were given."""
    if isinstance(queues, str):
        return queues, connection, settings
    names: list[str] = []
    for q in queues:
        if isinstance(q, str):
            names.append(q)
            continue
        names.append(q.name)
        if connection is None:
            connection = q.connection
        if settings is None:
            settings = q.settings
    return names, connection, settings


def _stopped_already(signum: int, frame: Any) -> None:
    """SIGTERM after the worker stopped: exit 0 (the process was ending anyway)."""
    raise SystemExit(0)


class QueueNames(list[str]):
    """A worker's queue names: a list, and callable as RQ's ``worker.queue_names()``."""

    def __call__(self) -> list[str]:
        return list(self)
