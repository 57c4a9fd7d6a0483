"""``async def`` job functions, and where a worker finds a project's modules."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fusionworker.core.queue import Queue
from tests.conftest import ROOT, worker_env
from tests.conftest import run_one as _run_one
from tests.waiting import wait_for


def _producer(r, settings, *modules: str) -> Queue:
    """A producer whose allow-list names the project's modules (default deny)."""
    return Queue("default", r, settings=settings.replace(allowed_modules=modules))


def test_an_async_job_is_awaited_and_its_result_recorded(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:async_add", 2, 3)
    assert job.status == "finished", (job.error_type, job.error_message)
    assert job.result == 5


def test_a_plain_function_returning_a_coroutine_is_awaited_too(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:returns_awaitable", 7)
    assert job.status == "finished", (job.error_type, job.error_message)
    assert job.result == 7


def test_an_async_job_that_raises_fails_with_its_traceback(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:async_boom", "nope")
    assert job.status == "failed" and job.failure_reason == "exception"
    assert job.error_type == "ValueError" and job.error_message == "nope"
    assert "async_boom" in job.traceback


def test_an_async_job_over_its_timeout_fails_as_a_timeout(queue, burst):
    job = _run_one(queue, burst, "tests.jobs:async_sleep", 30, timeout=0.3)
    assert job.status == "failed" and job.failure_reason == "timeout"
    assert job.error_type == "JobTimeoutError"


def _project(root: Path, package: str = "app") -> Path:
    """A project folder with ``app/tasks.py`` that nothing puts on PYTHONPATH."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "tasks.py").write_text(textwrap.dedent("""
        import os

        def where():
            return os.path.dirname(os.path.abspath(__file__))
    """))
    return root


def _worker(settings, tmp_path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``run_worker.py worker --burst`` by absolute path from ``cwd``: like the
    ``fusionworker`` console script, its sys.path[0] is not the project folder."""
    environ = worker_env(settings, PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, str(ROOT / "run_worker.py"), "worker", "--burst",
                           "--customq", "default", *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
def test_a_worker_started_in_a_project_folder_imports_its_modules(r, settings, tmp_path):
    project = _project(tmp_path / "proj")
    q = _producer(r, settings, "app")
    job = q.enqueue("app.tasks:where")   # the producer cannot import it: name check only
    out = _worker(settings, tmp_path, project, FUSIONWORKER_ALLOWED_MODULES="app")
    assert out.returncode == 0, out.stdout + out.stderr
    done = q.fetch_job(job.id)
    assert done.status == "finished", (done.error_type, done.error_message)
    assert done.result == str(project / "app")


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
def test_path_is_repeatable_and_searched_after_the_current_directory(r, settings, tmp_path):
    one = _project(tmp_path / "one", "appone")
    two = _project(tmp_path / "two", "apptwo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    q = _producer(r, settings, "appone", "apptwo")
    j1, j2 = q.enqueue("appone.tasks:where"), q.enqueue("apptwo.tasks:where")
    out = _worker(settings, tmp_path, elsewhere, "--path", str(one), "--path", str(two),
                  FUSIONWORKER_ALLOWED_MODULES="appone,apptwo")
    assert out.returncode == 0, out.stdout + out.stderr
    assert q.fetch_job(j1.id).result == str(one / "appone")
    assert q.fetch_job(j2.id).result == str(two / "apptwo")


@pytest.mark.slow
def test_fusionworker_path_setting_reaches_processes_children(r, settings, tmp_path):
    project = _project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    q = _producer(r, settings, "app")
    jobs = [q.enqueue("app.tasks:where") for _ in range(4)]
    environ = worker_env(settings, PYTHONPATH=str(ROOT), FUSIONWORKER_ALLOWED_MODULES="app",
                         FUSIONWORKER_PATH=str(project))
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_worker.py"), "worker",
                             "--customq", "default", "--processes", "2"], cwd=elsewhere,
                            env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in jobs), 30)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert {q.fetch_job(j.id).result for j in jobs} == {str(project / "app")}


@pytest.mark.slow
def test_the_readme_use_it_commands_run_as_written_in_a_project_folder(settings, tmp_path):
    """README "Use it": the example app its blocks show (examples/: each block names its
    file), then its two shell lines, literally, in a copy of that folder."""
    import re

    section = (ROOT / "README.md").read_text().split("## Use it", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks[0].startswith("# examples/app/tasks.py") and blocks[1].startswith(
        "# examples/enqueue.py")
    shell = re.findall(r"```bash\n(.*?)```", section, re.S)[0].splitlines()
    project = tmp_path / "proj"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("")
    (project / "app" / "tasks.py").write_text(blocks[0].split("\n", 1)[1])
    (project / "enqueue.py").write_text(blocks[1])
    # each line as the shell runs it: a trailing "# ..." is a comment
    worker_line = shell[0].split("#")[0].split("&")[0].split()
    producer_line = shell[1].split("#")[0].split()
    assert worker_line[0] == "fusionworker" and producer_line == ["python", "enqueue.py"]
    # the console script when installed (CI installs it), else the same CLI by path
    launcher = [shutil.which("fusionworker")] if shutil.which("fusionworker") else [
        sys.executable, str(ROOT / "run_worker.py")]
    env = worker_env(settings, PYTHONPATH=str(ROOT), FUSIONWORKER_ALLOWED_MODULES="")
    worker = subprocess.Popen([*launcher, *worker_line[1:]], cwd=project, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        out = subprocess.run([sys.executable, *producer_line[1:]], cwd=project, env=env,
                             capture_output=True, text=True, timeout=60)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        log = worker.communicate(timeout=30)[0].decode(errors="replace")
    assert out.returncode == 0, (out.stderr, log)
    assert out.stdout.strip() == "sent 'hi' to +1555"


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
@pytest.mark.parametrize("flag", ["--path"])
def test_worker_help_documents_the_path_flag(flag):
    out = subprocess.run([sys.executable, str(ROOT / "run_worker.py"), "worker", "--help"],
                         capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert flag in out.stdout and "current directory" in out.stdout
