"""A job's own log lines (``logging.getLogger(__name__).info(...)``) reach the worker's
log in its format, naming the job, when nothing configured logging; a job module that
configures logging keeps its own (runtime/horse/joblog.py)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fusionworker.core.queue import Queue

JOBS = '''
import logging
{setup}
log = logging.getLogger("joblog_app")


def chatty(n):
    log.debug("debug line %s", n)
    log.info("info line %s", n)
    log.warning("warning line %s", n)
    return n
'''


def _module(tmp_path: Path, name: str, setup: str = "") -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(JOBS.format(setup=setup)))


@pytest.mark.parametrize("warm", [False, True])
def test_a_jobs_log_lines_reach_the_workers_log_naming_the_job(processes: Any, r: Any,
                                                               settings: Any, tmp_path: Path,
                                                               warm: bool) -> None:
    name = f"joblog_plain_{os.getpid()}"
    _module(tmp_path, name)
    q = Queue("jl", r, settings=settings.replace(allowed_modules=(name,)))
    job = q.enqueue(f"{name}:chatty", 7)
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "FUSIONWORKER_ALLOWED_MODULES": name}
    extra = ["--horse-jobs", "5"] if warm else []
    proc = processes.start("--log-format", "json", "worker", "-q", "jl", "--burst", *extra,
                           env=env)
    assert proc.wait(30) == 0
    assert q.fetch_job(job.id).status == "finished"
    lines = [json.loads(line) for line in processes.output(proc).splitlines()
             if line.startswith("{")]
    mine = [(d["level"], d["message"], d.get("job_id")) for d in lines
            if d["logger"] == "joblog_app"]
    # the worker's level (INFO): the debug line is not shown; each names its job
    assert mine == [("info", "info line 7", job.id), ("warning", "warning line 7", job.id)]
    assert "warning line 7" not in [line for line in processes.output(proc).splitlines()
                                    if not line.startswith("{")]   # no bare line beside


def test_a_job_module_that_configures_logging_keeps_its_own(processes: Any, r: Any,
                                                            settings: Any,
                                                            tmp_path: Path) -> None:
    name = f"joblog_own_{os.getpid()}"
    _module(tmp_path, name, setup='logging.basicConfig(level=logging.DEBUG, '
                                  'format="OWN %(levelname)s %(message)s")')
    q = Queue("jl", r, settings=settings.replace(allowed_modules=(name,)))
    job = q.enqueue(f"{name}:chatty", 8)
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "FUSIONWORKER_ALLOWED_MODULES": name}
    proc = processes.worker("-q", "jl", "--burst", "--import", name, env=env)
    assert proc.wait(30) == 0
    assert q.fetch_job(job.id).status == "finished"
    out = processes.output(proc)
    assert "OWN DEBUG debug line 8" in out and "OWN INFO info line 8" in out, out
    assert "[job " not in out


def test_a_job_clearing_the_last_resorts_filters_still_gets_its_lines_written(
        monkeypatch: Any, capsys: Any) -> None:
    """The handler's formatter has a default for ``job_id``: a job that cleared the
    handler's filters (a warm horse's later jobs log through the same handler) got a
    ``KeyError: 'job_id'`` logging error for every line instead of the line."""
    import logging

    from fusionworker.runtime.horse.joblog import send_unconfigured_to_worker_log

    monkeypatch.setattr(logging, "lastResort", logging.lastResort)   # put back after
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    send_unconfigured_to_worker_log("INFO", "text")
    logging.lastResort.filters.clear()
    logging.getLogger("joblog_app_filters").warning("still written")
    err = capsys.readouterr().err
    assert "joblog_app_filters [job -]: still written" in err and "KeyError" not in err, err
