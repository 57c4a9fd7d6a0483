"""A job, and a ``FUSIONWORKER_OTEL_SETUP`` that makes the fork server's start-up take
seconds (tests/runtime/test_working_time.py): the set-up runs in the worker and in its
fork server, a fresh interpreter started with ``python -c``."""

from __future__ import annotations

import sys
import time

from fusionworker import job

#: seconds the fork server's start takes with :func:`slow_server_setup`
SERVER_START = 6.0


def slow_server_setup() -> None:
    if sys.argv[:1] == ["-c"]:      # the fork server, not the worker
        time.sleep(SERVER_START)


@job(queue="slowimport")
def quick() -> str:
    return "done"
