"""The worker's pub/sub connection: wake-ups (``fw:{q}:wake``, published by the
enqueue and promotion scripts) and the control channel (``fw:control``:
suspend/resume). The loop select()s on its socket while a slot is free and
reads what it holds without a round trip (:meth:`Wakeups.drain`)."""

from __future__ import annotations

import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


class Wakeups:
    """The subscription, (re)made on demand; dropped on any trouble (claim at the next
    chance then: a wake-up may have been missed)."""

    def __init__(self, connection: Any, keys: Keys,
                 queue_names: Callable[[], Sequence[str]]) -> None:
        self.connection = connection
        self.keys = keys
        self.queue_names = queue_names
        self.pubsub: Any = None

    def subscribe(self) -> Any:
        """The pub/sub connection, subscribed (raises when Redis is unreachable)."""
        if self.pubsub is None:
            pubsub = new_pubsub_connection(self.connection, ignore_subscribe_messages=True)
            pubsub.subscribe(self.keys.control,
                             *(self.keys.queue(q).wake for q in self.queue_names()))
            self.pubsub = pubsub
        return self.pubsub

    def drop(self) -> None:
        """Close the connection (subscribed again at the next :meth:`subscribe`)."""
        old, self.pubsub = self.pubsub, None
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
            if msg.get("type") != "message":
                continue
            if msg.get("channel") == self.keys.control:
                if msg.get("data") == Control.SUSPEND:
                    heard.suspended = True
                elif msg.get("data") == Control.RESUME:
                    heard.suspended = False
            heard.wake = True     # a job was enqueued or promoted; or resumed
