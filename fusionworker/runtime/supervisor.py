"""``worker --processes N``: a supervisor keeping N worker processes alive.

Each child is the ordinary ``worker`` command, started with fork+exec of the
same Python (``python -c 'from fusionworker.cli import main; main()' ...``):
a fresh interpreter, its own Redis connections, its own name (``HOST.PID``, or
``NAME.SLOT`` when ``--name`` was given), nothing inherited but the
environment. The supervisor itself holds no job and runs no job code.

What it does:

* **Restarts** a child that exits (crash, SIGKILL, OOM kill, or a clean exit
  outside burst mode), at most ``max_restarts`` times per ``restart_window``
  seconds per place; beyond that the place waits until the window allows it
  again (logged), so a child that dies at start-up cannot spin.
* **Forwards signals.** The first SIGTERM/SIGINT is forwarded to every child
  (warm shutdown: each finishes its current job, deregisters, exits 0); the
  second is forwarded again (cold shutdown: horses killed, jobs re-queued).
  Children live in their own process groups, so a Ctrl-C in a terminal
  reaches the supervisor only and is not counted twice by the children.
  Children get ``PR_SET_PDEATHSIG=SIGTERM``: if the supervisor is killed,
  they shut down warm instead of running on unsupervised.
* **Exits** when every child has exited after a shutdown (or, in burst mode,
  when every child finished): 0 if every child exited 0, else 1.
* **systemd.** The supervisor is the service's main process: it sends
  ``READY=1`` once every child registered in Redis (its heartbeat hash names
  its pid: a pool whose Redis does not answer never says ready, so systemd's
  start timeout restarts it, as it would a single worker), ``WATCHDOG=1`` while
  its loop turns, ``STATUS=`` ("3/3 worker processes running") and
  ``STOPPING=1``. Children get no ``NOTIFY_SOCKET``/``WATCHDOG_*`` so they never
  speak for the service: the supervisor watches them for it. Under a watchdog
  (``WATCHDOG_USEC``) a child whose heartbeat is older than the watchdog's
  timeout (at least 3 heartbeat intervals + 1 s) has a hung loop: it is
  SIGKILLed (its fork server and horses follow it: PDEATHSIG) and restarted like
  any child that died; the reaper hands its jobs on once their leases end. The
  heartbeats are read once a second, only under systemd; when Redis does not
  answer, nothing is decided.
* When a child died, its heartbeat hash is removed (if it still names the
  dead pid) so ``info`` does not show a ghost; the job it held is recovered
  by the reaper once its lease runs out, as for any dead worker.

Crash safety: if the supervisor dies, its children get SIGTERM (warm
shutdown); no job is lost either way, as each child is a normal worker.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from ..core import admin
from ..middleware.notify import SystemdNotifier

if TYPE_CHECKING:  # pragma: no cover
    from types import FrameType

    from ..core.connection import RedisClient

log = logging.getLogger(__name__)

__all__ = ["Supervisor", "child_command", "child_env"]

_PR_SET_PDEATHSIG = 1
#: Environment a child must not inherit: only the supervisor talks to systemd.
NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
#: Python code a child runs: the ordinary CLI, nothing else.
CHILD_BOOT = "from fusionworker.cli import main; main(prog_name='fusionworker')"


def child_command(cli_args: Sequence[str]) -> list[str]:
    """argv of a child: this Python running the fusionworker CLI with ``cli_args``."""
    return [sys.executable, "-c", CHILD_BOOT, *cli_args]


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The supervisor's environment minus systemd's notification variables."""
    env = dict(os.environ if environ is None else environ)
    for name in NOTIFY_VARS:
        env.pop(name, None)
    return env


