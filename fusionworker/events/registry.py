"""The process-wide producer sinks: one per process and sink settings, made on
first use (``Queue`` and the reaper emit through it). See :func:`default_sink`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from .sinks import EventSink, make_sink

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.connection import RedisClient

_DEFAULT_SINKS: dict[tuple[Any, ...], EventSink] = {}
_DEFAULT_LOCK = threading.Lock()


def _sink_key(settings: Settings) -> tuple[Any, ...]:
    return (os.getpid(), settings.prefix, settings.redis_url, settings.elasticsearch_url,
            settings.elasticsearch_index, settings.elasticsearch_api_key,
            settings.elasticsearch_username, settings.elasticsearch_password,
            settings.event_buffer, settings.event_stream_maxlen, settings.events)


def default_sink(settings: Settings, connection: RedisClient) -> EventSink:
    """The process-wide sink of producers (``Queue``), one per process and sink settings.

    Made on first use with :func:`make_sink`; ``connection`` is used only by
    the call that makes it. A forked child (a horse) gets its own on first
    use; note that a horse ends with ``os._exit``, so events it emits are
    delivered only if it calls :func:`flush_default_sinks` first.
    """
    key = _sink_key(settings)
    with _DEFAULT_LOCK:
        sink = _DEFAULT_SINKS.get(key)
        if sink is None:
            sink = make_sink(settings, connection)
            _DEFAULT_SINKS[key] = sink
        return sink


def flush_default_sinks(timeout: float = 5.0) -> bool:
    """Deliver what this process's shared sinks hold; False if ``timeout`` ran out."""
    pid = os.getpid()
    deadline = time.monotonic() + timeout
    with _DEFAULT_LOCK:
        sinks = [sink for key, sink in _DEFAULT_SINKS.items() if key[0] == pid]
    return all([sink.flush(max(0.0, deadline - time.monotonic())) for sink in sinks])
