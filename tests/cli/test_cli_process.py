"""The CLI as operators run it: real processes, real Redis, exit codes and stderr."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT, worker_env
from tests.waiting import wait_for

# every test here starts the product's processes itself (tests/README.md)
pytestmark = pytest.mark.slow


def run(settings: Any, *args: str, env: dict[str, str] | None = None,
        timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_worker.py"), *args],
                          env={**worker_env(settings), **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, cwd=str(ROOT))


def test_unreachable_redis_one_line_masked(settings: Any) -> None:
    url = "redis://user:hunter2@127.0.0.1:1/0"
    for args in (["info"], ["job", "show", "x"], ["worker", "--burst"]):
        proc = run(settings, *args, env={"REDIS_URL": url})
        assert proc.returncode == 1, proc
        assert "Traceback" not in proc.stderr and "hunter2" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("Error: cannot reach Redis at redis://user:***@127.0.0.1:1/0")
    proc = run(settings, "health", env={"REDIS_URL": url})
    assert proc.returncode == 1 and proc.stderr.startswith("unhealthy: cannot reach Redis")


def test_bad_flag_unknown_job_and_health_exit_codes(settings: Any, queue: Any) -> None:
    proc = run(settings, "info", "--nope")
    assert proc.returncode == 2 and "No such option '--nope'" in proc.stderr
    assert "Traceback" not in proc.stderr
    queue("sms").enqueue("tests.jobs:noop")
    proc = run(settings, "job", "show", "missing")
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "Error: no job 'missing' in any queue (an ended job is kept FUSIONWORKER_RESULT_TTL / "
        "_FAILED_TTL seconds; its events stay: `events --job missing`)")
    proc = run(settings, "health", "--queue", "sms")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "unhealthy: no live worker serves queue sms"


def test_rqs_logging_flags_name_log_level(settings: Any) -> None:
    for args, level in ((["--verbose"], "DEBUG"), (["--quiet"], "WARNING"),
                        (["--logging_level", "error"], "ERROR")):
        proc = run(settings, "worker", "--burst", *args)
        assert proc.returncode == 2, proc
        assert f"--log-level {level}" in proc.stderr and "Traceback" not in proc.stderr


def test_worker_max_jobs_claims_that_many_and_stops(settings: Any, queue: Any) -> None:
    """RQ's ``rq worker --burst --max-jobs N``: N jobs run, the rest stay queued; with
    --processes it is refused in one line (the supervisor would start it again)."""
    q = queue("mj")
    jobs = [q.enqueue("tests.jobs:noop") for _ in range(3)]
    proc = run(settings, "worker", "-q", "mj", "--burst", "--max-jobs", "2", "--concurrency",
               "3")
    assert proc.returncode == 0, proc.stderr
    assert sorted(str(j.get_status()) for j in jobs) == ["finished", "finished", "queued"]
    proc = run(settings, "worker", "-q", "mj", "--burst", "--max-jobs", "1", "--processes", "2")
    assert proc.returncode == 2 and "--max-jobs stops one worker process" in proc.stderr
    assert q.count == 1


@pytest.mark.slow
def test_info_with_a_real_busy_worker_and_interval(processes: Any, settings: Any,
                                                   queue: Any, tmp_path: Any) -> None:
    q = queue("sms")
    job = q.enqueue("tests.jobs:sleep", 30)
    processes.worker("--customq", "sms")
    wait_for(lambda: q.stats()["started"] == 1, timeout=15)
    proc = run(settings, "info")
    assert proc.returncode == 0
    assert f"{job.id} (sms)" in proc.stdout and " busy " in proc.stdout
    assert run(settings, "health", "-q", "sms").returncode == 0
    screen = tmp_path / "info.out"
    with open(screen, "w") as sink:
        live = subprocess.Popen([sys.executable, str(ROOT / "run_worker.py"), "info", "-W",
                                 "--interval", "0.2"], env=worker_env(settings),
                                stdout=sink, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: screen.read_text().count("WORKER") >= 2, timeout=15)  # refreshed
    live.send_signal(signal.SIGINT)
    _, err = live.communicate(timeout=10)
    out = screen.read_text()
    assert live.returncode == 0 and "Traceback" not in err
    assert "\x1b[" not in out  # not a terminal: no screen clearing
