"""The worker's public names. The worker itself lives in :mod:`fusionworker.runtime`.

``from fusionworker.worker import Worker, Outcome, parse_queue_spec, ...``
keeps working; the claim/dispatch loop and its crash-point analysis are in
``fusionworker/runtime/loop.py``, the parts in ``fusionworker/runtime/``.
"""

from __future__ import annotations

from .core.hooks import Outcome, OutcomeReason, OutcomeStatus, WorkerContext
from .core.job import STATES, WorkerState
from .middleware import default_middleware
from .runtime.claim import QUEUE_BACKOFF, parse_queue_spec
from .runtime.errors import REFUSED, UNREACHABLE
from .runtime.loop import BUSY_AFTER
from .runtime.recorder import backoff_delay
from .runtime.worker import Worker

__all__ = [
    "BUSY_AFTER", "Outcome", "OutcomeReason", "OutcomeStatus", "QUEUE_BACKOFF", "REFUSED",
    "STATES", "UNREACHABLE", "Worker", "WorkerContext", "WorkerState", "backoff_delay",
    "default_middleware", "parse_queue_spec",
]
