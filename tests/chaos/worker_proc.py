"""A real worker process for crash tests, with a short lease.

``python -m tests.chaos.worker_proc QUEUES`` runs a :class:`Worker` with the
default middleware (reaper, callbacks, ...) and settings from the environment,
like ``run_worker.py worker``. ``FW_TEST_LEASE`` overrides the job lease (the
core keeps it >= 15 s), so crash recovery can be tested in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fusionworker.config import load_settings
from fusionworker.connection import connect
from fusionworker.logs import setup_logging
from fusionworker.worker import Worker


def start(processes: Any, queues: str = "default", lease: float | None = None,
          **env: str) -> subprocess.Popen[bytes]:
    """Start one such process under the ``processes`` fixture (killed at teardown)."""
    from tests.conftest import ROOT, worker_env

    log = open(processes.tmp_path / f"worker{len(processes.procs)}.log", "wb")  # noqa: SIM115
    extra = {**env, **({"FW_TEST_LEASE": str(lease)} if lease else {})}
    proc = subprocess.Popen([sys.executable, "-m", "tests.chaos.worker_proc", queues],
                            env=worker_env(processes.settings, **extra), stdout=log,
                            stderr=subprocess.STDOUT, cwd=str(ROOT))
    proc.log_path = log.name  # type: ignore[attr-defined]
    processes.procs.append(proc)
    return proc


def output(proc: subprocess.Popen[bytes]) -> str:
    """Everything the process logged so far."""
    return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    settings = load_settings()
    setup_logging(settings.log_level)
    worker = Worker(argv[0] if argv else "default", connect(settings.redis_url),
                    settings=settings)
    lease = os.environ.get("FW_TEST_LEASE")
    if lease:
        worker.lease = float(lease)
    return worker.work()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
