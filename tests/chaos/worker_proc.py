"""Real ``run_worker.py worker`` processes for crash tests, with a short lease.

``start(processes, lease=1.5)`` runs the ordinary CLI worker (default
middleware: reaper, callbacks, ...) with ``FUSIONWORKER_LEASE`` set, so crash
recovery can be tested in seconds.
"""

from __future__ import annotations

import subprocess
from typing import Any


def start(processes: Any, queues: str = "default", lease: float | None = None,
          **env: str) -> subprocess.Popen[bytes]:
    """Start one worker process under the ``processes`` fixture (killed at teardown)."""
    if lease:
        env["FUSIONWORKER_LEASE"] = str(lease)
    return processes.worker("--customq", queues, env=env)


def output(proc: subprocess.Popen[bytes]) -> str:
    """Everything the process logged so far."""
    from pathlib import Path

    return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]
