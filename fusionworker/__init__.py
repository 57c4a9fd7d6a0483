"""fusionworker: a fork-per-job worker daemon on Redis priority queues."""

from __future__ import annotations

__version__ = "0.1.0"
