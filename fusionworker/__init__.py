"""fusionworker: a fork-per-job worker daemon on Redis priority queues.

The public names (``__all__``) are imported on first use (PEP 562
``__getattr__``): ``import fusionworker`` imports neither the worker nor redis,
so a job's ``from fusionworker import Retry`` in a horse or the fork server
loads only what it names. ``from fusionworker import admin, codec, health,
otel`` give those modules (docs/api.md). The layers are described in
docs/design.md ("Layers").
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .core import (
    emitting,  # the producer's port to the event log (installed below)
    queue_port,  # how the core's lower parts make a Queue (installed below)
)
from .core.emitting import EventsPort

#: public name -> the module that defines it
_PUBLIC = {
    "Batch": "fusionworker.core.batch",
    "FunctionNotAllowed": "fusionworker.exceptions",
    "InvalidFunction": "fusionworker.exceptions",
    "Job": "fusionworker.core.job",
    "JobContext": "fusionworker.runtime.progress",
    "JobCanceled": "fusionworker.exceptions",
    "JobFailed": "fusionworker.exceptions",
    "JobFunction": "fusionworker.core.registry",
    "JobTimeoutError": "fusionworker.exceptions",
    "JobWaitTimeout": "fusionworker.exceptions",
    "NoSuchJob": "fusionworker.exceptions",
    "Queue": "fusionworker.core.queue",
    "Retry": "fusionworker.exceptions",
    "RetryPolicy": "fusionworker.core.retry",
    "UnsupportedType": "fusionworker.core.codec",
    "Worker": "fusionworker.worker",
    "current_job": "fusionworker.runtime.progress",
    "get_current_job": "fusionworker.runtime.progress",
    "periodic": "fusionworker.middleware.schedules",
    "schedule": "fusionworker.middleware.schedules",
    "job": "fusionworker.core.registry",
    "register": "fusionworker.core.registry",
}

#: modules the docs reach as attributes of the package (``from fusionworker import otel``)
_SUBMODULES = {
    "admin": "fusionworker.core.admin",
    "codec": "fusionworker.core.codec",
    "command": "fusionworker.core.command",
    "health": "fusionworker.ops.health",
    "otel": "fusionworker.middleware.otel",
    "registries": "fusionworker.core.registries",
}

__all__ = [
    "Batch", "FunctionNotAllowed", "InvalidFunction", "Job", "JobCanceled", "JobContext", "JobFailed",
    "JobFunction", "JobTimeoutError", "JobWaitTimeout", "NoSuchJob", "Queue", "Retry",
    "RetryPolicy", "UnsupportedType", "Worker", "__version__", "current_job", "get_current_job",
    "job", "periodic", "register", "schedule",
]

if TYPE_CHECKING:  # pragma: no cover - what type checkers see
    from .core import admin as admin
    from .core import codec as codec
    from .core import command as command
    from .core import registries as registries
    from .core.batch import Batch
    from .core.codec import UnsupportedType
    from .core.job import Job
    from .core.queue import Queue
    from .core.registry import JobFunction, job, register
    from .core.retry import RetryPolicy
    from .exceptions import (
        FunctionNotAllowed,
        InvalidFunction,
        JobCanceled,
        JobFailed,
        JobTimeoutError,
        JobWaitTimeout,
        NoSuchJob,
        Retry,
    )
    from .middleware import otel as otel
    from .middleware.schedules import periodic, schedule
    from .ops import health as health
    from .runtime.progress import JobContext, current_job, get_current_job
    from .worker import Worker


def _run_in_process(queue: Any) -> Any:
    """``Queue(is_async=False)``'s runner (core/emitting.py): the queue's due jobs, here."""
    from .testing import run_burst

    # RQ's synchronous mode says nothing of a job that went well: no INFO lines (its
    # start, its claim, its end) on the stderr of a program that configured no logging
    settings = queue.settings
    if settings.log_level.upper() in ("DEBUG", "INFO"):
        settings = settings.replace(log_level="WARNING")
    return run_burst(queue, settings=settings)


def _events_port() -> EventsPort:
    """The event log the producer is handed (core/emitting.py), loaded on first use."""
    from .events.producer import PORT

    return PORT


def _queue_class() -> type[Queue]:
    """The ``Queue`` class the core's lower parts are handed (core/queue_port.py)."""
    from .core.queue import Queue

    return Queue


emitting.install(_events_port)
emitting.install_runner(_run_in_process)
queue_port.install(_queue_class)


def __getattr__(name: str) -> Any:
    """PEP 562: import a public name on first use (then it is a plain attribute)."""
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_SUBMODULES})


# -- documented module paths of modules that moved into the layers --------------------
# docs/api.md, docs/testing.md and README name ``fusionworker.config`` (also
# ``python -m fusionworker.config``), ``fusionworker.connection`` and
# ``from fusionworker.job import Job``: each of these names is the core module itself
# (one module object, not a copy). No file sits at the old paths, so that git follows
# the renames. ``fusionworker.job`` is registered at once (its module is light, and the
# attribute ``fusionworker.job`` must stay the decorator, which a later import of the
# submodule would overwrite); the others when first imported.
_MODULE_ALIASES = {
    "fusionworker.config": "fusionworker.core.config",
    "fusionworker.connection": "fusionworker.core.connection",
    "fusionworker.job": "fusionworker.core.job",
    # RQ's ``rq.registry``: ``from fusionworker.registries import FailedJobRegistry``
    "fusionworker.registries": "fusionworker.core.registries",
    # RQ's ``rq.command``: ``from fusionworker.command import send_stop_job_command``
    "fusionworker.command": "fusionworker.core.command",
    # the package's modules (_SUBMODULES) by their path too: ``import fusionworker.health``
    **{f"fusionworker.{name}": path for name, path in _SUBMODULES.items()},
}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the documented old paths (:data:`_MODULE_ALIASES`) and nothing else."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _MODULE_ALIASES:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module(_MODULE_ALIASES[spec.name])
        spec.loader_state = module.__spec__   # the import system replaces it: put back below
        return module

    def exec_module(self, module: Any) -> None:
        """Nothing runs (the core module ran when it was imported); the import system
        set the alias's spec on it, its own goes back."""
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, name: str) -> Any:
        """For ``python -m fusionworker.config``: the core module's code."""
        target = _MODULE_ALIASES[name]
        spec = importlib.util.find_spec(target)
        assert spec is not None and spec.loader is not None
        return spec.loader.get_code(target)  # type: ignore[attr-defined]


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())   # before any finder of an old checkout
sys.modules.setdefault("fusionworker.job", importlib.import_module("fusionworker.core.job"))
