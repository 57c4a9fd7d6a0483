"""How the producer (``Queue``) reaches the event log without importing it.

The event log (``events/``) is a layer above the core. The producer is handed an
:class:`EventsPort` instead: the package root (``fusionworker/__init__.py``, which
every import of the package runs first) installs a provider that loads the events
layer's port on the first event (``events/producer.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings
    from .redis_client import RedisClient


class EventFields(TypedDict, total=False):
    """What an event says beside its name and its job, each optional: the keywords of
    ``events.schema.make_event`` and of everything that hands them on to it."""

    worker: str | None
    host: str | None            # default: this machine's name
    duration: float | None
    wait_time: float | None
    error_type: str | None
    error_message: str | None
    reason: str | None          # the worker's outcome reason, where there is one
    timestamp: float | None     # epoch seconds; default: now
    progress: float | None
    progress_message: str | None


class EventsPort(Protocol):
    """What the producer needs of the event log."""

    #: the ``host`` field of the producer's events
    hostname: str

    def default_sink(self, settings: Settings, connection: RedisClient) -> Any:
        """The process-wide sink of producers for these settings."""

    def document(self, event: str, job: Any, **fields: Unpack[EventFields]) -> dict[str, Any]:
        """The event document of ``event`` for ``job`` (a Job or a mapping)."""


_provider: Callable[[], EventsPort] | None = None


def install(provider: Callable[[], EventsPort]) -> None:
    """Hand the producer the event log: ``provider()`` is called on the first event."""
    global _provider
    _provider = provider


def port() -> EventsPort | None:
    """The installed event log, or None (then the producer emits nothing)."""
    return None if _provider is None else _provider()


#: ``Queue(is_async=False)``'s runner: runs a queue's due jobs in this process (the
#: package root installs ``fusionworker.testing.run_burst``, loaded on first use)
_runner: Callable[[Any], Any] | None = None


def install_runner(runner: Callable[[Any], Any]) -> None:
    """Hand ``Queue(is_async=False)`` the in-process runner of the layers above."""
    global _runner
    _runner = runner


def runner() -> Callable[[Any], Any] | None:
    """The installed in-process runner, or None (then is_async=False cannot run jobs)."""
    return _runner
