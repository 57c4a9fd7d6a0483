"""SIGHUP re-creates the fork server: changed job code is seen by the next job,
a job running during the reload finishes, none is lost."""

from __future__ import annotations

import os
import signal

import pytest

from fusionworker.core.functions import forget_loaded
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


@pytest.mark.slow
def test_a_function_added_before_a_reload_runs_though_the_worker_checked_a_callback_of_it(
        processes, r, settings, prefix, tmp_path, monkeypatch):
    """The worker enqueues a job's ``on_success`` callback, and to check its reference
    imports the callback's module into its own process. A function added to that module,
    then SIGHUP: the worker's early check read its stale copy and refused the new function
    (``refused``, never retried) while the fork server had the new code."""
    mod = f"cb_{prefix}"
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    source = code_dir / f"{mod}.py"
    body = "def work():\n    return 1\n\n\ndef cb(job_id):\n    return job_id\n"
    source.write_text(body)
    env = {"PYTHONPATH": f"{code_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
                         f"{os.pathsep}{os.getcwd()}",
           "FUSIONWORKER_ALLOWED_MODULES": f"tests,{mod}"}
    monkeypatch.syspath_prepend(str(code_dir))
    q = Queue("default", r, settings=settings.replace(allowed_modules=("tests", mod)))
    proc = processes.worker("-q", "default", env=env)
    first = q.enqueue(f"{mod}:work", on_success=f"{mod}:cb")
    callback = wait_for(lambda: q.fetch_job(f"{first.id}:on_success"), timeout=15,
                        what="the callback enqueued by the worker")
    wait_for(lambda: q.fetch_job(callback.id).status == "finished", timeout=15)
    source.write_text(body + "\n\ndef added():\n    return 'added'\n")
    later = os.stat(source).st_mtime + 10
    os.utime(source, (later, later))
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded its settings" in processes.output(proc), timeout=15)
    forget_loaded()           # this producer, deployed anew too, checks the new code
    job = q.enqueue(f"{mod}:added")
    wait_for(lambda: q.fetch_job(job.id).status in ("finished", "failed"), timeout=15)
    done = q.fetch_job(job.id)
    assert (done.status, done.result) == ("finished", "added"), done.error_message


def test_a_reload_drops_a_callback_packages_submodules(tmp_path, monkeypatch):
    """A callback package that re-exports a submodule (``from .impl import *``): the
    reload dropped the package and kept ``impl``, so the package imported again got the
    old ``impl``, and a function added there was refused."""
    import sys

    from fusionworker.core.functions import verify
    from fusionworker.exceptions import InvalidFunction

    pkg = tmp_path / "cbpkg_reload"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .impl import *  # noqa: F403\n")
    impl = pkg / "impl.py"
    impl.write_text("def cb1(job_id):\n    return job_id\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    allowed = ("cbpkg_reload",)
    try:
        verify("cbpkg_reload:cb1", allowed)              # imported here, as a worker does
        impl.write_text(impl.read_text() + "\n\ndef cb2(job_id):\n    return job_id\n")
        later = os.stat(impl).st_mtime + 10
        os.utime(impl, (later, later))
        with pytest.raises(InvalidFunction):
            verify("cbpkg_reload:cb2", allowed)          # the copy held before the reload
        forget_loaded()
        verify("cbpkg_reload:cb2", allowed)
    finally:
        for name in [m for m in sys.modules if m.startswith("cbpkg_reload")]:
            del sys.modules[name]
