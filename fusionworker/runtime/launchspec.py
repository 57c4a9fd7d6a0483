"""What every launcher needs to know (launch.py), given once by the worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.job import Job


@dataclass(frozen=True)
class LaunchSpec:
    """What every launcher needs to know, given once by the worker."""

    allowed: tuple[str, ...]                 # the functions jobs may run (functions.py)
    retryable: tuple[str, ...]               # exception classes that retry
    entries: int                             # the worker's slots: one board entry each
    #: a progress frame of a running job (progress_store.ProgressRelay.received)
    deliver: Callable[[Job[Any], str], None]
    kill_children: bool = True               # FUSIONWORKER_KILL_JOB_CHILDREN
    #: OpenTelemetry for the horses (``otel.setup_horses`` arguments), asked at start
    tracing: Callable[[], dict[str, Any] | None] = field(default=lambda: None)
    name: str = ""                           # the worker's, for the logs
    #: warm horses of the fork server, asked at its start: ``{"horse_jobs": N,
    #: "max_rss_mib": M}`` (N <= 1 or empty: a fresh horse per job)
    warm: Callable[[], dict[str, int]] = field(default=dict)
    #: modules the fork server imports before its first horse (the worker's --import):
    #: asked at its start, so a reload's new server imports the code on disk then
    imports: Callable[[], tuple[str, ...]] = field(default=tuple)
    #: FUSIONWORKER_MAX_RESULT_BYTES: a horse refuses a larger result (horse/run.py)
    result_cap: Callable[[], int] = field(default=lambda: 0)
    #: the worker's (log level, log format), asked at the fork server's start: where job
    #: code's log records go when nothing configured logging (horse/joblog.py)
    log: Callable[[], tuple[str, str] | None] = field(default=lambda: None)
