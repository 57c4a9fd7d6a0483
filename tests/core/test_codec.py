"""The codec's flat fast paths (a flat list or dict of plain values, most jobs'
arguments, without a call per item) give exactly what the general path gives."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from enum import IntEnum
from typing import Any

import pytest

from fusionworker.core import codec


class Level(IntEnum):
    LOW = 1


FLAT: list[Any] = [
    [], (), {}, [1, "a", None, True, False, 1.5, -0.0, 10**30], ("x", 2),
    {"to": "+1555", "n": 3, "ok": True, "none": None, "f": 2.5},
    [Level.LOW], {"level": Level.LOW}, ["é", "\u2028"],
]
NOT_FLAT: list[Any] = [
    [[1]], {"a": [1]}, [{"a": 1}], [b"x"], [date(2026, 1, 2)], {"d": Decimal("1.5")},
    {"__fw__": "x", "v": 1}, {"__fw__": 1}, [{1, 2}],
]


@pytest.mark.parametrize("value", FLAT + NOT_FLAT)
def test_encode_gives_what_the_general_path_gives_as_a_new_container(value: Any) -> None:
    got = codec.encode(value)
    assert got == codec._encode(value, None, 0)
    assert type(got) is type(codec._encode(value, None, 0))
    assert got is not value
    assert codec.decode(got) == codec._decode(got, 0)


@pytest.mark.parametrize("value", FLAT + NOT_FLAT)
def test_decode_gives_what_the_general_path_gives_as_a_new_container(value: Any) -> None:
    encoded = codec._encode(value, None, 0)
    got = codec.decode(encoded)
    assert got == codec._decode(encoded, 0)
    assert got is not encoded


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_a_flat_list_or_dict_still_refuses_what_json_cannot_hold(bad: float) -> None:
    with pytest.raises(codec.UnsupportedType, match=r"args\[1\] is"):
        codec.encode([1, bad], "args")
    with pytest.raises(codec.UnsupportedType, match=r"kwargs\['x'\] is"):
        codec.encode({"x": bad}, "kwargs")


def test_a_non_string_key_is_still_refused() -> None:
    with pytest.raises(codec.UnsupportedType, match="key of type int"):
        codec.encode({1: "a"}, "kwargs")


def test_a_tagged_dict_read_back_is_still_decoded() -> None:
    assert codec.decode({"__fw__": "date", "v": "2026-01-02"}) == date(2026, 1, 2)
    assert codec.loads('{"__fw__":"dict","v":[["__fw__",1]]}') == {"__fw__": 1}


@pytest.mark.parametrize("value", FLAT + [[[1, {"a": [None]}]], "x\"y\n", 1e300, -0.0])
def test_compact_is_the_json_module_s_compact_text(value: Any) -> None:
    encoded = codec.encode(value)
    assert codec.compact(encoded) == json.dumps(encoded, separators=(",", ":"), allow_nan=False)


def test_compact_refuses_nan_as_the_json_module_does() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        codec.compact([float("nan")])
