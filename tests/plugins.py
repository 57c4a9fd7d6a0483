"""A Middleware named on the command line (``worker --middleware tests.plugins:Recorder``):
it records each outcome the worker saw into Redis, where a test reads it."""

from __future__ import annotations

from typing import Any

from fusionworker.core.hooks import Middleware


class Recorder(Middleware):
    """Pushes ``<job id> <status>`` to ``<prefix>:plugin-saw`` after each outcome."""

    def after_finish(self, worker: Any, job: Any, outcome: Any) -> None:
        worker.connection.rpush(f"{worker.settings.prefix}:plugin-saw",
                                f"{job.id} {outcome.status}")


recorder = Recorder()        # an instance works as well as the class
NOT_ONE = 42
