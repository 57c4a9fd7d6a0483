"""A job module that leaves a trace of every process that imports it: a file named by
the importing process's pid in ``$FW_TEST_IMPORT_MARKERS`` (when set). A test tells from
it whether a job was refused by the worker parent (no fork) or reached a horse."""

from __future__ import annotations

import os
import pathlib

from fusionworker import job

_DIR = os.environ.get("FW_TEST_IMPORT_MARKERS")
if _DIR:
    pathlib.Path(_DIR, str(os.getpid())).touch()


@job
def ok() -> str:
    return "ok"


def pid() -> int:
    """The pid of the process that ran it (not registered: allowed by module only)."""
    return os.getpid()
