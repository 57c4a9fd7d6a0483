"""Loads the Lua scripts: each ``<name>.lua`` with ``_lib.lua`` prepended.

Every multi-key state change is one script, registered once per client and
called by SHA (redis-py's ``Script`` falls back to ``EVAL`` after a
``NOSCRIPT``, e.g. after a Redis restart or a failover).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

NAMES = (
    "enqueue", "claim", "finish", "touch", "requeue", "cancel", "delete", "reprioritize",
    "cron_tick",
)


@functools.cache
def source(name: str) -> str:
    """The full text of script ``name`` (library included)."""
    folder = resources.files(__package__)
    lib = folder.joinpath("_lib.lua").read_text(encoding="utf-8")
    return lib + "\n" + folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The scripts registered on one client: ``Scripts(r).claim(keys=[...], args=[...])``."""

    def __init__(self, connection: Any, extra: tuple[str, ...] = ()) -> None:
        self._scripts = {
            name: connection.register_script(source(name)) for name in NAMES + extra
        }

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_scripts"][name]
        except KeyError:
            raise AttributeError(name) from None
