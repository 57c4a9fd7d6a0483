"""``work``: what RQ's tests do with ``Worker([...]).work(burst=True)``: a burst worker
in this process with the middleware every worker runs (dependencies, callbacks,
events), over the given queues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from fusionworker.core.config import Settings
from fusionworker.worker import Worker, default_middleware


@pytest.fixture
def work(r: redis.Redis, settings: Settings) -> Callable[..., Worker]:
    def run(queues: str = "default", **kwargs: Any) -> Worker:
        used = kwargs.pop("settings", settings)
        w = Worker(queues, r, settings=used, burst=True,
                   middleware=kwargs.pop("middleware", default_middleware(used)), **kwargs)
        assert w.work() == 0
        return w
    return run
