"""The job record's schema: the one place its fields are named.

:class:`JobRecord` lists the fields of the HASH ``fw:{queue}:job:<id>`` that a job
reads, each with its metadata: the hash field (``hash``, when the attribute is named
otherwise), how its text is read (``kind``: :data:`READERS`) and whether the API's
JSON shows it (``api``). :func:`from_hash` and :func:`to_dict` are generated from
that list; :data:`HASH_ONLY` names the fields the scripts keep beside it, and the Lua
scripts' ``F.<name>`` are :data:`SCRIPT_FIELDS`. ``Job`` (job.py) is the I/O handle on
top of it; core/job_reads.py reads records for the web. ``tests/core/test_record.py``
checks that no script spells a field and every field the web, CLI and ops use is here.

The two other hashes the scripts write are named here too: a batch's
(:data:`BATCH_FIELDS`, the scripts' ``B.<name>``) and a cron entry's
(:data:`CRON_FIELDS`, ``C.<name>``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any, Generic, TypeVar

from . import codec
from .config import _default
from .vocabulary import FailureReason, JobStatus

R = TypeVar("R")

#: a job's hard time limit when its record has none: FUSIONWORKER_JOB_TIMEOUT's default
DEFAULT_TIMEOUT: float = float(_default("job_timeout"))


def _f(default: Any = None, *, kind: str = "text", hash: str | None = None,
       api: bool = False, factory: Callable[[], Any] | None = None,
       compare: bool = True) -> Any:
    """A record field: ``kind`` reads its text (:data:`READERS`), ``hash`` is its name in
    the hash when not the attribute's, ``api``: shown in the API's JSON."""
    meta = {"kind": kind, "hash": hash, "api": api}
    if factory is not None:
        return field(default_factory=factory, metadata=meta, compare=compare)
    return field(default=default, metadata=meta, compare=compare)


@dataclass(repr=False)
class JobRecord(Generic[R]):
    """The fields of a job's record (see the module docstring); hash names in docs/design.md."""

    id: str = field(metadata={"kind": "str", "hash": None, "api": True})
    queue: str = field(metadata={"kind": "str", "hash": None, "api": True})
    func: str = field(metadata={"kind": "str", "hash": None, "api": True})
    args: list[Any] = _f(kind="payload", api=True, factory=list)
    kwargs: dict[str, Any] = _f(kind="payload", api=True, factory=dict)
    priority: int = _f(0, kind="int", api=True)
    #: per-queue enqueue sequence number (FIFO inside a priority)
    seq: int = _f(0, kind="int")
    timeout: float = _f(DEFAULT_TIMEOUT, kind="timeout", api=True)
    status: JobStatus = _f(JobStatus.QUEUED, kind="status", api=True)
    enqueued_at: float | None = _f(kind="float", api=True)
    scheduled_for: float | None = _f(kind="float", api=True)
    started_at: float | None = _f(kind="float", api=True)
    ended_at: float | None = _f(kind="float", api=True)
    attempts: int = _f(0, kind="int", api=True)
    #: times the fork server or the worker died under the job (runtime/recorder.py,
    #: requeue.lua 'reap': given back uncounted)
    shared_deaths: int = _f(0, kind="int")
    #: of those, the worker's (the reaper's): the job runs alone in its worker (solo.py)
    worker_deaths: int = _f(0, kind="int")
    max_retries: int = _f(0, kind="int", api=True)
    retry_delay: float | None = _f(kind="float")
    result: R | None = _f(kind="payload", api=True)
    error_type: str | None = _f(api=True)
    error_message: str | None = _f(api=True)
    traceback: str | None = _f(api=True)
    failure_reason: FailureReason | None = _f(kind="reason", api=True)
    #: why its last failure was its end (no retry), in words (runtime/recorder.py)
    not_retried: str | None = _f(api=True)
    worker_name: str | None = _f(hash="worker", api=True)
    token: str | None = _f()
    group: str | None = _f(api=True)
    unique_key: str | None = _f(api=True)
    on_failure_url: str | None = _f()
    duration: float | None = _f(kind="float", api=True)
    traceparent: str | None = _f()
    tracestate: str | None = _f()
    #: ``"queue:job_id"`` refs this job waits on (``depends_on``), or None
    depends_on: list[str] | None = _f(kind="str_list", api=True)
    allow_dependency_failure: bool = _f(False, kind="flag", api=True)
    #: another job waits on this one (set when it registered; see workflows.py)
    has_dependents: bool = _f(False, kind="flag")
    #: ``"queue:batch_id"`` of the batch the job belongs to (batch.py), or None
    batch: str | None = _f(api=True)
    #: what the job last reported with ``current_job().set_progress`` (see progress.py)
    progress: float | None = _f(kind="float", api=True)
    progress_message: str | None = _f(api=True)
    #: when it reported it (epoch seconds, the horse's clock)
    progress_at: float | None = _f(kind="float", api=True)
    #: what the job keeps in ``current_job().meta`` (kept across its attempts)
    meta: dict[str, Any] = _f(kind="meta", api=True, factory=dict)
    #: rate-limited progress/meta writes the worker made while the job ran
    progress_writes: int = _f(0, kind="int")
    #: this job's own retention once finished / failed (None: the worker's setting)
    result_ttl: int | None = _f(kind="ttl")
    failure_ttl: int | None = _f(kind="ttl")
    #: seconds the job may wait to be started (None: no limit)
    ttl: float | None = _f(kind="float")
    #: delays before retries 1, 2, ... (the last repeats); None: the backoff
    retry_intervals: list[float] | None = _f(kind="num_list")
    #: functions enqueued with this job's id once it finished / failed for good
    on_success: str | None = _f()
    on_failure: str | None = _f()
    #: exception classes retried (``"module.Class"``, ``"*"`` any); None: the worker's list
    retry_on: list[str] | None = _f(kind="str_list")
    #: the function enqueued with this job's id once it was stopped (``job stop``)
    on_stopped: str | None = _f()
    #: times it was requeued from the failed registry: each life's callback runs
    #: (``<id>:on_failure``, then ``<id>:on_failure:2``...; workflows.py)
    requeues: int = _f(0, kind="int")
    #: when a stop of the running job was asked (server time; ``Queue.stop``)
    stop_requested: float | None = _f(kind="float")
    #: the record's ``description`` field (optional); see ``Job.description``
    _description: str | None = _f(hash="description", compare=False)


