"""systemd notification (``sd_notify``) without dependencies, and its middleware.

With ``Type=notify`` systemd passes ``NOTIFY_SOCKET`` (a path, or ``@name``
for the abstract namespace) and, with ``WatchdogSec=``, ``WATCHDOG_USEC`` and
``WATCHDOG_PID``. The worker then says ``READY=1`` when it takes jobs,
``WATCHDOG=1`` while its loop is healthy, ``STOPPING=1`` when it shuts down,
and a one-line ``STATUS=`` shown by ``systemctl status``.

Outside systemd every call is a no-op. Sending never raises and never blocks
the worker for long: a failure is logged once at DEBUG and otherwise ignored
(systemd notification is observability, not work).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..core.hooks import Middleware

if TYPE_CHECKING:  # pragma: no cover
    from ..core.hooks import WorkerContext

__all__ = ["NotifyMiddleware", "SystemdNotifier"]

log = logging.getLogger("fusionworker.notify")   # the name before the layers (logging configs use it)

#: Longest a datagram send may wait (the notify socket is local; this only
#: matters if systemd stopped reading it).
SEND_TIMEOUT = 0.5


class SystemdNotifier:
    """Sends ``sd_notify`` datagrams to ``address`` (``None``: do nothing)."""

    def __init__(
        self,
        address: str | None,
        watchdog_usec: str | None = None,
        watchdog_pid: str | None = None,
    ) -> None:
        self.address = self._socket_address(address)
        self._watchdog_usec = watchdog_usec
        self._watchdog_pid = watchdog_pid
        self._failed_once = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SystemdNotifier:
        """A notifier configured from ``NOTIFY_SOCKET``, ``WATCHDOG_USEC``, ``WATCHDOG_PID``."""
        env = os.environ if environ is None else environ
        return cls(env.get("NOTIFY_SOCKET"), env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID"))

    @staticmethod
    def _socket_address(address: str | None) -> str | None:
        if not address:
            return None
        if address.startswith("@"):
            return "\0" + address[1:]
        if address.startswith("/"):
            return address
        # systemd also knows vsock: addresses (VMs); we do not, and a relative
        # path is invalid for sd_notify too.
        log.debug("NOTIFY_SOCKET %r is not supported; systemd notification is off", address)
        return None

    @property
    def enabled(self) -> bool:
        """True when running under systemd with a notify socket."""
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` (``"KEY=value"``) as one datagram. True if it was sent."""
        if self.address is None or not fields:
            return False
        payload = "\n".join(fields).encode("utf-8", errors="replace")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(SEND_TIMEOUT)
                sock.sendto(payload, self.address)
        except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL in a path
            if not self._failed_once:
                self._failed_once = True
                log.debug("systemd notification to %r failed: %s (further failures not logged)",
                          self.address.replace("\0", "@"), exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """``READY=1`` (and ``STATUS=``): the service is up and taking work."""
        fields = ["READY=1"]
        if status:
            fields.append(_status_field(status))
        return self.notify(*fields)

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the main loop is alive."""
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        """``STOPPING=1`` (and ``STATUS=``): a shutdown has begun."""
        fields = ["STOPPING=1"]
        if status:
            fields.append(_status_field(status))
        return self.notify(*fields)

    def status(self, text: str) -> bool:
        """``STATUS=<text>``: one line shown by ``systemctl status``."""
        return self.notify(_status_field(text))

    def watchdog_interval(self) -> float | None:
        """The watchdog timeout in seconds, or ``None`` if no watchdog applies to this process.

        As ``sd_watchdog_enabled()``: ``WATCHDOG_USEC`` must be a positive
        integer, and when ``WATCHDOG_PID`` is set it must be this process's
        pid (evaluated at call time, so a forked child sees ``None``).
        """
        if self.address is None or not self._watchdog_usec:
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        if usec <= 0:
            return None
        if self._watchdog_pid:
            try:
                if int(self._watchdog_pid) != os.getpid():
                    return None
            except ValueError:
                return None
        return usec / 1_000_000


def _status_field(text: str) -> str:
    return "STATUS=" + " ".join(text.split())


def describe_worker(worker: WorkerContext) -> str:
    """A one-line status of ``worker`` for ``systemctl status``."""
    name = getattr(worker, "name", None) or f"pid {os.getpid()}"
    queues = getattr(worker, "queues", None) or getattr(worker, "queue_names", None)
    state = getattr(worker, "state", None)
    text = f"Worker {name}"
    if state:
        text += f" {getattr(state, 'value', state)}"
    if queues:
        names = [getattr(q, "name", q) for q in queues]
        text += " on queues " + ",".join(str(n) for n in names)
    return text


class NotifyMiddleware(Middleware):
    """Tells systemd about the worker: ready on start, watchdog on tick, stopping on stop.

    Install it in the process systemd watches (the service's main process).
    ``on_tick`` sends ``WATCHDOG=1`` at most every half watchdog interval;
    since the worker calls ``on_tick`` only while its loop turns, a hung loop
    stops the pings and systemd restarts the unit after ``WatchdogSec``.
    The ``STATUS=`` line is refreshed when the worker's state changes.
    """

    def __init__(
        self,
        notifier: SystemdNotifier | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.notifier = notifier if notifier is not None else SystemdNotifier.from_env()
        self._clock = clock
        self._last_ping: float | None = None
        self._last_status: str | None = None

    def on_start(self, worker: WorkerContext) -> None:
        status = describe_worker(worker)
        self._last_status = status
        self.notifier.ready(status)
        self._ping(self._clock())

    def on_tick(self, worker: WorkerContext) -> None:
        if not self.notifier.enabled:
            return
        interval = self.notifier.watchdog_interval()
        now = self._clock()
        if interval is not None and (self._last_ping is None or now - self._last_ping >= interval / 2):
            self._ping(now)
        status = describe_worker(worker)
        if status != self._last_status:
            self._last_status = status
            self.notifier.status(status)

    def on_stop(self, worker: WorkerContext) -> None:
        self.notifier.stopping(f"Worker {getattr(worker, 'name', None) or os.getpid()} stopping")

    def _ping(self, now: float) -> None:
        if self.notifier.watchdog_interval() is not None:
            self.notifier.watchdog()
            self._last_ping = now

    def describe(self) -> dict[str, object]:
        interval = self.notifier.watchdog_interval()
        return {"systemd_watchdog": interval} if interval is not None else {}
