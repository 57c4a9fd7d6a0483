"""What keeps the suite's own CPU down (tests/README.md): checked so it stays."""

from __future__ import annotations

import subprocess
import sys


def test_the_light_test_jobs_import_no_redis_until_one_that_talks_to_it_is_named():
    # a fork server imports a job's module once a job of it ran: tests.jobs:add must not
    # bring redis (and the OpenTelemetry SDK redis-py imports) into it; tests.jobs:record
    # must, so the horses forked after it find redis loaded
    code = ("import sys, tests.jobs as j; a = 'redis' in sys.modules; j.add; "
            "b = 'redis' in sys.modules; j.record; print(a, b, 'redis' in sys.modules, "
            "j.record.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "True", "tests.jobs_redis"]
