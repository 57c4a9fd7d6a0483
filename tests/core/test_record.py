"""The record schema (fusionworker/core/record.py) is the one place a job's fields are
named: the Lua scripts name them as ``F.<field>`` (and keys as ``K.<key>``, from
keys.py), replaced when a script is loaded; every field the web and the CLI read on a
job hash is in it, and Job.from_hash / Job.to_dict are generated from it."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from importlib import resources
from pathlib import Path

import pytest

from fusionworker.core import keys, record, scripts
from fusionworker.core.config import SETTINGS
from fusionworker.core.job import FailureReason, Job, JobStatus

PACKAGE = Path(record.__file__).resolve().parents[1]
#: each script's text as written, and as loaded (``F.x`` / ``K.x`` replaced)
RAW = {p.name: p.read_text(encoding="utf-8")
       for p in resources.files("fusionworker.core.scripts").iterdir() if p.name.endswith(".lua")}
LUA = {name: scripts.expand(text, name) for name, text in RAW.items()}

#: a job hash in a script: ``jkey`` or ``base .. 'job:' .. <id>``
_JOB_KEY = re.compile(r"^(?:jkey|(?:base|KEYS\[1\])\s*\.\.\s*'job:'\s*\.\.\s*\w+)$")
_CALL = re.compile(r"\b(hget|hmget|HSET|HDEL|HGET|HMGET|HINCRBY|HINCRBYFLOAT|HSETNX|HEXISTS)"
                   r"'?\s*,?\s*\(?")


def _args(text: str, start: int) -> list[str]:
    """The comma-separated arguments of the call whose '(' is at ``start``."""
    depth, out, item = 0, [], ""
    for ch in text[start + 1:]:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(item.strip())
            item = ""
        else:
            item += ch
    return [*out, item.strip()]


def lua_job_fields() -> dict[str, set[str]]:
    """Field name -> scripts, of every literal field a script reads or writes on a job hash."""
    found: dict[str, set[str]] = {}
    for name, text in LUA.items():
        for m in re.finditer(r"\b(hget|hmget|redis\.call)\(", text):
            args = _args(text, m.end() - 1)
            if m.group(1) == "redis.call":
                command, args = args[0].strip("'").upper(), args[1:]
                if command not in {"HSET", "HDEL", "HGET", "HMGET", "HINCRBY",
                                   "HINCRBYFLOAT", "HSETNX", "HEXISTS"}:
                    continue
            else:
                command = m.group(1).upper()
            if not args or not _JOB_KEY.match(args[0]):
                continue
            rest = args[1:]
            names = rest[::2] if command in {"HSET", "HSETNX", "HINCRBY", "HINCRBYFLOAT"} else rest
            for item in names:
                lit = re.fullmatch(r"'(\w+)'", item)
                if lit:
                    found.setdefault(lit.group(1), set()).add(name)
    return found


def raw_job_reads(source: str, where: str) -> list[tuple[str, str | None]]:
    """The ``hget``/``hmget``/``hgetall`` calls of ``source`` on ``<keys>.job(id)``:
    (``where:line``, each literal field name read, or None for a whole record)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"hget", "hmget", "hgetall"} and node.args):
            continue
        key = node.args[0]
        if not (isinstance(key, ast.Call) and isinstance(key.func, ast.Attribute)
                and key.func.attr == "job"):
            continue
        at = f"{where}:{node.lineno}"
        if node.func.attr == "hgetall" or len(node.args) < 2:
            found.append((at, None))
            continue
        names = node.args[1].elts if isinstance(node.args[1], (ast.List, ast.Tuple)) \
            else [node.args[1]]
        found += [(at, n.value) for n in names
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return found


def python_job_reads(layer: str) -> list[tuple[str, str | None]]:
    """:func:`raw_job_reads` of every module of ``layer``."""
    return [read for path in sorted((PACKAGE / layer).rglob("*.py"))
            for read in raw_job_reads(path.read_text(encoding="utf-8"), path.name)]


def python_job_fields(layer: str) -> dict[str, set[str]]:
    """Field names the modules of ``layer`` read with ``hget``/``hmget`` on ``<keys>.job(id)``."""
    found: dict[str, set[str]] = {}
    for at, name in python_job_reads(layer):
        if name is not None:
            found.setdefault(name, set()).add(at.partition(":")[0])
    return found


def test_the_scanners_find_fields():
    """The scans below can fail: they find what the code is known to use."""
    lua = lua_job_fields()
    assert {"status", "token", "attempts", "failure_reason", "at_front", "waited"} <= set(lua)
    sample = ('pipe.hget(keys.queue(q).job(i), "func")\n'
              'r.hmget(q.qkeys.job(i), ["func", "error_type"])\n'
              'r.hgetall(q.qkeys.job(i))\nr.hgetall(q.qkeys.batch(i))\n')
    assert raw_job_reads(sample, "m.py") == [
        ("m.py:1", "func"), ("m.py:2", "func"), ("m.py:2", "error_type"), ("m.py:3", None)]


def test_the_web_reads_job_records_through_the_read_model():
    """core/job_reads.py reads them: the web names no hash field and parses no text."""
    assert python_job_reads("web") == []


def test_every_job_field_the_scripts_use_is_in_the_schema():
    unknown = {f: sorted(where) for f, where in lua_job_fields().items()
               if f not in record.HASH_FIELDS}
    assert unknown == {}


#: the names of each hash a script may spell: a job's fields in every script; a batch's
#: fields and callback kinds where the script names the batch's key, a cron entry's
#: where it names the entry's (record.BATCH_FIELDS, BATCH_CALLBACKS, CRON_FIELDS)
def hash_names(text: str) -> set[str]:
    names = set(record.HASH_FIELDS)
    if re.search(r"\bK\.batch\b", text):
        names |= {*record.BATCH_FIELDS, *record.BATCH_CALLBACKS}
    if re.search(r"\bK\.cron_entry\b", text):
        names |= set(record.CRON_FIELDS)
    return names


#: literals spelled like a field (:func:`hash_names`) that name something else: a field
#: of the "queued" event (events.make_event), a reply word, an argument's value;
#: counted, so one more fails. No job, batch or cron entry field is spelled by hand
NOT_FIELDS = {
    ("_lib.lua", "queue"): 1, ("_lib.lua", "priority"): 1,     # queued_event()
    ("claim.lua", "queue"): 1, ("claim.lua", "priority"): 1,   # processing_event(): the
    ("claim.lua", "worker"): 1,                                  # event's names, not fields
    ("hold.lua", "group"): 1,                                    # reply words
    ("batch_done.lua", "fired"): 1, ("cron_tick.lua", "paused"): 1,
    ("cron_tick.lua", "catch_up"): 1,                            # the reason argued
}


#: a key spelled on: ``base .. 'pending'``, ``bkey .. ':ended'`` (not ``jkey .. ' holds'``)
_KEY_SPELLED = re.compile(r"\b(?:base|KEYS\[1\]|\w*key)\s*\.\.\s*['\"][^\s'\"]")


def hand_spelled(name: str, text: str) -> tuple[dict[tuple[str, str], int], list[str]]:
    """In script ``name``'s ``text`` (comments left out): the string literals that are a
    field's name (:func:`hash_names`), counted, and the keys spelled as
    ``base .. '<suffix>'``."""
    fields: dict[tuple[str, str], int] = {}
    keys: list[str] = []
    names = hash_names(text)
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("--")[0]
        for lit in re.findall(r"'([^']*)'|\"([^\"]*)\"", code):
            if (lit[0] or lit[1]) in names:
                fields[(name, lit[0] or lit[1])] = fields.get((name, lit[0] or lit[1]), 0) + 1
        keys += [f"{name}:{n}" for _ in _KEY_SPELLED.findall(code)]
    return fields, keys


def test_no_script_spells_a_job_field_or_a_queue_key_by_hand():
    fields: dict[tuple[str, str], int] = {}
    keys: list[str] = []
    for name, text in RAW.items():
        found, spelled = hand_spelled(name, text)
        fields.update(found)
        keys += spelled
    assert fields == NOT_FIELDS
    assert keys == []


def test_the_hand_spelling_scan_finds_what_it_looks_for():
    """What the scripts said before ``F.``/``K.``: both kinds are found (and comments not)."""
    found, keys = hand_spelled("sample", "local st = hget(base .. 'job:' .. jid, 'status')\n"
                               "redis.call('HSET', jkey, \"token\", '')  -- 'attempts'\n"
                               "redis.call('SADD', bkey .. ':ended', ref)\n"
                               "return 'WRONGTYPE ' .. jkey .. ' holds a hash'\n")
    assert found == {("sample", "status"): 1, ("sample", "token"): 1}
    assert keys == ["sample:1", "sample:3"]
    # a batch's and a cron entry's fields where the script names their key
    found, _ = hand_spelled("sample", "local b = base .. K.batch .. bid\n"
                            "hget(b, 'sealed', 'next_run')\n")
    assert found == {("sample", "sealed"): 1}
    found, _ = hand_spelled("sample", "local e = base .. K.cron_entry .. name\n"
                            "hget(e, 'next_run', B.total, C.runs)\n")
    assert found == {("sample", "next_run"): 1}


def test_the_scripts_names_come_from_the_schema():
    expanded = scripts.expand("hget(base .. K.job .. jid, F.worker_name, F.waited)", "sample")
    assert expanded == "hget(base .. 'job:' .. jid, 'worker', 'waited')"
    assert scripts.expand("K.rate_log K.cron_entry", "sample") == "'rate:log' 'cron:'"
    # keys.py's every key a script can name: a suffix that the id follows, or a whole one
    suffixes = keys.script_suffixes()
    assert suffixes["job"] == "job:" and suffixes["pending"] == "pending"
    assert "history" not in suffixes   # takes two names
    # a key that goes on after the id: its head, and its tail as ``<name>_tail``
    assert (suffixes["batch_ended"], suffixes["batch_ended_tail"]) == ("batch:", ":ended")
    assert scripts.expand("base .. K.batch_ended .. bid .. K.batch_ended_tail", "sample") \
        == "base .. 'batch:' .. bid .. ':ended'"
    assert keys.QueueKeys("p", "q").batch_ended("b") == "p:{q}:batch:b:ended"
    assert all(v.isprintable() and "'" not in v for v in suffixes.values())
    # a name the schema does not have fails when the script is loaded, named by file:line
    with pytest.raises(scripts.UnknownName, match=r"sample:2: F\.statu names no job record"):
        scripts.expand("local a = F.status\nlocal b = F.statu", "sample")
    with pytest.raises(scripts.UnknownName, match=r"sample:1: K\.jobs names no queue key"):
        scripts.expand("base .. K.jobs", "sample")
    # every script loads: each of its names is the schema's
    for name in scripts.NAMES:
        assert not re.search(r"\b[FKSRBC]\.[A-Za-z_]", scripts.source(name)), name
    assert scripts.expand("hget(b, B.sealed, B.on_success); hget(e, C.next_run)", "s") == \
        "hget(b, 'sealed', 'on_success'); hget(e, 'next_run')"
    with pytest.raises(scripts.UnknownName, match=r"s:1: C\.nxt names no cron entry field"):
        scripts.expand("hget(e, C.nxt)", "s")


def test_every_job_field_the_web_cli_and_ops_read_is_in_the_schema():
    for layer in ("web", "cli", "ops"):
        unknown = {f: sorted(w) for f, w in python_job_fields(layer).items()
                   if f not in record.HASH_FIELDS}
        assert unknown == {}, layer


def test_the_job_module_documents_exactly_the_schemas_fields():
    from fusionworker.core import job

    documented = set(re.findall(r"^``(\w+)``\s", job.__doc__ or "", re.M))
    assert documented == set(record.HASH_FIELDS)


def test_from_hash_and_to_dict_are_generated_from_the_schema():
    data = {"id": "j", "queue": "q", "func": "m:f", "args": "[1]", "kwargs": '{"a": 2}',
            "priority": "7", "seq": "3", "timeout": "12.5", "status": "failed",
            "enqueued_at": "1.5", "attempts": "2", "failure_reason": "timeout",
            "worker": "w.1", "depends_on": '["q:a"]', "allow_dependency_failure": "1",
            "has_dependents": "1", "result_ttl": "60", "retry_intervals": "[1, 2.5]",
            "meta": '{"k": "v"}', "description": "hello", "at_front": "1"}
    job = Job.from_hash(data)
    assert (job.priority, job.seq, job.timeout, job.attempts) == (7, 3, 12.5, 2)
    assert job.status is JobStatus.FAILED and job.failure_reason is FailureReason.TIMEOUT
    assert job.worker_name == "w.1" and job.description == "hello"
    assert job.depends_on == ["q:a"] and job.allow_dependency_failure and job.has_dependents
    assert (job.result_ttl, job.retry_intervals, job.meta) == (60, [1, 2.5], {"k": "v"})
    shown = job.to_dict()
    assert list(shown) == [record.hash_name(f) for f in record.FIELDS if f.metadata["api"]]
    assert shown["worker"] == "w.1" and shown["args"] == [1] and "token" not in shown
    # every record field has its metadata, and the Job's fields are the record's
    assert all(f.metadata["kind"] in record.READERS or f.metadata["kind"] == "payload"
               for f in record.FIELDS)
    own = {f.name for f in fields(Job)} - {f.name for f in record.FIELDS}
    assert own == {"deduplicated", "_queue"}


def test_made_job_is_the_job_the_constructor_makes():
    """made_job (every job's path: an enqueue, a claim, a horse's job) gives the object
    Job(**given) gives: the same fields, in the same order, and fresh lists and dicts."""
    from fusionworker.core.job import made_job
    from fusionworker.runtime.protocol import RunRequest, job_of

    data = {"id": "j", "queue": "q", "func": "m:f", "args": "[1]", "kwargs": '{"a": 2}',
            "priority": "7", "status": "failed", "meta": '{"k": "v"}', "description": "d"}
    read = record.read_fields(data, {"args": [1], "kwargs": {"a": 2}, "result": None})
    for given in ({"id": "j", "queue": "q", "func": "m:f"}, read,
                  {"id": "j", "queue": "q", "func": "m:f", "args": [1], "timeout": 3.0,
                   "attempts": 2, "max_retries": 1, "_queue": object()}):
        made, built = made_job(dict(given)), Job(**given)
        assert type(made) is Job and list(vars(made).items()) == list(vars(built).items())
    first, second = made_job({"id": "a", "queue": "q", "func": "m:f"}), made_job(
        {"id": "b", "queue": "q", "func": "m:f"})
    first.args.append(1)
    first.kwargs["a"] = first.meta["k"] = 1
    assert (second.args, second.kwargs, second.meta) == ([], {}, {})
    assert vars(Job.from_hash(data)) == vars(Job(**read))
    sent = Job("j", "q", "m:f", args=[1, "x"], kwargs={"a": [2]}, timeout=5.0, attempts=1,
               max_retries=3, meta={"k": 1})
    assert vars(job_of(RunRequest.of(sent).body)) == vars(Job(
        "j", "q", "m:f", args=[1, "x"], kwargs={"a": [2]}, timeout=5.0, attempts=1,
        max_retries=3, meta={"k": 1}))


def test_read_fields_reads_every_kind_present_absent_or_empty():
    """read_fields answers an absent or empty field itself (a record holds about 15 of
    its 50) and gives a text to the kind's reader: what it gives, for every field."""
    from fusionworker.core.vocabulary import JobStatus

    absent = {"str": "", "text": None, "int": 0, "float": None, "ttl": None,
              "timeout": record.DEFAULT_TIMEOUT, "status": JobStatus.QUEUED, "reason": None,
              "flag": False, "meta": {}, "str_list": None, "num_list": None}
    present = {
        "str": lambda v: v, "text": lambda v: v, "int": record._int, "float": record._float,
        "ttl": record._ttl, "timeout": lambda v: record._float(v) or record.DEFAULT_TIMEOUT,
        "status": JobStatus.read, "reason": FailureReason.read, "flag": lambda v: v == "1",
        "meta": record._meta, "str_list": lambda v: record._json_list(v, str),
        "num_list": lambda v: record._json_list(v, (int, float))}
    samples = ["0", "1", "-3", "1.5", "nan", "x", '["a"]', "[1, 2.5]", '{"a": 1}', "timeout",
               "finished"]
    payload = {"args": [], "kwargs": {}, "result": None}
    for f in record.FIELDS:
        kind = f.metadata["kind"]
        if kind == "payload":
            continue
        name = record.hash_name(f)
        for data, want in [({}, absent[kind]), ({name: ""}, absent[kind]),
                           *(({name: v}, present[kind](v)) for v in samples)]:
            got = record.read_fields(data, payload)[f.name]
            assert (got, type(got)) == (want, type(want)), (f.name, data)
    assert record._int("x") == 0 and record._float("inf") is None and record._ttl("7") == 7
    first, second = record.read_fields({}, payload), record.read_fields({}, payload)
    assert first["meta"] == {} and first["meta"] is not second["meta"]


def test_the_timeout_default_is_the_settings():
    default = next(s.default for s in SETTINGS if s.name == "job_timeout")
    assert record.DEFAULT_TIMEOUT == default
    assert Job("j", "q", "m:f").timeout == default == Job.from_hash({"id": "j"}).timeout


def test_every_field_an_enqueue_writes_is_in_the_schema(queue, r):
    from fusionworker import Batch
    from fusionworker.exceptions import Retry

    q = queue("rec")
    parent = q.enqueue("tests.jobs:noop")
    with Batch(queue=q) as batch:
        job = q.enqueue_call(
            "tests.jobs:noop", args=[1], kwargs={"a": 2}, retry_delay=3, unique_key="u",
            group="g", on_failure_url="http://127.0.0.1:9/x", depends_on=[parent],
            allow_dependency_failure=True, batch=batch, description="d", result_ttl=60,
            failure_ttl=60, ttl=600, at_front=True, retry=Retry(max=2, interval=[1, 2]),
            on_success="tests.jobs:echo", on_failure="tests.jobs:echo", meta={"k": 1})
    written = set(r.hgetall(q.qkeys.job(job.id)))
    assert {"unique_key", "group", "depends_on", "batch", "description", "ttl",
            "retry_intervals", "on_success", "meta"} <= written
    assert written - record.HASH_FIELDS == set()


def lua_callers() -> set[str]:
    """Modules that send Lua of their own (``register_script``, ``eval``, ``evalsha``)."""
    return {str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"register_script", "eval", "evalsha"}}


def test_every_script_lives_under_core_scripts():
    """Elsewhere a script spells its fields and keys by hand (the dashboard's run-now and
    Job.save_meta did): scripts/__init__.py sends them; the chart's lock release
    (events/metrics_history.py) touches no job."""
    assert lua_callers() == {"core/scripts/__init__.py", "events/metrics_history.py"}


def test_a_scripts_sha_is_fixed_in_a_process(redis_url):
    """The names are written in once (the source is cached): every client registers
    the same text, so Redis runs one cached script per name."""
    import hashlib

    import redis

    one, two = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url)
    for name in scripts.NAMES:
        sha = hashlib.sha1(scripts.source(name).encode()).hexdigest()
        assert getattr(scripts.Scripts(one), name).script.sha == sha
        assert getattr(scripts.Scripts(two), name).script.sha == sha
    one.close()
    two.close()