def _child_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: children outlive a killed supervisor
        pass


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Place:
    """One of the N places a worker process runs in."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    name: str | None = None
    next_start: float | None = 0.0            # monotonic time of the next (re)start; None = done
    restarts: deque[float] = field(default_factory=deque)
    last_code: int | None = None
    #: the child's last heartbeat seen, and whether it was seen to move: a child is
    #: judged hung only once its loop beat (its start, a fork server loading a model
    #: included, is not judged: systemd's start timeout is for that)
    beat_seen: float | None = None
    beating: bool = False


@dataclass(frozen=True)
class RestartPolicy:
    """How often a place restarts: at most ``max_restarts`` starts per ``window``
    seconds, each ``delay`` seconds after the one before (the first at once)."""

    max_restarts: int = 5
    window: float = 60.0
    delay: float = 0.5

    def next_start(self, restarts: deque[float], now: float) -> tuple[float, bool]:
        """When a place whose recent (re)starts are ``restarts`` (monotonic times; those
        out of the window are dropped) may start again; True: it waits for the window."""
        while restarts and restarts[0] <= now - self.window:
            restarts.popleft()
        if len(restarts) >= self.max_restarts:
            return restarts[0] + self.window, True
        return now + (self.delay if restarts else 0.0), False


class Supervisor:
    """Runs ``processes`` children built by ``command(place)`` until shut down."""

    def __init__(
        self,
        command: Callable[[int], Sequence[str]],
        processes: int,
        *,
        names: Callable[[int, int], str] | None = None,
        env: Mapping[str, str] | None = None,
        burst: bool = False,
        connection: RedisClient | None = None,
        prefix: str = "fw",
        max_restarts: int = 5,
        restart_window: float = 60.0,
        restart_delay: float = 0.5,
        notifier: SystemdNotifier | None = None,
        description: str = "",
        heartbeat_interval: float = 5.0,
        watch: RedisClient | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.command = command
        self.names = names or (lambda place, pid: f"{socket.gethostname()}.{pid}")
        self.env = child_env(env)
        self.burst = burst
        self.connection = connection
        self.prefix = prefix
        self.restart_policy = RestartPolicy(max_restarts, restart_window, restart_delay)
        self.notifier = notifier if notifier is not None else SystemdNotifier.from_env()
        self.description = description
        self.places = [Place(i) for i in range(processes)]
        self.stop_level = 0        # 0 running, 1 warm, 2 cold: signals received
        self._forwarded = 0        # how many of them were forwarded to the children
        self._last_signal = signal.SIGTERM
        self._wake_r = self._wake_w = -1
        self._last_ping: float | None = None
        self._status: str | None = None
        self.failures = 0          # children that exited non-zero during shutdown/burst
        self.heartbeat_interval = heartbeat_interval
        self._ready = False        # READY=1 sent
        self._next_watch = 0.0     # monotonic time of the next read of the heartbeats
        #: the client the heartbeats are read with (a short timeout), else ``connection``
        self.watch = watch if watch is not None else connection
        #: no child is judged hung before this (monotonic): after Redis did not answer,
        #: the children get a whole limit to heartbeat again
        self._judge_after = 0.0

    # -- signals ---------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._last_signal = signal.Signals(signum)
        self.stop_level = min(self.stop_level + 1, 2)

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        """SIGHUP: every child re-reads its config file (governor thresholds, log level)."""
        for place in self.places:
            if place.proc is not None and place.proc.poll() is None:
                try:
                    os.kill(place.proc.pid, signal.SIGHUP)
                except ProcessLookupError:
                    pass

    def _install(self) -> dict[int, Any]:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        old: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, self._on_signal)
        old[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda s, f: None)
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hup)
        return old

    def _uninstall(self, old: dict[int, Any]) -> None:
        signal.set_wakeup_fd(-1)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1

    def request_stop(self) -> None:
        """Begin a warm shutdown (as a first SIGTERM would)."""
        self.stop_level = max(self.stop_level, 1)

    # -- the loop --------------------------------------------------------------

    def run(self) -> int:
        """Start the children, keep them alive, return the exit code after shutdown."""
        old = self._install()
        try:
            self._start_due()
            log.info("Supervisor pid %d started %d worker process(es)%s: pids %s", os.getpid(),
                     len(self.places), f" on {self.description}" if self.description else "",
                     ", ".join(str(s.proc.pid) for s in self.places if s.proc))
            if self.connection is None or self.burst:   # (a burst pool may end before
                self._say_ready()                      # its children all registered)
            self._ping()
            while True:
                self._forward_signals()
                self._reap()
                if all(s.proc is None and s.next_start is None for s in self.places):
                    break
                if not self.stop_level:
                    self._start_due()
                self._ping()
                self._watch_children()
                self._report_status()
                self._sleep(self._timeout())
        finally:
            self._forward_signals()
            self._uninstall(old)
        code = 1 if self.failures else 0
        log.info("Supervisor pid %d: all worker processes exited; exit %d", os.getpid(), code)
        return code

    def _timeout(self) -> float:
        timeout = 1.0
        now = time.monotonic()
        for place in self.places:
            if place.proc is None and place.next_start is not None:
                timeout = min(timeout, max(0.0, place.next_start - now))
        interval = self.notifier.watchdog_interval()
        if interval:
            timeout = min(timeout, interval / 4)
        return timeout

    def _sleep(self, timeout: float) -> None:
        try:
            select.select([self._wake_r], [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
            pass
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _forward_signals(self) -> None:
        while self._forwarded < self.stop_level:
            self._forwarded += 1
            mode = "warm" if self._forwarded == 1 else "cold"
            live = [s for s in self.places if s.proc is not None]
            log.info("Supervisor got %s: %s shutdown of %d worker process(es)%s",
                     self._last_signal.name, mode, len(live),
                     "; send it again for a cold shutdown" if mode == "warm" else "")
            if self._forwarded == 1:
                self.notifier.stopping(f"Supervisor: {mode} shutdown")
            for place in self.places:
                if place.proc is None:
                    place.next_start = None  # waiting for a restart: stays down
                    continue
                try:
                    place.proc.send_signal(self._last_signal)
                except ProcessLookupError:  # exited meanwhile: _reap sees it
                    pass

    def _start_due(self) -> None:
        now = time.monotonic()
        for place in self.places:
            if place.proc is None and place.next_start is not None and place.next_start <= now:
                self._start(place)

    def _start(self, place: Place) -> None:
        argv = list(self.command(place.index))
        place.proc = subprocess.Popen(argv, env=self.env, preexec_fn=_child_setup,  # noqa: PLW1509
                                     close_fds=True)
        place.name = self.names(place.index, place.proc.pid)
        place.next_start = None
        place.beat_seen, place.beating = None, False
        log.debug("Supervisor: place %d runs pid %d (%s)", place.index, place.proc.pid, place.name)

    def _reap(self) -> None:
        for place in self.places:
            if place.proc is None:
                continue
            code = place.proc.poll()
            if code is None:
                continue
            pid, place.proc, place.last_code = place.proc.pid, None, code
            if code != 0:
                self._forget(place, pid)
            if self.stop_level or (self.burst and code == 0):
                if code != 0:
                    self.failures += 1
                    log.warning("Worker process %d (pid %d) %s during shutdown", place.index,
                                pid, describe_exit(code))
                else:
                    log.info("Worker process %d (pid %d) exited", place.index, pid)
                place.next_start = None
                continue
            self._schedule_restart(place, pid, code)

    def _schedule_restart(self, place: Place, pid: int, code: int) -> None:
        now = time.monotonic()
        at, capped = self.restart_policy.next_start(place.restarts, now)
        if capped:
            log.error("Worker process %d (pid %d) %s; restarted %d times in %g s already: "
                      "next start in %.0f s", place.index, pid, describe_exit(code),
                      len(place.restarts), self.restart_policy.window, at - now)
        else:
            log.warning("Worker process %d (pid %d) %s; restarting it", place.index, pid,
                        describe_exit(code))
        place.restarts.append(max(at, now))
        place.next_start = at

    def _forget(self, place: Place, pid: int) -> None:
        if self.connection is None or place.name is None:
            return
        try:
            admin.forget_worker(self.connection, place.name, pid, self.prefix)
        except redis.RedisError as exc:
            log.warning("Supervisor could not remove the heartbeat of dead worker %s: %s",
                        place.name, exc)

    # -- systemd ---------------------------------------------------------------

    def _status_text(self) -> str:
        running = sum(1 for s in self.places if s.proc is not None)
        text = f"Supervisor: {running}/{len(self.places)} worker processes running"
        if self.description:
            text += f" on {self.description}"
        if self.stop_level:
            text += " (shutting down)"
        return text

    def _report_status(self) -> None:
        if not self.notifier.enabled:
            return
        text = self._status_text()
        if text != self._status:
            self._status = text
            self.notifier.status(text)

    def _say_ready(self) -> None:
        self._ready = True
        self.notifier.ready(self._status_text())

    def _watch_children(self) -> None:
        """Under systemd, once a second: READY=1 once every live child registered; under
        its watchdog, SIGKILL a registered child whose heartbeat is too old (module doc)."""
        timeout = self.notifier.watchdog_interval()
        if not self._watch_due(timeout):
            return
        live = {p.name: p for p in self.places if p.proc is not None and p.name is not None}
        limit = max(timeout or 0.0, 3 * self.heartbeat_interval + 1.0)
        beats = self._beats(live)
        if beats is None:            # Redis does not answer: nothing is known of them, and
            self._judge_after = time.monotonic() + limit    # then they get time to beat
            return
        if (not self._ready and not self.stop_level and len(live) == len(self.places)
                and all(beat is not None for beat in beats.values())):
            self._say_ready()        # every place runs a child, and each registered
        if timeout is not None and time.monotonic() >= self._judge_after:
            self._kill_hung(live, beats, limit)

    def _watch_due(self, timeout: float | None) -> bool:
        """A read of the heartbeats is wanted (readiness or a watchdog) and due."""
        now = time.monotonic()
        if (not self.notifier.enabled or self.watch is None
                or (self._ready and timeout is None) or now < self._next_watch):
            return False
        self._next_watch = now + 1.0
        return True

    def _beats(self, live: dict[str, Place]) -> dict[str, float | None] | None:
        """name -> the child's last heartbeat (None: not registered); None: no answer."""
        assert self.watch is not None
        pids = {name: place.proc.pid for name, place in live.items() if place.proc is not None}
        try:
            return admin.worker_beats(self.watch, pids, self.prefix)
        except redis.RedisError:
            return None

    @staticmethod
    def _kill_hung(live: dict[str, Place], beats: dict[str, float | None],
                   limit: float) -> None:
        now = time.time()
        for name, beat in beats.items():
            place = live[name]
            if beat is not None and place.beat_seen is not None and beat != place.beat_seen:
                place.beating = True
            place.beat_seen = beat if beat is not None else place.beat_seen
            if (beat is None or place.proc is None or not place.beating
                    or now - beat <= limit):
                continue
            log.error("Worker process %d (pid %d, %s) sent no heartbeat for %.0f s (the "
                      "watchdog allows %g s): its loop hangs; killed, it is restarted",
                      place.index, place.proc.pid, name, now - beat, limit)
            place.proc.kill()

    def _ping(self) -> None:
        interval = self.notifier.watchdog_interval()
        if interval is None:
            return
        now = time.monotonic()
        if self._last_ping is None or now - self._last_ping >= interval / 2:
            self.notifier.watchdog()
            self._last_ping = now
