"""SIGHUP re-creates the fork server: changed job code is seen by the next job,
a job running during the reload finishes, none is lost."""

from __future__ import annotations

import os
import signal

import pytest

from fusionworker.core.queue import Queue
from tests.waiting import wait_for


def _write_module(path, version: str) -> None:
    path.write_text(f"def version():\n    return {version!r}\n")
    # a new size and a later mtime: the import system must not reuse the old .pyc
    later = os.stat(path).st_mtime + 10
    os.utime(path, (later, later))


@pytest.mark.slow
def test_sighup_makes_the_next_job_see_changed_code(processes, r, settings, prefix, tmp_path,
                                                    monkeypatch):
    mod = f"hot_{prefix}"
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    source = code_dir / f"{mod}.py"
    _write_module(source, "v1")
    env = {"PYTHONPATH": f"{code_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
                         f"{os.pathsep}{os.getcwd()}",
           "FUSIONWORKER_ALLOWED_MODULES": f"tests,{mod}"}
    monkeypatch.syspath_prepend(str(code_dir))     # the producer may check the name too
    q = Queue("default", r, settings=settings.replace(allowed_modules=("tests", mod)))
    proc = processes.worker("-q", "default", env=env)

    def run(func, *args, **kw):
        job = q.enqueue(func, *args, **kw)
        wait_for(lambda: q.fetch_job(job.id).status in ("finished", "failed"), timeout=15)
        return q.fetch_job(job.id)

    assert run(f"{mod}:version").result == "v1"
    assert run(f"{mod}:version").result == "v1"     # the fork server has preloaded it now
    _write_module(source, "v2, changed on disk")
    assert run(f"{mod}:version").result == "v1"     # stale until reload: documented

    long = q.enqueue("tests.jobs:sleep", 1.5)
    wait_for(lambda: q.fetch_job(long.id).status == "started", timeout=10)
    proc.send_signal(signal.SIGHUP)
    after = q.enqueue(f"{mod}:version")
    wait_for(lambda: q.fetch_job(after.id).status in ("finished", "failed"), timeout=15)
    assert q.fetch_job(long.id).status == "finished"          # ran on the old server
    assert q.fetch_job(after.id).result == "v2, changed on disk"
    assert run(f"{mod}:version").result == "v2, changed on disk"
    out = processes.output(proc)
    assert "new fork server" in out and proc.poll() is None
