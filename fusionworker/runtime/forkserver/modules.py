"""The fork server's job code: modules it imports for its horses, functions it resolves.

A horse is a copy of the server, so what the server imported and resolved before the
fork is there in the horse without a cost per job. When the server imports a module
(:func:`import_for_horses`): the worker's ``--import`` modules at its start, before its
first horse (fresh or warm); another module, with fresh horses, once a job of it ran fine
(the lazy rule, so a job the worker refuses never has its module imported outside the
worker); with warm
horses, before the first horse of a job whose reference passed the allow check by name
(``Server.load``: the same speed whether or not the module was named with ``--import``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from ...core.functions import resolve
from ..protocol import HorseReport

#: How many job functions the server resolves for its horses, at most.
REMEMBER_MAX = 1024


def import_for_horses(module: str) -> None:
    """Import a module for the horses forked from now on."""
    try:
        importlib.import_module(module)
    except BaseException:  # noqa: BLE001 - a bad import must not kill the server; horses still try
        pass


def remember(resolved: dict[str, Callable[..., Any]], ref: str, allowed: tuple[str, ...]) -> None:
    """Resolve ``ref`` here, once its module is preloaded, with every check of
    ``functions.resolve``: the horses forked from now on find it in ``resolved``. An
    ``async def`` also has asyncio preloaded (horse/run.py imports it on first use: a
    server of sync jobs does not map it, ~6 MiB with ssl)."""
    try:
        func = resolve(ref, allowed)
        resolved[ref] = func
        if inspect.iscoroutinefunction(inspect.unwrap(func)):
            importlib.import_module("asyncio")
    except BaseException:  # noqa: BLE001 - refused or broken: each horse checks it, says why
        pass


def resolve_again(resolved: dict[str, Callable[..., Any]], allowed: tuple[str, ...]) -> None:
    """After a preload: resolve every remembered function again (an import can rebind
    a module's attributes); one that no longer resolves is forgotten."""
    for ref in list(resolved):
        try:
            resolved[ref] = resolve(ref, allowed)
        except BaseException:  # noqa: BLE001 - as in remember
            del resolved[ref]


def reported_ok(buf: bytearray) -> bool:
    """Whether a horse's report says its job succeeded."""
    report = HorseReport.decode(buf)
    return report is not None and report.ok
