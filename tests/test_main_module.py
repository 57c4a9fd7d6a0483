"""``python -m fusionworker`` is the ``fusionworker`` command."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, worker_env


def test_python_m_fusionworker_runs_the_cli(settings, queue):
    queue("sms").enqueue("tests.jobs:add", 1, 2)
    run = subprocess.run([sys.executable, "-m", "fusionworker", "info", "--json"],
                         env=worker_env(settings), cwd=str(ROOT), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert [q["queue"] for q in json.loads(run.stdout)["queues"]] == ["sms"]
    helped = subprocess.run([sys.executable, "-m", "fusionworker", "--help"], env=worker_env(
        settings), cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert helped.stdout.startswith("Usage: fusionworker [OPTIONS] COMMAND")
