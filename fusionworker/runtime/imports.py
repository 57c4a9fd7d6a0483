"""Models loaded once: the worker process never imports its ``--import`` modules.

Its fork server imports them before its first horse, and every horse shares that
copy (forkserver/modules.py). The worker itself needs only what the modules
register: the ``@job`` references it lets run (the allow check, by name), their
``@job`` options (a schedule's or a job's defaults when the worker enqueues one) and
the schedules they declare (written at its start, middleware/schedules.py). It
learns them from a short-lived child, a fresh interpreter that imports the modules,
answers on a pipe and exits (:func:`probe`); the sequence and what can go wrong:
docs/design.md, "Models loaded once". A module this process imported already is
not imported again anywhere here (what it registered is in this process).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from ..core import codec, registry
from ..core.config import ConfigError, Settings
from ..core.functions import keep_out
from ..middleware import schedules

# Runs in the fresh interpreter: the worker's sys.path, then :func:`answer`.
_BOOT = """\
# fusionworker: what the --import modules register
import json, sys
path, modules, fd = json.loads(sys.argv[1])
sys.path[:] = path
from fusionworker.runtime.imports import answer
answer(modules, fd)
"""

#: modules learnt in this process already (a second Worker() does not ask again)
_LEARNT: set[str] = set()


def worker_allowed(settings: Settings, *, here: bool = False) -> tuple[str, ...]:
    """What the worker's jobs may run: :func:`registry.worker_allowed`, its ``--import``
    modules imported by a child (:func:`learn`), not by this process; ``here``: by this
    process (a worker that runs its jobs in it, ``fusionworker.testing``).

    Raises :class:`ConfigError` (one line) when an import fails or nothing may run."""
    if here:
        return registry.worker_allowed(settings)
    learn(settings.imports)
    return registry.worker_allowed(settings, imported=False)


def learn(modules: Sequence[str]) -> None:
    """Learn what ``modules`` register, from a child that imports them; this process
    keeps them out (ConfigError, one line, when one cannot be imported)."""
    wanted = [m for m in modules if m not in sys.modules and m not in _LEARNT]
    if not wanted:
        return
    found = probe(wanted)
    # the producer's checks here import neither them nor a module they registered from
    keep_out([*wanted, *(ref.partition(":")[0] for ref in found.get("refs", {}))])
    registry.learn({ref: {name: codec.loads(text) for name, text in options.items()}
                    for ref, options in found.get("refs", {}).items()})
    declared = {(s.queue, s.name) for s in schedules.declared()}
    for item in found.get("schedules", ()):
        if (item["queue"], item["name"]) not in declared:
            schedules.schedule(item["name"], item["cron"], item["func"],
                               args=codec.loads(item["args"]),
                               kwargs=codec.loads(item["kwargs"]), queue=item["queue"],
                               timezone=item["timezone"], catch_up=item["catch_up"],
                               allow_overlap=item["allow_overlap"])
    _LEARNT.update(wanted)


def probe(modules: Sequence[str]) -> dict[str, Any]:
    """The child's answer for ``modules`` (:func:`answer`); ConfigError (one line) with
    its error, or when it ended without an answer."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps([sys.path, list(modules), write_fd])],
            pass_fds=[write_fd], stdin=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:
        os.close(read_fd)
        raise ConfigError(f"FUSIONWORKER_IMPORTS: cannot start a process to import "
                          f"{', '.join(modules)}: {exc}") from None
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    status = proc.wait()
    try:
        found: dict[str, Any] = json.loads(data)
    except ValueError:
        raise ConfigError(f"FUSIONWORKER_IMPORTS: the process importing {', '.join(modules)} "
                          f"ended without an answer (exit status {status})") from None
    if found.get("error"):
        raise ConfigError(str(found["error"]))
    return found


def answer(modules: Sequence[str], fd: int) -> None:  # pragma: no cover - in the child
    """In the child: import ``modules``, write what they registered (JSON) to ``fd``
    and exit at once (a module's threads or handlers do not hold the child)."""
    module = "?"
    try:
        for module in modules:
            importlib.import_module(module)
        found = _registered()
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import is an answer too
        found = {"error": f"FUSIONWORKER_IMPORTS: cannot import {module!r}: "
                          f"{type(exc).__name__}: {exc}"}
    data = json.dumps(found).encode()
    while data:
        data = data[os.write(fd, data):]
    os._exit(0)


def _registered() -> dict[str, Any]:
    """The references registered here with their ``@job`` options (each as the codec
    writes it; one the codec cannot carry is left out), and the schedules declared here."""
    refs: dict[str, dict[str, str]] = {}
    for ref in registry.registered():
        handle = registry.lookup(ref)
        refs[ref] = {name: text for name, value in
                     (handle.default_options.items() if handle is not None else ())
                     if (text := _dumps(value)) is not None}
    declared = [{"name": s.name, "cron": s.cron, "func": s.func, "args": codec.dumps(list(s.args)),
                 "kwargs": codec.dumps(s.kwargs), "queue": s.queue, "timezone": s.timezone,
                 "catch_up": s.catch_up, "allow_overlap": s.allow_overlap}
                for s in schedules.declared()]
    return {"refs": refs, "schedules": declared}


def _dumps(value: Any) -> str | None:
    try:
        return codec.dumps(value)
    except Exception:  # noqa: BLE001 - an option the codec cannot carry stays in the child
        return None
