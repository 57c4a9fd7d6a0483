"""What ``Queue.prepare`` returns: a job validated and encoded, not written yet
(made by ``enqueue.prepare``, written by ``enqueue.write_one`` or ``write_many``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .batch import Batch

#: compact JSON keeping non-ASCII text as UTF-8 (a job's entry for ``enqueue_many.lua``),
#: without making an encoder per call
_payload = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True)
class CallData:
    """RQ's ``Queue.prepare_data(...)``: a call and its options, not tied to a queue yet;
    ``Queue.enqueue_many`` prepares it on its queue (``prepare_call``) before it writes
    anything."""

    func: Any
    args: Any = None
    kwargs: Any = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedJob:
    """A validated, encoded job that is not written yet (``Queue.prepare``)."""

    queue: str
    id: str
    func: str
    priority: int
    mode: str
    when: float
    unique_key: str
    #: hash fields as ``[name, value, ...]`` strings (``job.encode_fields``)
    fields: list[str] = field(repr=False)
    #: this job's entry of ``enqueue_many.lua``'s JSON argument, as a list (``payload``)
    entry: list[Any] = field(repr=False, default_factory=list, compare=False)
    #: dependencies as ``(queue, job_id)`` (``depends_on``; then ``mode`` is deferred)
    deps: tuple[tuple[str, str], ...] = ()
    #: the ``Batch`` the job joins (``batch=``), counted once written
    batch: Batch | None = field(default=None, repr=False, compare=False)
    #: the arguments as encoded (``codec.encode``; their JSON is in ``fields``): the
    #: returned Job decodes them instead of parsing that JSON again
    encoded_args: Any = field(default=None, repr=False, compare=False)
    encoded_kwargs: Any = field(default=None, repr=False, compare=False)

    @property
    def payload(self) -> str:
        """This job's entry of ``enqueue_many.lua``'s JSON argument: made when a bulk
        write sends it (``enqueue`` of one job sends ``fields`` and needs none)."""
        return _payload(self.entry)


def prepared(**values: Any) -> PreparedJob:
    """A PreparedJob of every field, by one update of its ``__dict__``: the ``__init__``
    of a frozen dataclass sets each field through ``object.__setattr__``, at 3x the cost."""
    made = object.__new__(PreparedJob)
    made.__dict__.update(values)
    return made
