"""The warm horse's guard of the framework (horse/guard.py), in this process: what it
says after a job that left the framework alone, and after one that replaced a part of
it, even with an object that claims to equal the original."""

from __future__ import annotations

import json
from typing import Any

from fusionworker.core import codec
from fusionworker.runtime.horse import guard


class _EqualToAll:
    """A replacement that says it equals anything (``==``): only ``is`` sees through it."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        return "PATCHED"


def test_nothing_is_replaced_after_a_job_that_left_the_framework_alone() -> None:
    assert guard.replaced(guard.snapshot()) == []


def test_a_replacement_that_claims_equality_is_named_and_restored() -> None:
    originals = guard.snapshot()
    dumps, json_dumps = codec.dumps, json.dumps
    try:
        codec.dumps = _EqualToAll()        # type: ignore[assignment]
        json.dumps = _EqualToAll()         # type: ignore[assignment]
        assert guard.replaced(originals) == ["fusionworker.core.codec.dumps", "json.dumps"]
        guard.restore(originals)
        assert codec.dumps is dumps and json.dumps is json_dumps
        assert guard.replaced(originals) == []
    finally:
        codec.dumps, json.dumps = dumps, json_dumps


def test_a_deleted_attribute_counts_as_replaced() -> None:
    originals = guard.snapshot()
    write_all = guard.protocol.write_all
    try:
        del guard.protocol.write_all
        assert guard.replaced(originals) == ["fusionworker.runtime.protocol.write_all"]
    finally:
        guard.protocol.write_all = write_all


def test_a_job_that_rebinds_operator_is_does_not_blind_the_guard() -> None:
    import operator

    originals = guard.snapshot()
    is_, dumps = operator.is_, codec.dumps
    try:
        operator.is_ = lambda a, b: True     # type: ignore[assignment]
        codec.dumps = _EqualToAll()          # type: ignore[assignment]
        assert guard.replaced(originals) == ["fusionworker.core.codec.dumps"]
    finally:
        operator.is_, codec.dumps = is_, dumps


def test_the_codec_s_fast_path_and_json_text_are_guarded_too() -> None:
    """A result's text goes through ``codec.compact`` and a flat value through
    ``codec._flat``: a job that rebinds either is named like one that rebinds dumps."""
    originals = guard.snapshot()
    compact, flat = codec.compact, codec._flat
    try:
        codec.compact = _EqualToAll()          # type: ignore[assignment]
        codec._flat = lambda items: True       # type: ignore[assignment]
        assert guard.replaced(originals) == ["fusionworker.core.codec._flat",
                                             "fusionworker.core.codec.compact"]
        guard.restore(originals)
        assert codec.compact is compact and codec._flat is flat
    finally:
        codec.compact, codec._flat = compact, flat
