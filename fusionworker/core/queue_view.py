"""What the parts beside ``Queue`` use of one: :class:`QueueView`, which ``Queue`` meets.

Queue's own parts (``enqueue.py``, ``queue_habits.py``, ``workflows.py``) and what is
handed a queue (a ``Batch``, a registry) name this protocol, not the class: queue.py
imports them, so naming it would close a circle of imports once the ``TYPE_CHECKING``
ones count (``tests/test_layers.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .job import Job
    from .keys import Keys, QueueKeys
    from .redis_client import RedisClient
    from .scripts import Scripts


class Prepared(Protocol):
    """A prepared job as a batch reads it (``enqueue.PreparedJob``)."""

    @property
    def id(self) -> str: ...

    @property
    def fields(self) -> list[str]: ...


class QueueView(Protocol):
    """A queue: its name, client, settings, keys and scripts, and the calls its parts make."""

    name: str
    connection: RedisClient
    settings: Settings
    keys: Keys
    qkeys: QueueKeys
    scripts: Scripts

    def fetch_job(self, job_id: str) -> Job[Any] | None: ...

    def enqueue_call(self, *args: Any, **kwargs: Any) -> Job[Any]: ...

    def prepare_call(self, *args: Any, **kwargs: Any) -> Prepared: ...

    def delete(self, job_id: str) -> None: ...

    def requeue(self, job_id: str) -> Job[Any]: ...

    def requeue_all_failed(self) -> int: ...

    def _register(self) -> None: ...
