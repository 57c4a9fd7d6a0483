"""``worker --middleware MODULE:NAME`` and ``FUSIONWORKER_MIDDLEWARE``: a Middleware of
yours on the command line's worker (RQ's ``--exception-handler``, Celery's signals),
with real worker processes."""

from __future__ import annotations

from typing import Any

import pytest


def test_a_middleware_named_on_the_command_line_sees_every_outcome(
        processes: Any, queue: Any, r: Any, settings: Any) -> None:
    q = queue("plug")
    ok, bad = q.enqueue("tests.jobs:add", 1, 2), q.enqueue("tests.jobs:boom")
    proc = processes.worker("-q", "plug", "--burst", "--middleware", "tests.plugins:Recorder")
    assert proc.wait(30) == 0, processes.output(proc)
    assert sorted(r.lrange(f"{settings.prefix}:plugin-saw", 0, -1)) == sorted(
        [f"{ok.id} finished", f"{bad.id} failed"])


def test_the_variable_reaches_every_process_of_a_pool(processes: Any, queue: Any, r: Any,
                                                      settings: Any) -> None:
    q = queue("plug")
    ids = [q.enqueue("tests.jobs:add", i, 1).id for i in range(6)]
    proc = processes.worker("-q", "plug", "--burst", "--processes", "2",
                            env={"FUSIONWORKER_MIDDLEWARE": "tests.plugins:recorder"})
    assert proc.wait(30) == 0, processes.output(proc)
    saw = r.lrange(f"{settings.prefix}:plugin-saw", 0, -1)
    assert sorted(saw) == sorted(f"{i} finished" for i in ids)


@pytest.mark.parametrize(("ref", "says"), [
    ("tests.plugins", "give MODULE:NAME"),
    ("tests.plugins:NOT_ONE", "'tests.plugins:NOT_ONE' is not a Middleware but 'int'"),
    ("tests.plugins:Missing", "AttributeError"),
    ("no_such_module_x:Thing", "ModuleNotFoundError"),
])
def test_a_name_that_is_no_middleware_stops_the_start_in_one_line(
        processes: Any, queue: Any, ref: str, says: str) -> None:
    queue("plug").enqueue("tests.jobs:add", 1, 2)
    proc = processes.worker("-q", "plug", "--burst", "--middleware", ref)
    assert proc.wait(30) == 2
    out = processes.output(proc)
    assert says in out and "Traceback" not in out, out
