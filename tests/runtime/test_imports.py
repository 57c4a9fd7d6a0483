"""The worker process never imports its ``--import`` modules (models loaded once,
runtime/imports.py): what they register (the ``@job`` references, their options, the
schedules they declare) it learns from a short-lived child, and it all works as when
the worker imported them itself."""

from __future__ import annotations

import sys
import textwrap

import pytest

from fusionworker import Queue
from fusionworker.core import cron
from fusionworker.core.config import ConfigError
from fusionworker.runtime.imports import learn
from tests.waiting import wait_for

MODULE = '''
import os
import pathlib

import fusionworker

pathlib.Path(os.environ["FW_TEST_IMPORTERS"], str(os.getpid())).touch()


@fusionworker.periodic("0 3 * * *", queue=QUEUE, priority=7, timeout=45)
def nightly():
    return "night"


@fusionworker.job(queue=QUEUE, timeout=33)
def shout(word):
    return word.upper()


fusionworker.schedule("hourly-shout", "0 * * * *", shout, args=["hi"], queue=QUEUE)
'''


def test_what_an_imported_module_registers_reaches_a_worker_that_never_imports_it(
        processes, queue, r, settings, tmp_path):
    q = queue()
    code = tmp_path / "code"
    importers = tmp_path / "importers"
    code.mkdir()
    importers.mkdir()
    (code / "learnt_jobs.py").write_text(f"QUEUE = {q.name!r}\n" + textwrap.dedent(MODULE))
    w = processes.worker("--customq", q.name, "--import", "learnt_jobs", "--path", str(code),
                         env={"FUSIONWORKER_ALLOWED_MODULES": "",
                              "FW_TEST_IMPORTERS": str(importers)})
    # the schedules it declares, written at the worker's start with the @job options
    entry = wait_for(lambda: _entry(r, settings, "nightly", q.name))
    assert (entry.func, entry.priority, entry.timeout) == ("learnt_jobs:nightly", 7, 45.0)
    other = wait_for(lambda: _entry(r, settings, "hourly-shout", q.name))
    assert (other.func, other.args, other.timeout) == ("learnt_jobs:shout", ["hi"], 33.0)
    # its registered function runs (allowed by registration only: no allow-list)
    producer = Queue(q.name, r, settings=settings.replace(allowed_modules=["learnt_jobs"]))
    job = producer.enqueue("learnt_jobs:shout", "word")
    done = wait_for(lambda: (f := q.fetch_job(job.id)).status == "finished" and f)
    assert done.result == "WORD"
    names = {p.name for p in importers.iterdir()}
    assert str(w.pid) not in names and len(names) == 2, names   # the child, the fork server


def _entry(r, settings, name, queue):
    try:
        return cron.get_entry(r, settings, name, queue)
    except cron.NoSuchCronEntry:
        return None


def test_a_module_that_fails_or_kills_its_importer_is_one_line_and_never_imported_here(
        tmp_path, monkeypatch):
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('no model file')\n")
    (tmp_path / "exits_at_import.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))      # the child gets this sys.path
    with pytest.raises(ConfigError, match="cannot import 'raises_at_import': "
                                          "RuntimeError: no model file"):
        learn(["raises_at_import"])
    with pytest.raises(ConfigError, match=r"ended without an answer \(exit status 3\)"):
        learn(["exits_at_import"])
    assert "raises_at_import" not in sys.modules and "exits_at_import" not in sys.modules
