"""The event log as the producer sees it (``core/emitting.py``'s ``EventsPort``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .registry import default_sink
from .schema import _HOSTNAME, make_event

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.connection import RedisClient


class ProducerPort:
    """The process-wide producer sinks (registry.py) and the event document (schema.py)."""

    hostname = _HOSTNAME

    def default_sink(self, settings: Settings, connection: RedisClient) -> Any:
        return default_sink(settings, connection)

    def document(self, event: str, job: Any, *, timestamp: float | None = None,
                 **fields: Any) -> dict[str, Any]:
        return make_event(event, job, timestamp=timestamp, **fields)


PORT = ProducerPort()
