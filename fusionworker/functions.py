"""Jobs name their function as ``module:function``; this module guards that name.

Invariant 6 (no code execution from data): a horse imports only modules the
allow-list admits. Matching is on whole dotted components: ``app`` admits
``app`` and ``app.tasks`` but not ``apple``. With no allow-list configured,
anything but :data:`~fusionworker.config.DEFAULT_DENY_MODULES` is admitted
(and the worker warns once at start).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from typing import Any

from .config import DEFAULT_DENY_MODULES
from .exceptions import FunctionNotAllowed, InvalidFunction

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ATTR = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$")


def func_ref(func: str | Callable[..., Any]) -> str:
    """``"module:name"`` for a reference string or a module-level callable."""
    if isinstance(func, str):
        parse_func_ref(func)
        return func
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        raise InvalidFunction(
            f"{func!r} is not a module-level callable importable by name; pass 'module:function'"
        )
    return f"{module}:{qualname}"


def parse_func_ref(ref: str) -> tuple[str, str]:
    """Split ``module:attr``; raise :class:`InvalidFunction` on anything else."""
    module, sep, attr = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not _MODULE.match(module) or not _ATTR.match(attr):
        raise InvalidFunction(
            f"invalid function reference {ref!r}: expected 'module:function' "
            "(e.g. 'app.tasks:send_sms'; private names are not callable as jobs)"
        )
    return module, attr


def _matches(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def check_allowed(ref: str, allowed: Iterable[str] = ()) -> tuple[str, str]:
    """Validate ``ref`` against the allow-list (or the deny-list when it is empty)."""
    module, attr = parse_func_ref(ref)
    allowed = tuple(allowed)
    if allowed:
        if not _matches(module, allowed):
            raise FunctionNotAllowed(
                f"module {module!r} is not on the allow-list "
                f"(FUSIONWORKER_ALLOWED_MODULES={','.join(allowed)})"
            )
    elif _matches(module, DEFAULT_DENY_MODULES):
        raise FunctionNotAllowed(
            f"module {module!r} is on the built-in deny-list; set FUSIONWORKER_ALLOWED_MODULES "
            "to the modules your jobs live in"
        )
    return module, attr


def resolve(ref: str, allowed: Iterable[str] = ()) -> Callable[..., Any]:
    """Import and return the callable ``ref`` names, after the allow-list check."""
    module_name, attr = check_allowed(ref, allowed)
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidFunction(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise InvalidFunction(f"{ref!r} is not callable")
    return obj
