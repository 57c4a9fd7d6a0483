"""The typed vocabulary (vocabulary.py) against the strings the Lua scripts and the docs use."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from fusionworker.core import scripts
from fusionworker.core.job import STATES, FailureReason, Job, JobStatus, WorkerState, _Vocabulary

SCRIPTS = resources.files("fusionworker.core.scripts")
#: each script as loaded (its ``F.status`` is ``'status'``)
LUA = {p.name: scripts.expand(p.read_text(encoding="utf-8"), p.name)
       for p in SCRIPTS.iterdir() if p.name.endswith(".lua")}

#: every place a script writes or compares a job's status or failure reason
STATUS_LITERALS = (
    re.compile(r"'status',\s*'(\w+)'"),                    # HSET jkey 'status' 'queued'
    re.compile(r"'status'\)\s*[=~]=\s*'(\w+)'"),           # hget(jkey, 'status') == 'queued'
    re.compile(r"\b(?:st|dupst)\s*[=~]=\s*'(\w+)'"),       # local st = hget(...); st ~= 'x'
    re.compile(r"to_failed\([^)]*'(\w+)'\)"),              # to_failed(..., 'stopped'): its status
)
REASON_LITERALS = (re.compile(r"'failure_reason',\s*'(\w+)'"),)
#: an attempt's or a dependency's outcome (finish.lua, dep_done.lua, batch_done.lua)
OUTCOME_LITERALS = (re.compile(r"\boutcome\s*[=~]=\s*'(\w+)'"),)
#: finish.lua's outcomes are the end statuses of an attempt, and ``retry``
OUTCOMES_BEYOND_STATUSES = {"retry"}


def _values(vocabulary: type[_Vocabulary]) -> set[str]:
    return {member.value for member in vocabulary}


def _found(patterns: tuple[re.Pattern[str], ...]) -> dict[str, set[str]]:
    """literal -> scripts it appears in"""
    out: dict[str, set[str]] = {}
    for name, text in LUA.items():
        for pattern in patterns:
            for literal in pattern.findall(text):
                out.setdefault(literal, set()).add(name)
    return out


def test_the_scan_finds_the_statuses_the_scripts_write_and_compare():
    found = _found(STATUS_LITERALS)
    # not vacuous: the scan sees every status somewhere in the scripts
    assert set(found) == {s.value for s in JobStatus}, found


def test_every_status_literal_of_the_scripts_is_a_job_status():
    unknown = {lit: sorted(where) for lit, where in _found(STATUS_LITERALS).items()
               if lit not in _values(JobStatus)}
    assert unknown == {}


def test_every_failure_reason_literal_of_the_scripts_is_a_failure_reason():
    found = _found(REASON_LITERALS)
    assert found, "no failure_reason literal found: the pattern is stale"
    unknown = {lit: sorted(where) for lit, where in found.items()
               if lit not in _values(FailureReason)}
    assert unknown == {}


def test_every_outcome_literal_of_the_scripts_is_a_status_or_retry():
    found = _found(OUTCOME_LITERALS)
    assert {"finished", "retry"} <= set(found), found
    unknown = {lit: sorted(where) for lit, where in found.items()
               if lit not in _values(JobStatus) | OUTCOMES_BEYOND_STATUSES}
    assert unknown == {}


def test_the_scan_would_catch_a_stray_literal():
    text = "redis.call('HSET', jkey, 'status', 'finshed')\nif st ~= 'qeued' then end"
    assert {m for p in STATUS_LITERALS for m in p.findall(text)} == {"finshed", "qeued"}
    assert "finshed" not in _values(JobStatus)


@pytest.mark.parametrize("vocabulary", [JobStatus, FailureReason, WorkerState])
def test_values_are_the_stored_text(vocabulary: type[_Vocabulary]):
    for member in vocabulary:
        assert member == member.value and str(member) == member.value
        assert f"{member}" == member.value
        assert vocabulary.read(member.value) is member


def test_reading_an_unknown_value_keeps_its_text_and_never_fails():
    newer = FailureReason.read("gpu_lost")     # written by a newer version, or a middleware
    assert isinstance(newer, FailureReason) and newer == "gpu_lost" and str(newer) == "gpu_lost"
    assert newer not in list(FailureReason)
    with pytest.raises(ValueError):
        FailureReason("gpu_lost")              # where an unknown value is an error
    job = Job.from_hash({"id": "j", "queue": "q", "func": "m:f", "status": "paused",
                         "failure_reason": "gpu_lost"})
    assert job.status == "paused" and job.failure_reason == "gpu_lost"
    assert job.to_dict()["status"] == "paused"


def test_a_job_read_from_redis_holds_members():
    job = Job.from_hash({"id": "j", "queue": "q", "func": "m:f", "status": "failed",
                         "failure_reason": "segfault"})
    assert job.status is JobStatus.FAILED
    assert job.failure_reason is FailureReason.SEGFAULT
    assert Job.from_hash({"id": "j"}).status is JobStatus.QUEUED
    assert Job.from_hash({"id": "j"}).failure_reason is None


def test_failure_and_outcome_reasons_are_one_vocabulary():
    from fusionworker.core.hooks import Outcome, OutcomeReason

    assert OutcomeReason is FailureReason
    assert {m.value for m in FailureReason} - {"ok"} >= {"exception", "abandoned", "lease"}
    outcome = Outcome(status="failed", reason="gpu_lost")     # a middleware's own reason
    assert isinstance(outcome.reason, FailureReason) and outcome.reason == "gpu_lost"
    assert Outcome(status="finished", reason="ok").reason is FailureReason.OK


def test_worker_states_are_defined_once():
    from fusionworker.middleware import metrics

    assert metrics.STATES is STATES
    assert STATES == tuple(WorkerState)


def test_job_module_documents_the_vocabulary_from_the_enums():
    """The reasons are documented by the enum (one comment per member), not by a list
    that can drift: every member has its comment, and the module names the classes."""
    import importlib
    import inspect

    job_module = importlib.import_module("fusionworker.core.job")

    source = inspect.getsource(importlib.import_module("fusionworker.core.vocabulary"))
    for vocabulary in (JobStatus, FailureReason, WorkerState):
        assert f":class:`{vocabulary.__name__}`" in (job_module.__doc__ or "")
        for member in vocabulary:
            line = next(ln for ln in source.splitlines()
                        if re.match(rf"\s*{member.name} = \"{member.value}\"", ln))
            previous = source.splitlines()[source.splitlines().index(line) - 1]
            assert "#:" in line or previous.strip().startswith("#:"), member