#: fields of the hash that the scripts keep and a ``Job`` does not read (docs/design.md)
HASH_ONLY = {
    "at_front": "1: placed ahead of its priority's pending jobs when it becomes ready",
    "waited": "1 once a Job.wait subscribed: finish.lua publishes done:<id> only then",
    "cron": "the cron entry that enqueued the job",
    "cron_due": "the due time of that cron run",
    "held_from": "the queue a held job came from (hold/release)",
    "held_score": "its score there",
    "held_at": "when it was held",
    "alone": "the token of the attempt that runs alone in its worker (runtime/solo.py): "
             "that worker's death is this job's (requeue.lua 'reap')",
}


def hash_name(f: Field[Any]) -> str:
    """The hash field of a record field."""
    return str(f.metadata["hash"] or f.name)


#: the record's fields, in order
FIELDS: tuple[Field[Any], ...] = fields(JobRecord)
#: every field name of the job hash: the record's and :data:`HASH_ONLY`
HASH_FIELDS = frozenset({hash_name(f) for f in FIELDS} | set(HASH_ONLY))
#: the record's fields by the name readers give them: the attribute's, ``description``
#: for ``_description`` (its property)
BY_NAME: dict[str, Field[Any]] = {f.name.lstrip("_"): f for f in FIELDS}
#: ``F.<name>`` of the Lua scripts (scripts/__init__.py): each record field's hash name
#: under its :data:`BY_NAME` name, and :data:`HASH_ONLY`
SCRIPT_FIELDS: dict[str, str] = {
    **{name: hash_name(f) for name, f in BY_NAME.items()}, **{n: n for n in HASH_ONLY}}


# -- the other hashes the scripts write ------------------------------------------------

#: the fields of a batch's hash (``QueueKeys.batch``, core/batch.py), and the kinds of
#: callback its ``callbacks`` field (a JSON object) holds: the scripts' ``B.<name>``
BATCH_FIELDS = ("callbacks", "total", "sealed", "failed", "fired", "created_at", "ended_at")
BATCH_CALLBACKS = ("on_success", "on_complete", "on_failure")

#: the fields of a cron entry's hash (``QueueKeys.cron_entry``, core/cron.py): what
#: ``cron.add`` writes (the definition), and what a tick keeps (``cron_tick.lua``);
#: the scripts' ``C.<name>``
CRON_DEFINITION = ("name", "queue", "schedule", "func", "args", "kwargs", "priority",
                   "timezone", "catch_up", "allow_overlap", "timeout", "max_retries")
CRON_FIELDS = (*CRON_DEFINITION, "paused", "next_run", "last_due", "last_run", "last_job",
               "last_status", "last_enqueued_at", "runs", "skips", "misses")


# -- reading the hash's text -----------------------------------------------------------


# Each reader below is given a field's text, never an absent or empty one: the written
# code (:data:`READERS`) answers those itself, without a call.


