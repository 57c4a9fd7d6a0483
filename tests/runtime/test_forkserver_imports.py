"""The fork server's own imports: each module it loads is memory that every fork copies
(page tables at fork, copy-on-write faults in the horse), so what only the worker needs
stays out of it."""

from __future__ import annotations

import json
import subprocess
import sys

#: the worker's, never the fork server's: the governor (and psutil, which it samples
#: with), the event sinks, the Redis client, the command line
WORKER_ONLY = ("fusionworker.middleware.governor", "psutil", "fusionworker.events.sinks",
               "redis", "click", "fusionworker.runtime.gpus", "fusionworker.runtime.loop")


def test_the_fork_server_imports_nothing_that_only_the_worker_needs() -> None:
    code = ("import json, sys\n"
            "from fusionworker.runtime.forkserver.server import serve\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    loaded = set(json.loads(out.stdout))
    assert "fusionworker.runtime.slot_device" in loaded     # what it does need of --gpus
    assert sorted(loaded & set(WORKER_ONLY)) == []
