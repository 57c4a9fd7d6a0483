"""A GPU per slot (``worker --gpus 0,1`` or ``--gpus auto``): each slot of a worker owns
a device, and the jobs it runs see only that one (``CUDA_VISIBLE_DEVICES``).

Who does what:

* the worker resolves ``--gpus`` once at start (:func:`resolve_devices`; ``auto``: every
  device NVML counts) and writes the list to :data:`SLOT_DEVICES_ENV` in its own
  environment, before its fork server starts; the fork server (a fresh interpreter) and
  every horse inherit it. Slot ``i`` (its deadline-board entry, which every run request
  carries) owns device ``devices[i % len(devices)]``: with ``--concurrency`` equal to
  the number of devices, one slot per device.
* a horse sets ``CUDA_VISIBLE_DEVICES`` to its slot's device before the job's code runs
  (:func:`use_slot_device`); the job's framework (PyTorch, TensorFlow, JAX) then sees
  one device, as ``cuda:0``.
* a warm horse (``--horse-jobs N``) keeps its device: the fork server gives an idle warm
  horse only a job of a slot with the same device (:func:`device_of`); another slot's
  job gets a fresh horse. CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when it initialises
  in a process: it must never be initialised in the fork server (nor by a module named
  with ``--import``, which the fork server imports before forking), or every horse would
  inherit that process's device and context.
* the resource governor judges the worker's own devices only (the other GPUs of the
  host are other workers' business), each for its own slots: the loop's free entries
  (:class:`FreeEntries`) hand out no entry of a device the governor holds (over the
  GPU threshold, until under the resume threshold), so the other devices' slots keep
  claiming; every device held: the governor holds the worker's claims.

Nothing is written to Redis; a process dying changes nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.config import parse_gpus
from ..middleware.governor import Governor
from .slot_device import SLOT_DEVICES_ENV, device_of, share_devices, slot_devices, use_slot_device

__all__ = ["SLOT_DEVICES_ENV", "FreeEntries", "device_of", "parse_gpus", "resolve_devices",
           "share_devices", "slot_devices", "use_slot_device"]

def resolve_devices(gpus: Sequence[str], *, nvml: Any | None = None) -> tuple[str, ...]:
    """The devices of ``--gpus``: as given, or for ``auto`` every device NVML counts
    (``nvml``: the ``pynvml`` module or a stand-in; default ``import pynvml``). ``auto``
    without NVML or without a device: ValueError (one line: the worker does not start)."""
    if tuple(gpus) != ("auto",):
        return tuple(gpus)
    if nvml is None:
        try:
            import pynvml  # optional extra "gpu" (nvidia-ml-py)
        except ImportError:
            raise ValueError("--gpus auto needs NVML: pip install 'fusionworker[gpu]' "
                             "(from a checkout: pip install -e '.[gpu]')") from None
        nvml = pynvml
    lib: Any = nvml
    try:
        lib.nvmlInit()
        try:
            count = int(lib.nvmlDeviceGetCount())
        finally:
            lib.nvmlShutdown()
    except lib.NVMLError as exc:
        raise ValueError(f"--gpus auto: NVML cannot count the GPUs ({exc})") from None
    if count <= 0:
        raise ValueError("--gpus auto: no GPU found")
    return tuple(str(i) for i in range(count))


class FreeEntries:
    """The deadline-board entries no running horse holds (the loop's ``free_index``,
    taken with :meth:`pop`, given back with :meth:`append`). With ``--gpus`` and the
    resource governor, an entry whose device the governor holds (``hot_devices``) is
    handed out only when no other is free, and :meth:`usable` does not count it: the
    loop claims for the other devices' slots only."""

    def __init__(self, concurrency: int, devices: Sequence[str] = (),
                 middleware: Sequence[Any] = ()) -> None:
        self._free = list(range(concurrency - 1, -1, -1))
        self.devices = tuple(devices)
        self.governor = next((m for m in middleware if isinstance(m, Governor)), None)
        if self.governor is not None and self.devices:
            self.governor.judge_per_slot()
        else:
            self.governor = None

    def __len__(self) -> int:
        return len(self._free)

    def held(self) -> frozenset[str]:
        """The devices whose slots claim nothing now (the governor samples when due)."""
        if self.governor is None:
            return frozenset()
        try:
            self.governor.check()
        except Exception:  # noqa: BLE001 - as a hook's failure: the last judgment stands
            pass
        return frozenset(str(i) for i in self.governor.hot_devices)

    def usable(self, free: int) -> int:
        """Of ``free`` slots, how many may claim: at most the free entries of devices
        not held."""
        held = self.held()
        if not held:
            return free
        return min(free, sum(device_of(e, self.devices) not in held for e in self._free))

    def pop(self) -> int:
        """A free entry: the last one freed whose device is not held, else the last."""
        held = self.held()
        for i in range(len(self._free) - 1, -1, -1):
            if device_of(self._free[i], self.devices) not in held:
                return self._free.pop(i)
        return self._free.pop()

    def append(self, entry: int) -> None:
        self._free.append(entry)

    def reset(self, concurrency: int) -> None:
        """Every entry free again (a new ``work()``: no horse of the last run holds one)."""
        self._free = list(range(concurrency - 1, -1, -1))
