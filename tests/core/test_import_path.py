"""``fusionworker worker`` imports job modules from the folder it runs in (as ``rq worker``
does) and from ``--path DIR`` / FUSIONWORKER_PATH: real worker processes, real forks,
a project folder that is NOT on PYTHONPATH."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fusionworker.core.queue import Queue
from tests.conftest import ROOT, worker_env

TASKS = textwrap.dedent("""\
    import os

    def where(tag):
        return {"tag": tag, "file": __file__, "cwd": os.getcwd()}
""")

# every test here starts the product's processes itself (tests/README.md)
pytestmark = pytest.mark.slow


def _project(folder: Path, package: str = "app") -> Path:
    """A project folder holding ``<package>/tasks.py`` (a namespace package: no __init__)."""
    (folder / package).mkdir(parents=True)
    (folder / package / "tasks.py").write_text(TASKS)
    return folder


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _queue(r, settings) -> Queue:
    """The queue the tests enqueue ``app.tasks:where`` on (app is allowed)."""
    return Queue("paths", r, settings=settings.replace(allowed_modules=("app", "billing")),
                 events=False)


def _ran_from(q: Queue, job, project: Path) -> None:
    """``job`` finished, running the ``app/tasks.py`` of ``project``."""
    got = q.fetch_job(job.id)
    assert got.status == "finished", (got.error, got.traceback)
    assert got.result["file"] == str(project / "app" / "tasks.py")


def _console_script(folder: Path) -> Path:
    """What pip writes for the ``fusionworker`` console script (sys.path[0] is its folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "fusionworker"
    script.write_text("import sys\nfrom fusionworker.cli import run\n"
                      "if __name__ == '__main__':\n    sys.exit(run())\n")
    return script


def _run(argv: list[str], cwd: Path, settings, allowed: str, **env: str):
    full_env = worker_env(settings, FUSIONWORKER_ALLOWED_MODULES=allowed, **env)
    assert str(cwd) not in full_env["PYTHONPATH"]
    return subprocess.run(argv, cwd=str(cwd), env=full_env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("entry", ["console script"])
def test_worker_imports_job_modules_from_its_current_directory(entry, r, settings, tmp_path):
    project = _project(tmp_path / "project")
    q = _queue(r, settings)
    job = q.enqueue("app.tasks:where", "cwd")
    script = ROOT / "run_worker.py" if entry == "run_worker.py" else _console_script(
        tmp_path / "bin")
    done = _run([sys.executable, str(script), "worker", "--customq", "paths", "--burst"],
                project, settings, "app")
    assert done.returncode == 0, done.stdout + done.stderr
    _ran_from(q, job, project)



def test_path_reaches_every_process_of_a_supervised_pool(r, settings, tmp_path):
    project = _project(tmp_path / "project")
    elsewhere = _folder(tmp_path / "elsewhere")
    q = _queue(r, settings)
    jobs = [q.enqueue("app.tasks:where", i) for i in range(4)]
    done = _run([sys.executable, str(ROOT / "run_worker.py"), "worker", "--customq", "paths",
                 "--burst", "--processes", "2", "--path", "../project"],
                elsewhere, settings, "app")
    assert done.returncode == 0, done.stdout + done.stderr
    for job in jobs:
        _ran_from(q, job, project)


def test_fusionworker_path_setting_and_its_errors(r, settings, tmp_path):
    project = _project(tmp_path / "project")
    elsewhere = _folder(tmp_path / "elsewhere")
    q = _queue(r, settings)
    job = q.enqueue("app.tasks:where", "env")
    argv = [sys.executable, str(ROOT / "run_worker.py"), "worker", "--customq", "paths",
            "--burst"]
    done = _run(argv, elsewhere, settings, "app", FUSIONWORKER_PATH=str(project))
    assert done.returncode == 0, done.stdout + done.stderr
    _ran_from(q, job, project)

    untouched = q.enqueue("app.tasks:where", "never run")
    missing = str(tmp_path / "missing")
    bad_env = _run(argv, elsewhere, settings, "app", FUSIONWORKER_PATH=missing)
    assert bad_env.returncode != 0 and "missing" in bad_env.stderr
    assert "is not a directory" in bad_env.stderr and "Traceback" not in bad_env.stderr
    bad_flag = _run(argv + ["--path", missing], elsewhere, settings, "app")
    assert bad_flag.returncode == 2 and "--path" in bad_flag.stderr
    assert q.fetch_job(untouched.id).status == "queued"   # a bad path runs nothing
