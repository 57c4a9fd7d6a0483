"""The process's table of job functions: those registered here (``@job``,
``register()``: :mod:`.registry`) and those learnt from another process of this
worker (the child that imported its ``--import`` modules, ``runtime/imports.py``).

Below the options and the enqueue, which read it; the handles themselves
(``JobFunction``) live in :mod:`.registry`, which fills it. Filled by code only:
data in Redis can never add to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .functions import CALLABLES

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings


class Handle(Protocol):
    """What the table reads of a handle (``registry.JobFunction``, which lies above)."""

    @property
    def ref(self) -> str: ...

    @property
    def default_options(self) -> Mapping[str, Any]: ...


#: ``module:qualname`` -> handle
_REGISTRY: dict[str, Handle] = {}
#: ``tuple(sorted(_REGISTRY))``, kept by :func:`add` (a producer asks per job)
_REFS: tuple[str, ...] = ()
#: ``module:qualname`` -> its ``@job`` options: functions registered in another process
#: of this worker (the child that imported its ``--import`` modules), not here
_LEARNT: dict[str, dict[str, Any]] = {}


def add(handle: Handle) -> None:
    """Register ``handle`` under its reference (``registry.register``)."""
    global _REFS
    _REGISTRY[handle.ref] = handle
    _REFS = tuple(sorted(_REGISTRY))


def registered() -> tuple[str, ...]:
    """References of every function registered in this process, sorted."""
    return _REFS


def lookup(ref: str) -> Handle | None:
    return _REGISTRY.get(ref)


def learn(found: dict[str, dict[str, Any]]) -> None:
    """References registered in another process of this worker, each with its ``@job``
    options (``runtime/imports.py``): they may run, and enqueueing one here takes its
    options, as if registered here (no handle: :func:`lookup` does not find them)."""
    global _REFS
    _LEARNT.update({ref: dict(options) for ref, options in found.items()
                    if ref not in _REGISTRY})
    _REFS = tuple(sorted(_REGISTRY))     # a new tuple: what producers cached is stale


def learnt() -> tuple[str, ...]:
    """References :func:`learn` was given that are not registered here, sorted."""
    return tuple(sorted(ref for ref in _LEARNT if ref not in _REGISTRY))


def learnt_options(ref: str) -> dict[str, Any] | None:
    """The ``@job`` options :func:`learn` was given for ``ref`` (None: not learnt)."""
    return _LEARNT.get(ref)


def producer_allowed(settings: Settings) -> tuple[str, ...]:
    """What ``enqueue`` accepts in this process: the allow-list plus registered refs
    (and ``functions.CALLABLES`` with ``FUSIONWORKER_ALLOW_CALLABLES``)."""
    extra = (CALLABLES,) if settings.allow_callables and settings.allowed_modules else ()
    return tuple(settings.allowed_modules) + registered() + learnt() + extra
