"""Tagged JSON: job arguments and results beyond plain JSON, without pickle.

Plain JSON values (``None``, ``bool``, ``int``, ``float``, ``str``, lists and
string-keyed dicts) are written as themselves; tuples become lists. Six more
types are written as a one-key-plus-value object tagged ``"__fw__"``:

==================  =====================================================
Python value        JSON
==================  =====================================================
``datetime``        ``{"__fw__": "datetime", "v": "2026-11-23T08:00:00+00:00"}``
``date``            ``{"__fw__": "date", "v": "2026-11-23"}``
``Decimal``         ``{"__fw__": "decimal", "v": "12.50"}``
``UUID``            ``{"__fw__": "uuid", "v": "6f1c...e2"}``
``bytes``           ``{"__fw__": "bytes", "v": "<base64>"}``
``set``             ``{"__fw__": "set", "v": [<elements>]}``
``frozenset``       ``{"__fw__": "frozenset", "v": [<elements>]}``
a dict that has a   ``{"__fw__": "dict", "v": [[key, value], ...]}`` (so a user's own
``"__fw__"`` key    ``"__fw__"`` key round-trips too)
==================  =====================================================

Anything else (a model instance, a numpy array, ``complex``, a dict with
non-string keys, NaN/infinity) is refused with :class:`UnsupportedType`,
whose message names the type and where it sits (``args[1]``,
``kwargs['when']['at']``): at ``enqueue`` before anything is written, and in
the horse for a result (the job fails with reason ``exception``, error type
``ResultNotSerializable``).
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from ..exceptions import FusionWorkerError

TAG = "__fw__"

#: the types written as themselves
PLAIN = (type(None), bool, int, float, str)


class UnsupportedType(FusionWorkerError, TypeError):
    """A value cannot be written as tagged JSON (see :mod:`fusionworker.codec`)."""


def _tagged(kind: str, value: Any) -> dict[str, Any]:
    return {TAG: kind, "v": value}


def encode(value: Any, where: str = "value") -> Any:
    """``value`` as plain JSON-able data (tags added); ``where`` names it in errors."""
    try:
        return _encode(value, None)
    except UnsupportedType:   # again, naming where the value sits (not built for every item)
        return _encode(value, where)


_INFINITIES = (float("inf"), float("-inf"))


def _encode(value: Any, where: str | None) -> Any:
    """:func:`encode`; ``where`` None: the paths of the items are not built (error text
    without them), so the common case makes no string per item."""
    if isinstance(value, PLAIN):
        if isinstance(value, float) and (value != value or value in _INFINITIES):
            raise UnsupportedType(f"{where or 'value'} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, (list, tuple)):
        if where is None:
            return [_encode(v, None) for v in value]
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnsupportedType(
                    f"{where or 'value'} has a key of type {type(k).__name__} ({k!r}); "
                    "only string keys are supported")
            out[k] = _encode(v, None if where is None else f"{where}[{k!r}]")
        if TAG in out:
            return _tagged("dict", [[k, v] for k, v in out.items()])
        return out
    if isinstance(value, datetime):
        return _tagged("datetime", value.isoformat())
    if isinstance(value, date):
        return _tagged("date", value.isoformat())
    if isinstance(value, Decimal):
        return _tagged("decimal", str(value))
    if isinstance(value, UUID):
        return _tagged("uuid", str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _tagged("bytes", base64.b64encode(bytes(value)).decode("ascii"))
    if isinstance(value, (set, frozenset)):
        kind = "frozenset" if isinstance(value, frozenset) else "set"
        return _tagged(kind, [_encode(v, None if where is None else f"{where}{{{i}}}")
                              for i, v in enumerate(value)])
    raise UnsupportedType(
        f"{where or 'value'} is of type {type(value).__module__}.{type(value).__qualname__}, "
        "which fusionworker cannot serialize (supported: JSON types, datetime, date, Decimal, "
        "UUID, bytes, set, frozenset)")


def _decode_tag(kind: str, v: Any) -> Any:
    if kind == "datetime":
        return datetime.fromisoformat(v)
    if kind == "date":
        return date.fromisoformat(v)
    if kind == "decimal":
        return Decimal(v)
    if kind == "uuid":
        return UUID(v)
    if kind == "bytes":
        return base64.b64decode(v)
    if kind == "set":
        return {decode(x) for x in v}
    if kind == "frozenset":
        return frozenset(decode(x) for x in v)
    if kind == "dict":
        return {k: decode(x) for k, x in v}
    raise ValueError(f"unknown tag {kind!r}")


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        kind = value.get(TAG)
        if isinstance(kind, str) and len(value) == 2 and "v" in value:
            return _decode_tag(kind, value["v"])
        return {k: decode(v) for k, v in value.items()}
    return value


#: compact JSON text, without making an encoder per call (json.dumps with arguments does)
_compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps(value: Any, where: str = "value") -> str:
    """Compact tagged JSON text of ``value``."""
    return _compact(encode(value, where))


def loads(text: str) -> Any:
    """The value :func:`dumps` wrote."""
    return decode(json.loads(text))
