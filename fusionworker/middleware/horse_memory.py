"""The per-horse memory ceiling (``max_horse_memory``): a job whose horse, with its
children, holds more than that of its own is killed and failed with reason
``memory``, so one runaway job cannot push the machine into swap or the OOM killer.
Its own: the pages no other process maps, not a model the fork server loaded once and
every horse shares (docs/operations.md, "Models loaded once")."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

from ..core.hooks import Middleware
from ..core.job import FailureReason

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings
    from ..core.hooks import WorkerContext
    from ..core.job import Job

log = logging.getLogger("fusionworker.governor")   # the governor's (logging configs use it)

MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` plus all its descendants, in MiB.

    Children count because a job that spawns a subprocess (ffmpeg, a model
    server) must not escape its ceiling that way. A process that vanishes
    while being measured counts as 0, and so does ``pid`` itself when it is
    gone: a horse that already exited holds no memory.

    RSS includes pages a horse still shares with its parent after ``fork``
    (copy-on-write), so a horse starts at roughly the parent's RSS: the ceiling
    (:class:`HorseMemoryLimit`) judges :func:`own_mib` once this is over it.
    """
    found = tree_rss(pid)
    return 0.0 if found is None else found[0] / MIB


def own_mib(pid: int) -> float:
    """The memory ``pid`` and its descendants hold of their own, in MiB: each one's
    pages no other process maps (USS, from ``/proc/<pid>/smaps_rollup``), so a model
    the fork server loaded once, which every horse still shares, is not counted, and
    what a job allocated (or copied by writing to the model) is. 0 when ``pid`` is gone.
    Reading it walks the process's page tables: :class:`HorseMemoryLimit` reads it only
    for a horse whose resident set is over the ceiling."""
    found = _tree_sum(pid, lambda proc: int(proc.memory_full_info().uss))
    return 0.0 if found is None else found[0] / MIB


def tree_rss(pid: int) -> tuple[int, int] | None:
    """Resident bytes of ``pid`` and all its descendants, and how many processes that
    is; None when ``pid`` is gone (a descendant that vanishes while measured counts 0)."""
    return _tree_sum(pid, lambda proc: int(proc.memory_info().rss))


def _tree_sum(pid: int, measure: Callable[[psutil.Process], int]) -> tuple[int, int] | None:
    """``measure`` summed over ``pid`` and its descendants, and how many they are; None
    when ``pid`` is gone (one that vanishes while measured counts 0)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    total = 0
    for proc in processes:
        try:
            total += measure(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total, len(processes)


class HorseMemoryLimit(Middleware):
    """Fail a job whose horse (with its children) holds more than ``max_horse_memory``
    MiB of its own (:func:`own_mib`: not the pages it shares with the fork server, such
    as a model loaded there once).

    One runaway job must not push the whole machine into swap or the OOM
    killer, which would take innocent horses (or the worker) with it. The
    worker calls :meth:`on_horse_tick` about once a second; the answer
    ``"memory"`` makes it kill the horse and fail the job with that reason.
    ``max_horse_memory = 0`` disables the check.
    """

    #: Also reachable as ``HorseMemoryLimit.rss_mib(pid)``.
    rss_mib = staticmethod(rss_mib)

    def __init__(self, settings: Settings, *, logger: logging.Logger | None = None) -> None:
        self.limit_mib = max(0, int(settings.max_horse_memory))
        self._log = logger or log

    def reload(self, worker: WorkerContext, settings: Settings) -> None:
        """A new ceiling (SIGHUP) applies from the next horse tick."""
        self.limit_mib = max(0, int(settings.max_horse_memory))

    @property
    def enabled(self) -> bool:
        return self.limit_mib > 0

    def on_horse_tick(self, worker: WorkerContext, job: Job[Any], horse_pid: int) -> FailureReason | None:
        """``FailureReason.MEMORY`` when the horse is over the ceiling, else ``None``."""
        if not self.enabled:
            return None
        resident = rss_mib(horse_pid)
        if resident <= self.limit_mib:       # the cheap read first: under it, so is own
            return None
        used = own_mib(horse_pid)
        if used <= self.limit_mib:
            return None
        self._log.warning("Horse %d of job %s holds %.1f MiB of its own (resident %.1f MiB, "
                          "limit %d MiB): killing it", horse_pid, getattr(job, "id", job),
                          used, resident, self.limit_mib)
        return FailureReason.MEMORY
