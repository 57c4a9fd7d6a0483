"""Warm horses guard the framework: a job that replaced what the horse relies on
does not get to speak for the next jobs.

A warm horse (warm.py) runs up to N jobs in one interpreter. A job that rebinds
``fusionworker.core.codec.dumps`` (or the report's encoding, the pipe writer,
``current_job()``'s begin/end, ``json.dumps``, ``os.write``...) would change the
result of every later job of that horse: they would be recorded with whatever
the replacement wrote. :func:`snapshot` takes the originals when the horse
starts; after each job :func:`replaced` names what is no longer the original
(one identity check per name, no import). The horse then puts the originals
back (so its last report is written by them), fails that job with
``FrameworkReplaced`` naming what it replaced, and retires.
"""

from __future__ import annotations

import json
import os
from itertools import repeat
from operator import is_ as _is
from typing import Any

from ...core import codec
from .. import progress, protocol
from . import run

#: what a warm horse's report relies on: each owner (a module or a class) and its attributes
_RELIED_ON: tuple[tuple[Any, tuple[str, ...]], ...] = (
    (codec, ("dumps", "encode", "_encode", "_flat", "_flat_keys", "compact", "_c_encoder")),
    (run, ("codec", "run_job", "call", "HorseReport")),
    (protocol, ("write_all", "HorseReport")),
    (protocol.HorseReport, ("encode", "as_dict")),
    (progress, ("begin", "end")),
    (json, ("dumps",)),
    (os, ("write", "close", "_exit")),
)


def _dotted(owner: Any) -> str:
    """A module's or a class's dotted name, as an error names it."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return str(owner.__name__)


#: (owner, attribute, the name said in the error), in :data:`_RELIED_ON`'s order
_GUARDED: tuple[tuple[Any, str, str], ...] = tuple(
    (owner, name, f"{_dotted(owner)}.{name}") for owner, names in _RELIED_ON for name in names)

Snapshot = tuple[Any, ...]


def snapshot() -> Snapshot:
    """The originals, in :data:`_GUARDED`'s order."""
    return tuple(getattr(owner, name, None) for owner, name, _ in _GUARDED)


_OWNERS = tuple(owner for owner, _, _ in _GUARDED)
_NAMES = tuple(name for _, name, _ in _GUARDED)


def replaced(originals: Snapshot) -> list[str]:
    """The names whose object is no longer the original (empty: all intact). The check
    after each job is identity only (``is``, never ``==``, which a replacement could
    answer), made in C calls without a Python frame per name (``_is`` bound here: a job
    that rebinds ``operator.is_`` does not reach it); the names are worked out only when
    one changed."""
    if all(map(_is, map(getattr, _OWNERS, _NAMES, repeat(None)), originals)):
        return []
    return [said for (owner, name, said), orig in zip(_GUARDED, originals)
            if getattr(owner, name, None) is not orig]


def restore(originals: Snapshot) -> None:
    """Put every original back (the horse writes its last report with them)."""
    for (owner, name, _), orig in zip(_GUARDED, originals):
        try:
            if getattr(owner, name, None) is not orig:
                setattr(owner, name, orig)
        except (AttributeError, TypeError):
            pass


def replaced_report(names: list[str]) -> protocol.HorseReport:
    """The failure of the job that replaced ``names``."""
    shown = ", ".join(names[:5]) + (f" (and {len(names) - 5} more)" if len(names) > 5 else "")
    return protocol.HorseReport(
        ok=False, reason="exception", error_type="FrameworkReplaced",
        error_message=(f"the job replaced {shown}, which the worker's horse relies on to "
                       "report the next jobs; the job failed and its horse retired"),
        traceback="")
