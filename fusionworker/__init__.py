"""fusionworker: a fork-per-job worker daemon on Redis priority queues."""

from __future__ import annotations

__version__ = "0.1.0"

from .exceptions import JobTimeoutError, Retry  # noqa: E402
from .job import Job  # noqa: E402
from .queue import Queue  # noqa: E402
from .worker import Worker  # noqa: E402

__all__ = ["Job", "JobTimeoutError", "Queue", "Retry", "Worker", "__version__"]
