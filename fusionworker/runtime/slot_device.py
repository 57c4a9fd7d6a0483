"""The device a slot owns (``worker --gpus``, runtime/gpus.py): what the fork server
and the horses need of it, without the governor and the settings (every module the
fork server imports is a page its every fork copies)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SLOT_DEVICES_ENV", "device_of", "share_devices", "slot_devices", "use_slot_device"]

#: the worker's resolved devices, comma-separated, for its fork server and horses
SLOT_DEVICES_ENV = "FUSIONWORKER_SLOT_DEVICES"


def slot_devices(environ: Any = None) -> tuple[str, ...]:
    """The devices the worker gave its processes (:data:`SLOT_DEVICES_ENV`), or ()."""
    env = os.environ if environ is None else environ
    return tuple(p for p in (env.get(SLOT_DEVICES_ENV) or "").split(",") if p)


def device_of(entry: int, devices: Sequence[str] | None = None) -> str | None:
    """The device slot ``entry`` owns, or None (no ``--gpus``, or no entry)."""
    devices = _given if devices is None else devices
    if not devices or entry < 0:
        return None
    return devices[entry % len(devices)]


def share_devices(devices: Sequence[str]) -> None:
    """In the worker, before its fork server starts: the devices its processes inherit
    (none: the variable is removed, so a stale value is never inherited)."""
    global _given
    if devices:
        os.environ[SLOT_DEVICES_ENV] = ",".join(devices)
    else:
        os.environ.pop(SLOT_DEVICES_ENV, None)
    _given = tuple(devices)


def use_slot_device(entry: int, setenv: Callable[[str, str], None] | None = None) -> None:
    """In a horse, before its job: ``CUDA_VISIBLE_DEVICES`` = its slot's device."""
    device = device_of(entry)
    if device is not None:
        (setenv or os.environ.__setitem__)("CUDA_VISIBLE_DEVICES", device)


#: this process's devices, read once: the fork server (a fresh interpreter) inherits
#: them at its start; the worker sets them with :func:`share_devices`. A horse looks
#: here, not in ``os.environ``: each lookup there runs Python code of os.py on pages
#: of its parent's heap that the fork shares (a copy-on-write fault each)
_given: tuple[str, ...] = slot_devices()
