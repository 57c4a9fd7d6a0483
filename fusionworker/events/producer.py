"""The event log as the producer sees it (``core/emitting.py``'s ``EventsPort``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Unpack

from .registry import default_sink
from .schema import _HOSTNAME, make_event

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.connection import RedisClient
    from ..core.emitting import EventFields


class ProducerPort:
    """The process-wide producer sinks (registry.py) and the event document (schema.py)."""

    hostname = _HOSTNAME

    def default_sink(self, settings: Settings, connection: RedisClient) -> Any:
        return default_sink(settings, connection)

    def document(self, event: str, job: Any, **fields: Unpack[EventFields]) -> dict[str, Any]:
        return make_event(event, job, **fields)


PORT = ProducerPort()