def _float(value: str) -> float | None:
    """A number field; None when no finite number (NaN, infinity, not a number)."""
    try:
        found = float(value)
    except ValueError:
        return None
    return found if math.isfinite(found) else None


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def _ttl(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _meta(value: str) -> dict[str, Any]:
    try:
        found = codec.loads(value)
    except (ValueError, TypeError):
        return {}
    return found if isinstance(found, dict) else {}


def _json_list(value: str, item: type | tuple[type, ...] = object) -> list[Any] | None:
    """A JSON list field whose items are all ``item``s (numbers: finite), else None."""
    try:
        found = json.loads(value)
    except (ValueError, RecursionError):    # a field of a record that is not ours
        return None
    if not isinstance(found, list):
        return None
    for x in found:
        if not isinstance(x, item) or isinstance(x, bool) and item is not object or (
                isinstance(x, float) and not math.isfinite(x)):
            return None
    return found


#: how each ``kind`` of field is read from its text ``v`` (None: absent); ``payload``
#: fields (args, kwargs, result) are read by ``Job.from_hash``, which knows ``strict``.
#: An absent or empty field is answered here (0, None, ``{}``...), a text is given to
#: its reader: a record holds about 15 of its 50 fields, and every claim reads one
READERS: dict[str, str] = {
    "str": '{v} or ""',
    "text": "{v} or None",
    "int": "_int(x) if (x := {v}) else 0",
    "float": "_float(x) if (x := {v}) else None",
    "ttl": "_ttl(x) if (x := {v}) else None",
    "timeout": "(_float(x) if (x := {v}) else None) or DEFAULT_TIMEOUT",
    "status": "JobStatus.read({v} or JobStatus.QUEUED)",
    "reason": "FailureReason.read(x) if (x := {v}) else None",
    "flag": '{v} == "1"',
    "meta": "_meta(x) if (x := {v}) else {{}}",
    "str_list": "_json_list(x, str) if (x := {v}) else None",
    "num_list": "_json_list(x, (int, float)) if (x := {v}) else None",
    "payload": "payload[{name!r}]",
}


def _written(source: str, name: str) -> dict[str, Any]:
    """The names ``source`` defines: code written from the schema's own names (repr)
    and the templates of :data:`READERS`, no data."""
    namespace: dict[str, Any] = {
        "_int": _int, "_float": _float, "_ttl": _ttl, "_meta": _meta,
        "_json_list": _json_list, "FailureReason": FailureReason, "JobStatus": JobStatus,
        "DEFAULT_TIMEOUT": DEFAULT_TIMEOUT}
    exec(compile(source, f"<record.{name}>", "exec"), namespace)
    return namespace


def _reader() -> Callable[[dict[str, str], dict[str, Any]], dict[str, Any]]:
    """``read_fields``, written out from the schema once (as ``dataclasses`` writes
    ``__init__``): one expression per field, no call per field but its reader's."""
    items = [f"{f.name!r}: " + READERS[f.metadata["kind"]].format(
        v=f"get({hash_name(f)!r})", name=f.name) for f in FIELDS]
    source = ("def read_fields(data, payload):\n    get = data.get\n    return {"
              + ", ".join(items) + "}\n")
    namespace = _written(source, "read_fields")
    reader: Callable[[dict[str, str], dict[str, Any]], dict[str, Any]] = namespace["read_fields"]
    reader.__doc__ = ("The record's attributes from ``HGETALL``'s ``data``; ``payload`` gives "
                      "the payload fields (args, kwargs, result) already read.")
    return reader


read_fields = _reader()

_PAYLOAD = frozenset(n for n, f in BY_NAME.items() if f.metadata["kind"] == "payload")


@functools.cache
def some_fields(names: tuple[str, ...]) -> tuple[list[str], Callable[[Sequence[Any]], dict[str, Any]]]:
    """Reading some fields of records: the hash fields of record fields ``names`` (by
    their :data:`BY_NAME` names; for ``HMGET``), and what reads its reply (text, or
    bytes as UTF-8): each name -> its value read as :func:`read_fields` reads it, None
    when the field is absent or empty. Written out once per ``names``, as
    :func:`read_fields` is. ValueError for a name that is no field, or a payload one."""
    unknown = [n for n in names if n not in BY_NAME or n in _PAYLOAD]
    if unknown:
        raise ValueError(f"not a record field read alone: {', '.join(unknown)}")
    items = [f"{n!r}: None if v{i} is None or v{i} == '' or v{i} == b'' else " + READERS[
        BY_NAME[n].metadata["kind"]].format(v=f"(v{i}.decode() if type(v{i}) is bytes else v{i})",
                                            name=n)
        for i, n in enumerate(names)]
    values = "".join(f"v{i}, " for i in range(len(names)))
    source = f"def read(values):\n    {values}= values\n    return {{{', '.join(items)}}}\n"
    read: Callable[[Sequence[Any]], dict[str, Any]] = _written(source, "some_fields")["read"]
    return [hash_name(BY_NAME[n]) for n in names], read


def plain(value: Any) -> Any:
    """Tagged-JSON form of a decoded value (JSON-able for events and ``--json``)."""
    try:
        return codec.encode(value)
    except codec.UnsupportedType:
        return repr(value)


#: kinds whose value the API shows in tagged JSON
_TAGGED = frozenset({"payload", "meta"})


def to_dict(record: JobRecord[Any]) -> dict[str, Any]:
    """The API's JSON of a record: its ``api`` fields, under their hash names, as they
    were read (``Job.result`` of a job not ended would read the record again)."""
    held = vars(record)          # every field is set by the dataclass's __init__
    return {hash_name(f): plain(held[f.name]) if f.metadata["kind"] in _TAGGED
            else held[f.name] for f in FIELDS if f.metadata["api"]}
