"""The worker parent's own imports: what only an optional duty needs is loaded with that
duty, so a worker that never uses it does not carry it (its memory is on every worker
of a deployment, and counted in each benchmark's PSS)."""

from __future__ import annotations

import json
import subprocess
import sys

from fusionworker.core.config import Settings
from fusionworker.middleware.governor import nvml_library_loads

from ..conftest import worker_env

#: loaded only by the duty that needs it: failure webhooks (requests, and urllib3 and the
#: codecs charset_normalizer loads with it), the Prometheus endpoint (prometheus_client),
#: a cron schedule (croniter, and the dateutil it loads)
OPTIONAL = ("requests", "urllib3", "charset_normalizer", "prometheus_client",
            "fusionworker.middleware.metrics", "croniter", "dateutil")

#: a burst worker of the command line, run to its end; then the modules it holds
_RUN = ("import json, sys\n"
        "from fusionworker.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:], standalone_mode=False)\n"
        "finally:\n"
        "    print('MODULES' + json.dumps(sorted(sys.modules)))\n")


def _modules_after_a_burst(settings: Settings, *args: str, **env: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _RUN, "worker", "idle", "--burst", *args],
                         env=worker_env(settings, **env), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("MODULES"))
    return set(json.loads(line[len("MODULES"):]))


def test_a_worker_without_webhooks_or_metrics_loads_neither(settings: Settings) -> None:
    loaded = _modules_after_a_burst(settings)
    assert "fusionworker.middleware.callbacks" in loaded     # the duty is there...
    assert sorted(loaded & set(OPTIONAL)) == []               # ...its HTTP client is not
    assert "fusionworker.middleware.governor" in loaded       # the GPU check ran, and
    if not nvml_library_loads():                              # without the driver (here)
        assert "pynvml" not in loaded                         # it did not import pynvml


def test_a_worker_with_a_metrics_port_loads_prometheus(settings: Settings) -> None:
    loaded = _modules_after_a_burst(settings, FUSIONWORKER_METRICS_PORT="0")
    assert "prometheus_client" not in loaded                  # 0: off
    loaded = _modules_after_a_burst(settings, FUSIONWORKER_METRICS_PORT=_free_port())
    assert {"prometheus_client", "fusionworker.middleware.metrics"} <= loaded


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])
