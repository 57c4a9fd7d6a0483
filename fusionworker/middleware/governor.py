"""Resource governor: stop claiming jobs while the machine is short of memory or CPU.

Two middlewares live here:

* :class:`Governor` answers ``before_claim``: the worker claims nothing while
  RAM, swap, any GPU's memory or the CPU (percent of all cores) is above its
  throttle threshold, and resumes only once every resource is back under its
  resume threshold (hysteresis, as in seed 000: RAM 90/80, GPU 85/75, swap 70
  with no separate resume level; CPU, seed 003's other resource, is off by
  default: 100).
  Refusing new work is the only lever a worker has: a job already running is
  never touched by the governor, so a full machine drains instead of
  OOM-killing horses at random.
* :class:`HorseMemoryLimit` (horse_memory.py) answers ``on_horse_tick``: one job
  whose horse holds more than ``max_horse_memory`` MiB of its own is killed and
  failed with reason ``memory`` (Celery's ``max_memory_per_child``, but per job).

Sampling is cheap but not free (psutil reads ``/proc``, NVML talks to the
driver), and a throttled worker asks on every loop turn, so the governor
samples at most every ``memory_check_interval`` seconds and answers from the
last sample in between.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

import psutil

from ..core.hooks import Middleware
from .horse_memory import MIB, HorseMemoryLimit, rss_mib, tree_rss

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.hooks import WorkerContext

__all__ = [
    "GpuReading",
    "Governor",
    "HorseMemoryLimit",
    "NvmlGpuReader",
    "RESOURCES",
    "Reading",
    "build_governors",
    "CpuReader",
    "blocking_resources",
    "read_ram_percent",
    "read_swap_percent",
    "MIB",
    "rss_mib",
    "tree_rss",
]

log = logging.getLogger("fusionworker.governor")   # the name before the layers (logging configs use it)

#: ``(device_index, used_percent)`` of one GPU.
GpuReading = tuple[int, float]



def read_ram_percent() -> float:
    """Used RAM in percent, as ``free`` would judge it (psutil counts
    reclaimable page cache as available, so a big file cache never throttles)."""
    return float(psutil.virtual_memory().percent)


def read_swap_percent() -> float:
    """Used swap in percent; 0 on a machine without swap (nothing to exhaust)."""
    swap = psutil.swap_memory()
    if not swap.total:
        return 0.0
    return float(swap.percent)


class CpuReader:
    """Busy time of all cores in percent since the previous call (``/proc/stat`` through
    psutil): what ``top`` shows as ``100 - idle - iowait``, over the governor's sampling
    interval, so a short spike between two samples is averaged, not missed.

    The first call measures from when the reader was built.
    """

    def __init__(self) -> None:
        self._last = psutil.cpu_times()

    @staticmethod
    def _split(times: Any) -> tuple[float, float]:
        """(idle, total) seconds; guest time is already counted in user time."""
        total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
        return times.idle + getattr(times, "iowait", 0.0), total

    def __call__(self) -> float:
        now = psutil.cpu_times()
        idle0, total0 = self._split(self._last)
        idle1, total1 = self._split(now)
        self._last = now
        elapsed = total1 - total0
        if elapsed <= 0:
            return 0.0
        return max(0.0, min(100.0, 100.0 * (1.0 - (idle1 - idle0) / elapsed)))


_RESOURCE_AT = re.compile(r"\b(RAM|swap|GPU\d*|CPU) at ")

#: the resources the governor watches, as named by :func:`blocking_resources`
RESOURCES = ("ram", "swap", "gpu", "cpu")


def blocking_resources(reason: str | None) -> set[str]:
    """The resources named in a governor's reason: ``{"ram", "swap", "gpu", "cpu"}`` or
    fewer (each part of a reason names its resource: ``RAM at 93.1% (...)``)."""
    found = _RESOURCE_AT.findall(reason or "")
    return {"gpu" if word.startswith("GPU") else word.lower() for word in found}


#: The driver's library that ``pynvml`` loads at ``nvmlInit`` on Linux
NVML_LIBRARY = "libnvidia-ml.so.1"


def nvml_library_loads() -> bool:
    """Can NVML's library be loaded here (always ``True`` off Linux, where ``pynvml``
    looks elsewhere)? Asked before ``import pynvml``: on a host without the NVIDIA
    driver, the usual one, importing that module would cost every worker 2.5 MiB of
    memory of its own and 20 ms for a check that ``nvmlInit`` fails at once."""
    if not sys.platform.startswith("linux"):
        return True
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return False
    return True


class NvmlGpuReader:
    """Memory use of every NVIDIA GPU through NVML, or ``None`` when there is none.

    Most workers run on machines without a GPU, where ``nvidia-ml-py`` is not
    installed or the driver library is missing. That must cost nothing and
    never fail a claim, so the reader turns itself off for good on the first
    problem — import error, any ``NVMLError`` at init, zero devices, or an
    ``NVMLError`` on a later read (driver unloaded, GPU fell off the bus) —
    logs why once at INFO, and from then on returns ``None``. It never raises.

    NVML is initialized lazily, on the first call, so building the reader (and
    importing this module) stays free for CLI commands that never claim.

    :param nvml: the ``pynvml`` module, or a stand-in with the same names
        (``nvmlInit``, ``nvmlShutdown``, ``nvmlDeviceGetCount``,
        ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetMemoryInfo``,
        ``NVMLError``); default: ``import pynvml`` on first use.
    """

    def __init__(self, *, nvml: ModuleType | Any | None = None,
                 logger: logging.Logger | None = None, gpu_configured: bool = False,
                 listed: bool = False) -> None:
        self._nvml = nvml
        #: GPU thresholds were set: a machine without a GPU is worth an INFO line then
        self._gpu_configured = gpu_configured
        #: the worker's slots own listed devices (--gpus 0,1): a check that cannot run
        #: is a WARNING, as the jobs still get those devices
        self._listed = listed
        self._log = logger or log
        self._handles: list[tuple[int, Any]] | None = None  # None: not initialized yet
        self._off_reason: str | None = None

    @property
    def off_reason(self) -> str | None:
        """Why the GPU check is off, or ``None`` while it is on (or untried)."""
        return self._off_reason

    def __call__(self) -> list[GpuReading] | None:
        """Used memory in percent of each device, or ``None`` when the check is off."""
        if self._off_reason is not None:
            return None
        if self._handles is None and not self._init():
            return None
        nvml = self._nvml
        assert nvml is not None and self._handles is not None
        readings: list[GpuReading] = []
        try:
            for index, handle in self._handles:
                info = nvml.nvmlDeviceGetMemoryInfo(handle)
                total = float(info.total)
                readings.append((index, 100.0 * float(info.used) / total if total else 0.0))
        except nvml.NVMLError as exc:
            self._turn_off(f"NVML read failed ({exc})", shutdown=True)
            return None
        return readings

    def close(self) -> None:
        """Release NVML (harmless when it was never initialized)."""
        if self._handles is not None and self._off_reason is None:
            self._shutdown()
        self._handles = None

    def _init(self) -> bool:
        if self._nvml is None:
            try:
                if "pynvml" not in sys.modules:   # (imported already: nothing to save)
                    if importlib.util.find_spec("pynvml") is None:
                        raise ImportError("pynvml")
                    if not nvml_library_loads():   # the usual host: never imported
                        self._turn_off(f"NVML unavailable ({NVML_LIBRARY} not found: no "
                                       "NVIDIA driver)", absent=True)
                        return False
                import pynvml  # optional extra "gpu" (nvidia-ml-py)
            except ImportError:
                self._turn_off("pynvml not installed (pip install 'fusionworker[gpu]'; from "
                               "a checkout: pip install -e '.[gpu]')", absent=True)
                return False
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._turn_off(f"NVML unavailable ({exc})", absent=True)
            return False
        try:
            count = int(nvml.nvmlDeviceGetCount())
            handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        except nvml.NVMLError as exc:
            self._turn_off(f"NVML device query failed ({exc})", shutdown=True)
            return False
        if not handles:
            self._turn_off("no NVIDIA GPU found", shutdown=True, absent=True)
            return False
        self._handles = handles
        return True

    def _turn_off(self, why: str, *, shutdown: bool = False, absent: bool = False) -> None:
        """``absent``: this machine has no GPU to check (no NVML, no device): the usual
        case, logged at DEBUG (at INFO when GPU thresholds were configured); a GPU that
        fails is logged at INFO."""
        if shutdown:
            self._shutdown()
        self._off_reason = why
        self._handles = None
        if self._listed:
            self._log.warning("GPU check off: %s; the slots still get the devices --gpus "
                              "listed (CUDA_VISIBLE_DEVICES), unchecked", why)
            return
        level = logging.DEBUG if absent and not self._gpu_configured else logging.INFO
        self._log.log(level, "GPU check off: %s", why)

    def _shutdown(self) -> None:
        nvml = self._nvml
        if nvml is None:
            return
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:  # already broken; nothing left to release
            self._log.debug("nvmlShutdown failed: %s", exc)


@dataclass(frozen=True)
class Reading:
    """One sample of the machine's memory and CPU, taken at ``at`` (governor clock).

    ``cpu`` is ``None`` while the CPU check is off (its throttle threshold 100)."""

    ram: float
    swap: float
    gpus: tuple[GpuReading, ...]
    at: float
    cpu: float | None = None

    def figures(self) -> str:
        """``RAM at 93.1%, swap at 2.0%, GPU0 at 12.0%, CPU at 97.0%`` — for the log lines."""
        parts = [f"RAM at {self.ram:.1f}%", f"swap at {self.swap:.1f}%"]
        parts += [f"GPU{index} at {used:.1f}%" for index, used in self.gpus]
        if self.cpu is not None:
            parts.append(f"CPU at {self.cpu:.1f}%")
        return ", ".join(parts)


def _kind(reasons: Sequence[str]) -> str:
    """``MEMORY`` (the seed's log line) unless the CPU alone holds claims back."""
    return "CPU" if blocking_resources("; ".join(reasons)) == {"cpu"} else "MEMORY"


def _pct(value: float) -> str:
    """A threshold as written in the config: ``90`` not ``90.0``, ``92.5`` kept."""
    return f"{value:g}%"


class Governor(Middleware):
    """Refuse claims while RAM, swap, GPU memory or CPU is too high (with hysteresis).

    Throttle when RAM >= ``memory_throttle_threshold`` or swap >=
    ``swap_throttle_threshold`` or any GPU >= ``gpu_throttle_threshold`` or the
    CPU >= ``cpu_throttle_threshold`` (when that is under 100). Once throttled,
    stay throttled until RAM < ``memory_resume_threshold`` AND swap <
    ``swap_throttle_threshold`` AND every GPU < ``gpu_resume_threshold`` AND the
    CPU < ``cpu_resume_threshold``.
    Swap has no resume level of its own (seed 000 lists it as N/A): swap is
    freed slowly and only by the kernel, so a second, lower level would keep
    a worker idle long after RAM has recovered. The gap between throttle and
    resume exists so a worker near the limit does not flap between claiming
    and refusing on every sample.

    A resume threshold above its throttle threshold makes no sense (it would
    release on the very next sample); it is clamped to the throttle threshold
    and a warning is logged.

    Entering the throttle is logged once at WARNING, leaving it once at INFO,
    with the figures, so the log shows when and why a worker stood still.

    :param ram_reader: zero-arg callable, used RAM in percent.
    :param swap_reader: zero-arg callable, used swap in percent.
    :param gpu_reader: zero-arg callable, ``[(device_index, used_percent), ...]``,
        or ``None`` when no GPU can be read. If it raises, the GPU check is
        turned off for good (logged once) — a broken GPU probe must not stop
        a CPU-only worker from claiming. Default: :class:`NvmlGpuReader`.
    :param cpu_reader: zero-arg callable, CPU busy percent of all cores since its
        previous call. Default: :class:`CpuReader`. Called only while the CPU check is
        on (``cpu_throttle_threshold`` < 100).
    :param clock: monotonic seconds; injectable for tests.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        ram_reader: Callable[[], float] | None = None,
        swap_reader: Callable[[], float] | None = None,
        gpu_reader: Callable[[], Sequence[GpuReading] | None] | None = None,
        cpu_reader: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        self._log = logger or log
        self._configure(settings)
        self._ram_reader = ram_reader or read_ram_percent
        self._swap_reader = swap_reader or read_swap_percent
        self._gpu_reader: Callable[[], Sequence[GpuReading] | None] | None = (
            gpu_reader if gpu_reader is not None else NvmlGpuReader(
                logger=self._log, listed=bool(settings.gpus), gpu_configured=any(
                    settings.is_explicit(name)
                    for name in ("gpu_throttle_threshold", "gpu_resume_threshold"))))
        self._cpu_reader = cpu_reader or CpuReader()
        self._clock = clock
        #: --gpus 0,1: the worker's own devices, the only ones it judges (auto: all)
        self._devices = {int(d) for d in settings.gpus if d.isdigit()}
        #: why claiming is refused (None: it is not): the one state of the throttle
        self._reason: str | None = None
        self._last: Reading | None = None
        #: --gpus: each device judged for its own slots (:meth:`judge_per_slot`)
        self.per_slot = False
        self._hot: set[int] = set()

    def _configure(self, settings: Settings) -> None:
        self.interval = max(0.0, float(settings.memory_check_interval))
        self.ram_throttle = float(settings.memory_throttle_threshold)
        self.ram_resume = self._resume_level(settings, "memory", self.ram_throttle)
        self.swap_throttle = float(settings.swap_throttle_threshold)
        self.gpu_throttle = float(settings.gpu_throttle_threshold)
        self.gpu_resume = self._resume_level(settings, "gpu", self.gpu_throttle)
        self.cpu_throttle = float(settings.cpu_throttle_threshold)
        self.cpu_resume = self._resume_level(settings, "cpu", self.cpu_throttle)

    @property
    def cpu_checked(self) -> bool:
        """The CPU check is on (a throttle threshold under 100)."""
        return self.cpu_throttle < 100.0

    def reload(self, worker: WorkerContext, settings: Settings) -> None:
        """New thresholds (SIGHUP); the next check samples at once and applies them."""
        self._configure(settings)
        self._last = None
        self._log.info("Resource governor thresholds: RAM %s (resume %s), swap %s, GPU %s "
                       "(resume %s), CPU %s, every %gs", _pct(self.ram_throttle),
                       _pct(self.ram_resume), _pct(self.swap_throttle), _pct(self.gpu_throttle),
                       _pct(self.gpu_resume), f"{_pct(self.cpu_throttle)} (resume "
                       f"{_pct(self.cpu_resume)})" if self.cpu_checked else "off", self.interval)

    def _resume_level(self, settings: Settings, kind: str, throttle: float) -> float:
        """The resume level of ``kind``, at most its throttle threshold: one set above it
        is said (a WARNING), the default above a throttle set lower is not a mistake."""
        name = f"{kind}_resume_threshold"
        resume = float(getattr(settings, name))
        if resume > throttle:
            if settings.is_explicit(name):
                self._log.warning("%s=%s is above its throttle threshold %s; using %s",
                                  name.upper(), _pct(resume), _pct(throttle), _pct(throttle))
            return throttle
        return resume

    # -- public state -------------------------------------------------------

    @property
    def throttled(self) -> bool:
        """True while claiming is refused (as of the last sample)."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """Why claiming is refused, e.g. ``RAM at 93.1% (throttle 90%)``; ``None`` if allowed."""
        return self._reason

    @property
    def hot_devices(self) -> frozenset[int]:
        """With :attr:`per_slot`: the devices over their threshold (hysteresis), whose
        slots claim nothing (runtime/gpus.py); as of the last sample."""
        return frozenset(self._hot)

    def judge_per_slot(self) -> None:
        """A worker whose slots own a GPU each (``--gpus``): a device over
        ``gpu_throttle_threshold`` holds the claims of its own slots only, until it is
        under ``gpu_resume_threshold`` (:attr:`hot_devices`); all of them at once hold
        the worker's, as any one did before."""
        self.per_slot = True

    @property
    def last_reading(self) -> Reading | None:
        """The last sample, or ``None`` before the first :meth:`check`."""
        return self._last

    def next_check_in(self) -> float:
        """Seconds until :meth:`check` samples again (0: the next call samples).

        A throttled worker can sleep this long instead of asking in a loop.
        """
        if self._last is None:
            return 0.0
        return max(0.0, self._last.at + self.interval - self._clock())

    # -- the check ----------------------------------------------------------

    def check(self) -> str | None:
        """``None`` when claiming is allowed, else a short reason.

        Samples when ``memory_check_interval`` seconds have passed since the
        last sample (the first call always samples); otherwise answers from
        the last sample without calling any reader.
        """
        now = self._clock()
        if self._last is None or now - self._last.at >= self.interval:
            self._update(self._sample(now))
        return self._reason

    def _sample(self, now: float) -> Reading:
        ram = float(self._ram_reader())
        swap = float(self._swap_reader())
        cpu = float(self._cpu_reader()) if self.cpu_checked else None
        return Reading(ram=ram, swap=swap, gpus=self._read_gpus(), at=now, cpu=cpu)

    def _read_gpus(self) -> tuple[GpuReading, ...]:
        reader = self._gpu_reader
        if reader is None:
            return ()
        try:
            readings = reader()
        except Exception as exc:  # noqa: BLE001 - a pluggable probe; the GPU check is optional
            self._gpu_reader = None
            self._log.info("GPU check off: %s: %s", type(exc).__name__, exc)
            return ()
        if not readings:
            return ()
        return tuple((int(index), float(used)) for index, used in readings
                     if not self._devices or int(index) in self._devices)

    def _update(self, reading: Reading) -> None:
        self._last = reading
        if self.per_slot:
            reading = self._judge_devices(reading)
        held = self._reason
        if held is None:
            blocking = self._over_throttle(reading)
            if blocking:
                self._log.warning("%s THROTTLE ACTIVE: %s (throttle %s)", _kind(blocking),
                                  reading.figures(), self._levels(reading, resume=False))
        else:
            blocking = self._over_throttle(reading) or self._over_resume(reading)
            if not blocking:
                self._log.info("%s THROTTLE RELEASED: %s (resume %s)",
                               _kind(held.split("; ")), reading.figures(),
                               self._levels(reading, resume=True))
        self._reason = "; ".join(blocking) if blocking else None

    def _judge_devices(self, r: Reading) -> Reading:
        """Each device on its own, with hysteresis (:attr:`hot_devices`; a change is
        logged); the reading the worker as a whole is judged on keeps the GPUs only while
        every one is hot."""
        hot = {i for i, used in r.gpus if used >= self.gpu_throttle
               or (i in self._hot and used >= self.gpu_resume)}
        for i, used in r.gpus:
            if i in hot and i not in self._hot:
                self._log.warning("GPU%d THROTTLE ACTIVE for its slots: GPU%d at %.1f%% "
                                  "(throttle %s)", i, i, used, _pct(self.gpu_throttle))
            elif i in self._hot and i not in hot:
                self._log.info("GPU%d THROTTLE RELEASED for its slots: GPU%d at %.1f%% "
                               "(resume %s)", i, i, used, _pct(self.gpu_resume))
        self._hot = hot
        return r if r.gpus and len(hot) == len(r.gpus) else replace(r, gpus=())

    def _over_throttle(self, r: Reading) -> list[str]:
        """Reasons of every resource at or above its throttle threshold."""
        out = []
        if r.ram >= self.ram_throttle:
            out.append(f"RAM at {r.ram:.1f}% (throttle {_pct(self.ram_throttle)})")
        if r.swap >= self.swap_throttle:
            out.append(f"swap at {r.swap:.1f}% (throttle {_pct(self.swap_throttle)})")
        out += [f"GPU{i} at {used:.1f}% (throttle {_pct(self.gpu_throttle)})"
                for i, used in r.gpus if used >= self.gpu_throttle]
        if r.cpu is not None and r.cpu >= self.cpu_throttle:
            out.append(f"CPU at {r.cpu:.1f}% (throttle {_pct(self.cpu_throttle)})")
        return out

    def _over_resume(self, r: Reading) -> list[str]:
        """Reasons of resources below throttle but not yet below resume (swap has none)."""
        out = []
        if self.ram_resume <= r.ram < self.ram_throttle:
            out.append(f"RAM at {r.ram:.1f}% (resume below {_pct(self.ram_resume)})")
        out += [f"GPU{i} at {used:.1f}% (resume below {_pct(self.gpu_resume)})"
                for i, used in r.gpus if self.gpu_resume <= used < self.gpu_throttle]
        if r.cpu is not None and self.cpu_resume <= r.cpu < self.cpu_throttle:
            out.append(f"CPU at {r.cpu:.1f}% (resume below {_pct(self.cpu_resume)})")
        return out

    def _levels(self, r: Reading, *, resume: bool) -> str:
        ram = self.ram_resume if resume else self.ram_throttle
        parts = [f"RAM {_pct(ram)}", f"swap {_pct(self.swap_throttle)}"]
        if r.gpus:
            parts.append(f"GPU {_pct(self.gpu_resume if resume else self.gpu_throttle)}")
        if r.cpu is not None:
            parts.append(f"CPU {_pct(self.cpu_resume if resume else self.cpu_throttle)}")
        return ", ".join(parts)

    # -- middleware hooks ---------------------------------------------------

    def before_claim(self, worker: WorkerContext) -> str | None:
        """Refuse the claim while throttled (see :meth:`check`)."""
        return self.check()

    def describe(self) -> dict[str, Any]:
        """``{"throttle": reason}`` for the heartbeat hash; ``""`` when not throttled;
        with the CPU check on, ``cpu_percent``: the last sample's CPU use; with
        :meth:`judge_per_slot`, ``gpus_held``: the devices whose slots claim nothing.

        Does not sample: the heartbeat shows what the claim loop last saw.
        """
        fields: dict[str, Any] = {"throttle": self._reason or ""}
        if self.per_slot:     # the devices whose slots claim nothing (judge_per_slot)
            fields["gpus_held"] = ",".join(str(i) for i in sorted(self._hot))
        last = self._last
        if last is not None and last.cpu is not None:
            fields["cpu_percent"] = round(last.cpu, 1)
        return fields


def build_governors(settings: Settings) -> list[Middleware]:
    """The resource middlewares a worker installs: the governor and the per-horse
    memory ceiling (inert while ``max_horse_memory`` is 0)."""
    # the ceiling is installed even when off (0): SIGHUP may turn it on
    return [Governor(settings), HorseMemoryLimit(settings)]
