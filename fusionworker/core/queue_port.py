"""How the parts below ``Queue`` make one without importing queue.py.

``Job.fetch`` and a job's own ``fetch_dependencies``, the registry objects, a
``Batch``, a dependency note's callback and a ``@job`` handle each make a
``Queue``, and queue.py imports them (or what imports them). They are handed the
class instead: the package root (``fusionworker/__init__.py``, which every import
of the package runs first) installs a provider that imports queue.py on first use,
so the core's modules import one another in one direction (``tests/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_provider: Callable[[], type[Any]] | None = None
_found: type[Any] | None = None


def install(provider: Callable[[], type[Any]]) -> None:
    """Hand the core the ``Queue`` class: ``provider()`` is called on first use."""
    global _provider, _found
    _provider, _found = provider, None


def queue_class() -> type[Any]:
    """The ``Queue`` class (RuntimeError when none was installed). Typed ``Any``: this
    module lies below ``Queue``, whose annotations name the job record that reads it;
    a caller that may name ``Queue`` annotates what it makes
    (``queue_type: type[Queue] = queue_class()``)."""
    global _found
    if _found is None:
        if _provider is None:
            raise RuntimeError("no Queue class was installed (import fusionworker first)")
        _found = _provider()
    return _found
