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

Limits: a value nested deeper than :data:`MAX_DEPTH` containers (lists, dicts,
sets, tagged values) is refused by :func:`encode` (:class:`TooDeep`, an
:class:`UnsupportedType`), so nothing is written that a reader cannot read back.
:func:`loads` is the guard of everything read back: any failure of the text it is
given (not JSON, nested deeper than :data:`MAX_DEPTH` or than the parser can go, a
tag whose value does not parse) is one :class:`Unreadable` (a ``ValueError``),
never a ``RecursionError`` or another type (docs/design.md, "Decoding what Redis
holds").
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime
from decimal import Decimal
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any
from uuid import UUID

from ..exceptions import FusionWorkerError

TAG = "__fw__"

#: the types written as themselves
PLAIN = (type(None), bool, int, float, str)


#: the deepest nesting of containers a value may have: written and read (list, dict,
#: set and tagged values each count one); deeper values are refused at enqueue and
#: read back as :class:`Unreadable`
MAX_DEPTH = 100


class UnsupportedType(FusionWorkerError, TypeError):
    """A value cannot be written as tagged JSON (see :mod:`fusionworker.codec`)."""


class TooDeep(UnsupportedType):
    """A value is nested deeper than :data:`MAX_DEPTH` containers."""


class TooLarge(UnsupportedType):
    """A job's arguments are more JSON text than the ``max_args_bytes`` setting allows."""


class Unreadable(FusionWorkerError, ValueError):
    """Text read from Redis is no value :func:`dumps` could have written: not JSON,
    nested too deep, or a tag whose value does not parse. One class for every way,
    so a reader catches one thing."""


def _tagged(kind: str, value: Any) -> dict[str, Any]:
    return {TAG: kind, "v": value}


#: the exact types a flat list's or dict's items are returned as (finite floats too);
#: a subclass (an ``IntEnum`` member, say) takes the general path, which keeps it as it is
_AS_IS = frozenset({str, int, bool, type(None)})


def _flat(items: Any) -> bool:
    """Whether every item is of an :data:`_AS_IS` type or a finite float: a flat list
    of them (most jobs' arguments) encodes to a copy of itself, item for item."""
    for v in items:
        cls = v.__class__
        if cls not in _AS_IS and not (cls is float and v - v == 0.0):   # inf - inf is NaN
            return False
    return True


def _flat_keys(value: dict[Any, Any]) -> bool:
    """Whether every key is exactly a ``str`` (any other is refused, by the general path)."""
    for k in value:
        if k.__class__ is not str:
            return False
    return True


def _unnested(items: Any) -> bool:
    """Whether no item is a list or a dict: such a list (or dict without the tag)
    decodes to a copy of itself."""
    for v in items:
        if v.__class__ is list or v.__class__ is dict:
            return False
    return True


def encode(value: Any, where: str = "value") -> Any:
    """``value`` as plain JSON-able data (tags added); ``where`` names it in errors."""
    cls = value.__class__     # the common flat cases, without a call per item
    if (cls is list or cls is tuple) and _flat(value):
        return list(value)
    if cls is dict and TAG not in value and _flat(value.values()) and _flat_keys(value):
        return dict(value)
    try:
        return _encode(value, None, 0)
    except UnsupportedType:   # again, naming where the value sits (not built for every item)
        return _encode(value, where, 0)


_INFINITIES = (float("inf"), float("-inf"))


def _encode(value: Any, where: str | None, depth: int) -> Any:
    """:func:`encode`; ``where`` None: the paths of the items are not built (error text
    without them), so the common case makes no string per item. ``depth``: the
    containers around ``value``."""
    if isinstance(value, PLAIN):
        if isinstance(value, float) and (value != value or value in _INFINITIES):
            raise UnsupportedType(f"{where or 'value'} is {value!r}, which JSON cannot hold")
        return value
    depth += 1
    if depth > MAX_DEPTH:
        raise _too_deep(where)
    if isinstance(value, (list, tuple)):
        if where is None:
            return [_encode(v, None, depth) for v in value]
        return [_encode(v, f"{where}[{i}]", depth) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return _encode_dict(value, where, depth)
    if isinstance(value, (set, frozenset)):
        return _encode_set(value, where, depth)
    return _encode_scalar(value, where)


def _encode_set(value: set[Any] | frozenset[Any], where: str | None, depth: int) -> Any:
    """A set or frozenset, tagged with its kind; its items in iteration order."""
    kind = "frozenset" if isinstance(value, frozenset) else "set"
    return _tagged(kind, [_encode(v, None if where is None else f"{where}{{{i}}}", depth)
                          for i, v in enumerate(value)])


def _too_deep(where: str | None) -> TooDeep:
    """The error for a value nested past :data:`MAX_DEPTH` (a long path clipped)."""
    where = where if where is None or len(where) <= 60 else where[:40] + "..." + where[-16:]
    return TooDeep(f"{where or 'value'} is nested deeper than {MAX_DEPTH} levels "
                   "(lists, dicts, sets), which fusionworker does not write")


def _encode_dict(value: dict[Any, Any], where: str | None, depth: int) -> Any:
    """A dict of string keys, tagged when a key is the tag itself."""
    out: dict[str, Any] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise UnsupportedType(
                f"{where or 'value'} has a key of type {type(k).__name__} ({k!r}); "
                "only string keys are supported")
        out[k] = _encode(v, None if where is None else f"{where}[{k!r}]", depth)
    if TAG in out:
        return _tagged("dict", [[k, v] for k, v in out.items()])
    return out


def _encode_scalar(value: Any, where: str | None) -> Any:
    """A tagged non-JSON scalar (datetime, date, Decimal, UUID, bytes)."""
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
    raise UnsupportedType(
        f"{where or 'value'} is of type {type(value).__module__}.{type(value).__qualname__}, "
        "which fusionworker cannot serialize (supported: JSON types, datetime, date, Decimal, "
        "UUID, bytes, set, frozenset)")


def _decode_tag(kind: str, v: Any, depth: int) -> Any:
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
        return {_decode(x, depth) for x in v}
    if kind == "frozenset":
        return frozenset(_decode(x, depth) for x in v)
    if kind == "dict":
        return {k: _decode(x, depth) for k, x in v}
    raise ValueError(f"unknown tag {kind!r}")


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`. A value nested deeper than :data:`MAX_DEPTH` is
    :class:`Unreadable`; a tag whose value does not parse raises what its parser does
    (:func:`loads` turns every failure into :class:`Unreadable`)."""
    cls = value.__class__     # the common flat cases, without a call per item
    if cls is list and _unnested(value):
        return list(value)
    if cls is dict and TAG not in value and _unnested(value.values()):
        return dict(value)
    return _decode(value, 0)


def _decode(value: Any, depth: int) -> Any:
    if isinstance(value, (list, dict)):
        depth += 1
        if depth > MAX_DEPTH:
            raise Unreadable(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            return [_decode(v, depth) for v in value]
        kind = value.get(TAG)
        if isinstance(kind, str) and len(value) == 2 and "v" in value:
            return _decode_tag(kind, value["v"], depth)
        return {k: _decode(v, depth) for k, v in value.items()}
    return value


_json_text = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
#: json's C encoder, made once: ``JSONEncoder.encode`` makes one per call (a third of the
#: cost of a job's arguments). No markers: what :func:`encode` gives holds no cycle.
_c_encoder = c_make_encoder and c_make_encoder(
    None, None, encode_basestring_ascii, None, ":", ",", False, False, False)


def compact(value: Any) -> str:
    """Compact JSON text (ASCII, no NaN) of an encoded value (what :func:`encode` gives)."""
    if _c_encoder is None:      # a Python without json's C accelerator
        return _json_text(value)
    return "".join(_c_encoder(value, 0))


def dumps(value: Any, where: str = "value") -> str:
    """Compact tagged JSON text of ``value``."""
    return compact(encode(value, where))


def loads(text: str) -> Any:
    """The value :func:`dumps` wrote; :class:`Unreadable` (one line, saying why) for
    any text it could not have written, whatever the parser or a tag's parser raised
    (``RecursionError`` for ``[`` repeated 100,000 times, ``InvalidOperation`` for a
    bad decimal, ``TypeError`` for a tag holding a number...)."""
    try:
        return decode(json.loads(text))
    except Unreadable:
        raise
    except RecursionError:
        raise Unreadable("nested deeper than the JSON parser can read") from None
    except Exception as exc:  # noqa: BLE001 - text from Redis: every failure is "unreadable"
        raise Unreadable(f"not tagged JSON: {type(exc).__name__}: {_clip(str(exc))}") from None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
