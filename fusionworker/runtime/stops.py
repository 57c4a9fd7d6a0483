"""Stop requests: the worker's own pub/sub connection to the ``stop`` channels.

``Queue.stop`` (stop.lua) marks a started job's record ``stop_requested`` and
publishes its id on ``fw:{q}:stop``. Every worker listens on a connection of
its own, pattern-subscribed to the ``stop`` channel of every queue of its
prefix (stops are rare: one message per stop, to every worker; the worker that
runs the job kills its horse, or cancels its task in its async horse: Slot.stop;
the others ignore it). Its socket is in the
loop's ``select()`` at all times, busy or not, so the kill comes within a
millisecond of the request; the wake-ups' connection (wakeups.py) is only
watched while a slot is free, and every enqueue publishes on it.

A message missed (this connection was down) is not lost: the heartbeat's
``touch_many.lua`` answers 2 for a job whose record says ``stop_requested``
(heartbeat.py), and the loop kills it then. The whole sequence, with what
happens when a process dies at each step, is in docs/design.md ("Stopping a
running job").
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from ..core.connection import new_pubsub_connection, text
from ..core.keys import Keys, QueueKeys
from .errors import UNREACHABLE
from .slot import Slot

log = logging.getLogger(__name__)


def kill_asked(slots: list[Slot], asked: list[tuple[str, str]], worker: str) -> bool:
    """Stop each running job of ``slots`` whose stop was ``asked`` (queue, job id): its
    horse killed (SIGTERM now, SIGKILL after the escalation), or its task cancelled in
    its async horse (killed after the escalation if it has not ended: Slot.stop); the
    job ends ``stopped`` when its end is recorded. True when one was stopped."""
    killed = False
    for queue, job_id in asked:
        for slot in slots:
            if (slot.job.id == job_id and slot.job.queue == queue and slot.forked
                    and not slot.done and not slot.killed):
                slot.stop()
                log.warning("Worker %s: stop of job %s asked; %s", worker, job_id,
                            "cancelling its task in its async horse"
                            if slot.cancel_at is not None else "killing its horse")
                killed = True
    return killed


class StopListener:
    """The pattern subscription to ``<prefix>:{*}:stop``, (re)made on demand and dropped
    on any trouble (the heartbeat's answer covers what is missed meanwhile)."""

    def __init__(self, connection: Any, keys: Keys) -> None:
        self.connection = connection
        self.pattern = QueueKeys(keys.prefix, "*").stop
        self.pubsub: Any = None

    def sock(self) -> Any:
        """The socket to select() on, or None while Redis is unreachable."""
        try:
            if self.pubsub is None:
                pubsub = new_pubsub_connection(self.connection, ignore_subscribe_messages=True)
                pubsub.psubscribe(self.pattern)
                self.pubsub = pubsub
            conn = self.pubsub.connection
            return conn._sock if conn is not None else None
        except (OSError, ValueError, *UNREACHABLE):
            self.drop()
            return None

    def waitables(self, running: bool) -> list[Any]:
        """What the loop's select() watches for stops: the socket while a job runs."""
        sock = self.sock() if running else None
        return [] if sock is None else [sock]

    def kill(self, slots: list[Slot], worker: str, *, missed: bool = False) -> bool:
        """Kill the horses of ``slots`` whose stop the connection brought (``missed``:
        every one of ``slots``: the heartbeat found its record marked). True: one was."""
        asked = ([(s.job.queue, s.job.id) for s in slots] if missed else self.read())
        return kill_asked(slots, asked, worker)

    def read(self) -> list[tuple[str, str]]:
        """``(queue, job_id)`` of each stop request the connection holds (no wait)."""
        asked: list[tuple[str, str]] = []
        if self.pubsub is None:
            return asked
        try:
            while True:
                msg = self.pubsub.get_message(timeout=0)
                if msg is None:
                    return asked
                if msg.get("type") != "pmessage":
                    continue
                channel = text(msg.get("channel"))
                asked.append((QueueKeys.from_base(channel[:-len("stop")]).name,
                              text(msg.get("data"))))
        except (OSError, ValueError, *UNREACHABLE) as exc:
            log.info("Stop requests' connection dropped (%s); subscribing again", exc)
            self.drop()
            return asked

    def drop(self) -> None:
        old, self.pubsub = self.pubsub, None
        if old is not None:
            try:
                old.close()
            except (redis.RedisError, OSError):
                pass
