"""The typed vocabulary (vocabulary.py) against the strings the Lua scripts and the docs use."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from fusionworker.core import scripts
from fusionworker.core.job import STATES, FailureReason, Job, JobStatus, WorkerState, _Vocabulary

SCRIPTS = resources.files("fusionworker.core.scripts")
#: each script as written, and as loaded (its ``F.status`` is ``'status'``, ``S.queued``
#: is ``'queued'``)
RAW = {p.name: p.read_text(encoding="utf-8") for p in SCRIPTS.iterdir() if p.name.endswith(".lua")}
LUA = {name: scripts.expand(text, name) for name, text in RAW.items()}

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


#: literals spelled like a status or a failure reason that name something else, counted
#: (one more fails): a script's reply word (``{'queued', jid, S.queued}``: the verdict,
#: then the status), a mode Python passes (enqueue_many's 'deferred', requeue's
#: 'failed'), the "queued" event, a cron entry's ``last_status``, and the 'ok' field of
#: a Redis status reply (_lib.lua's TYPE). The batch hash's ``failed`` count is
#: ``B.failed`` (record.BATCH_FIELDS)
NOT_VOCABULARY = {
    ("cancel.lua", "canceled"): 1, ("cron_tick.lua", "queued"): 2,
    ("dep_done.lua", "canceled"): 1, ("dep_done.lua", "queued"): 1,
    ("enqueue.lua", "scheduled"): 2, ("enqueue.lua", "queued"): 2,
    ("enqueue_many.lua", "deferred"): 1, ("_lib.lua", "queued"): 1,
    ("hold.lua", "held"): 2, ("requeue.lua", "failed"): 1,
    ("claim.lua", "refused"): 5, ("cancel.lua", "refused"): 1, ("hold.lua", "refused"): 1,
    ("release.lua", "refused"): 1, ("reprioritize.lua", "refused"): 1,
    ("delete.lua", "refused"): 1,
    ("reprioritize.lua", "ok"): 1, ("finish.lua", "ok"): 2, ("_lib.lua", "ok"): 1,
    ("requeue.lua", "abandoned"): 3,
}


def hand_spelled_words(name: str, text: str) -> dict[tuple[str, str], int]:
    """The string literals of script ``name``'s ``text`` (comments left out) that are a
    status or a failure reason, counted: a script says ``S.<status>``, ``R.<reason>``."""
    words = _values(JobStatus) | _values(FailureReason)
    found: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        for single, double in re.findall(r"'([^']*)'|\"([^\"]*)\"", line.split("--")[0]):
            if (single or double) in words:
                found[(name, single or double)] = found.get((name, single or double), 0) + 1
    return found


def test_no_script_spells_a_status_or_a_reason_by_hand():
    found: dict[tuple[str, str], int] = {}
    for name, text in RAW.items():
        found.update(hand_spelled_words(name, text))
    assert found == NOT_VOCABULARY


def test_the_hand_spelling_scan_finds_status_and_reason_words():
    text = ("redis.call('HSET', jkey, F.status, 'failed', F.failure_reason, \"lease\")\n"
            "if st == S.queued then end  -- 'started'\n")
    assert hand_spelled_words("sample", text) == {("sample", "failed"): 1, ("sample", "lease"): 1}
    assert scripts.expand("st == S.queued, R.lease", "sample") == "st == 'queued', 'lease'"
    with pytest.raises(scripts.UnknownName, match=r"sample:1: S\.queud names no job status"):
        scripts.expand("st == S.queud", "sample")
    with pytest.raises(scripts.UnknownName, match=r"sample:2: R\.oom names no failure reason"):
        scripts.expand("\nR.oom", "sample")
    # every status and every reason has its name, the member's lower-cased
    assert {f"S.{m.name.lower()}" for m in JobStatus} | {f"R.{m.name.lower()}" for m in
                                                          FailureReason} <= set(scripts._names())


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
