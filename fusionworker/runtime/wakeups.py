"""The worker's pub/sub connection: wake-ups (``fw:{q}:wake``, published by the
enqueue and promotion scripts) and the control channel (``fw:control``:
suspend/resume, a shutdown of this worker). The loop select()s on its socket while a slot is free and
reads what it holds without a round trip (:meth:`Wakeups.drain`).

Once Redis confirmed every subscription (:attr:`Wakeups.confirmed`), a wake-up
names its queue (:attr:`Heard.queues`): the claimer then trusts a queue found
empty to stay so until its channel says otherwise (claim.py, "quiet queues")."""

from __future__ import annotations

import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from ..core.admin import Control
from ..core.connection import new_pubsub_connection
from ..core.keys import Keys
from .errors import UNREACHABLE


@dataclass
class Heard:
    """What the pub/sub messages read said."""

    wake: bool = False                 # a job was enqueued or promoted (or resumed)
    suspended: bool | None = None      # the control channel's last word, if any
    #: the queues whose channel spoke (a job enqueued, scheduled, promoted; a resume)
    queues: set[str] = field(default_factory=set)
    every: bool = False                # the control channel spoke: any queue may hold jobs
    shutdown: bool = False             # a shutdown of this worker was asked (read the hash)


class Wakeups:
    """The subscription, (re)made on demand; dropped on any trouble (claim at the next
    chance then: a wake-up may have been missed)."""

    def __init__(self, connection: Any, keys: Keys, name: str,
                 queue_names: Callable[[], Sequence[str]]) -> None:
        self.connection = connection
        self.keys = keys
        #: the control channel's message that asks this worker's shutdown
        self.shutdown = f"{Control.SHUTDOWN.value}{name}"
        self.queue_names = queue_names
        self.pubsub: Any = None
        #: channel -> queue of the current subscription
        self.channels: dict[str, str] = {}
        #: subscriptions Redis has not confirmed yet (a message may be missed until 0)
        self.unconfirmed = 0

    @property
    def confirmed(self) -> bool:
        """Subscribed, and Redis confirmed every channel: from now on no message of
        them is missed while the connection lives."""
        return self.pubsub is not None and self.unconfirmed == 0

    def subscribe(self) -> Any:
        """The pub/sub connection, subscribed (raises when Redis is unreachable)."""
        if self.pubsub is None:
            pubsub = new_pubsub_connection(self.connection)
            channels = {self.keys.queue(q).wake: q for q in self.queue_names()}
            pubsub.subscribe(self.keys.control, *channels)
            self.pubsub, self.channels = pubsub, channels
            self.unconfirmed = len(channels) + 1
        return self.pubsub

    def drop(self) -> None:
        """Close the connection (subscribed again at the next :meth:`subscribe`)."""
        old, self.pubsub = self.pubsub, None
        self.unconfirmed = 0
        if old is not None:
            try:
                old.close()
            except (redis.RedisError, OSError):
                pass

    def sock(self, heard: Heard) -> Any:
        """The socket to select() on, after reading what it already holds into ``heard``.
        Raises when Redis is unreachable."""
        pubsub = self.subscribe()
        self.read(pubsub, heard)
        conn = pubsub.connection
        return conn._sock if conn is not None else None

    def drain(self, heard: Heard) -> bool:
        """Read whatever pub/sub already holds (no round trip) into ``heard``. Every read
        drains the client's buffer, so a socket with nothing to read means no message:
        one ``select()`` instead of redis-py's read path on every job. False: the
        connection broke (dropped; claim at the next chance)."""
        pubsub = self.pubsub
        if pubsub is None:
            return True
        conn = pubsub.connection
        sock = conn._sock if conn is not None else None
        try:
            if sock is not None and not select.select([sock], [], [], 0)[0]:
                return True
            self.read(pubsub, heard)
        except (OSError, ValueError, *UNREACHABLE):    # closed under us: subscribe again
            self.drop()
            return False
        return True

    def read(self, pubsub: Any, heard: Heard) -> None:
        while True:
            msg = pubsub.get_message(timeout=0)
            if msg is None:
                return
            kind = msg.get("type")
            if kind == "subscribe":
                self.unconfirmed = max(0, self.unconfirmed - 1)
            if kind != "message":
                continue
            channel = msg.get("channel")
            if isinstance(channel, bytes):     # a client without decode_responses
                channel = channel.decode("utf-8", "replace")
            if channel == self.keys.control:
                heard.every = True
                if msg.get("data") == Control.SUSPEND:
                    heard.suspended = True
                elif msg.get("data") == Control.RESUME:
                    heard.suspended = False
                elif msg.get("data") == self.shutdown:
                    heard.shutdown = True
            elif channel in self.channels:
                heard.queues.add(self.channels[channel])
            heard.wake = True     # a job was enqueued or promoted; or resumed
