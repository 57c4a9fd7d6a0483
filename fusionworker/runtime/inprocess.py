"""A job run in the worker's own process (``fusionworker.testing``): no fork, no
isolation (launch.py's table of launchers)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ..core.job import Job
from .exits import HorseExit, exit_from_report
from .launchspec import LaunchSpec
from .protocol import HorseReport
from .slot import Slot


class InProcessLauncher:
    """Each job runs in this process (``fusionworker.testing``): no fork, no isolation,
    one at a time; the same report, crossing the same JSON encoding as a horse's pipe."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec

    def start(self) -> None:
        """Nothing is forked."""

    def launch(self, jobs: Sequence[Job[Any]], entries: Sequence[int],
               while_forking: Callable[[], None]) -> list[Slot]:
        while_forking()          # the after_claim hooks, before the job runs
        return [Slot.ended(job, self.run_here(job), entry) for job, entry in zip(jobs, entries)]

    def run_here(self, job: Job[Any]) -> HorseExit:
        from . import progress
        from .horse.run import run_job

        started = time.monotonic()
        previous = signal.getsignal(signal.SIGALRM)
        # current_job() works here too: its changes go straight to the worker's relay
        progress.begin(job, deliver=lambda frame: self.spec.deliver(job, frame))
        try:
            report = run_job(job, self.spec.allowed, self.spec.retryable)
        finally:
            signal.signal(signal.SIGALRM, previous)
            final = progress.end()
        if final is not None:
            report.progress = final
        # the report crosses the same JSON encoding as a horse's pipe
        again = HorseReport.decode(report.encode()) or report
        return exit_from_report(again, time.monotonic() - started)

    def set_deadline(self, entry: int, deadline: float) -> None:
        """No horse to kill."""

    def waitables(self) -> list[Any]:
        return []

    def poll(self, readable: Collection[Any] | None) -> None:
        """Every slot ended at birth."""

    def tidy(self) -> None:
        """Nothing is left behind."""

    def renew(self) -> None:
        """Job code is this process's."""

    def close(self) -> None:
        """Nothing to stop."""
