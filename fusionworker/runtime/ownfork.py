"""Horses the worker forks itself: the fallback while no fork server runs (launch.py).

Each such horse watches its own deadline-board entry (horse/lease.py), since no
fork server's watchdog does; the job's leftovers in its process group are killed
once the horse is gone (:meth:`OwnForkLauncher.tidy`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ..core.job import Job
from .deadlines import DeadlineBoard
from .horse.hygiene import horse_keeps, oom_target
from .horse.lease import BoardView
from .horse.main import horse_main, settle_in
from .horse.run import cap_results
from .launchspec import LaunchSpec
from .protocol import flood_max
from .slot import Slot

log = logging.getLogger(__name__)


def make_board(spec: LaunchSpec) -> DeadlineBoard | None:
    """The horses' deadlines in shared memory, one entry per slot (deadlines.py)."""
    try:
        board = DeadlineBoard(entries=spec.entries)
    except OSError as exc:             # no memfd: the parent's own police still kills
        log.warning("Worker %s: no shared memory for horse deadlines (%s)", spec.name, exc)
        return None
    try:
        board.reader_fd()     # opened once, before the forks: the horses map it read-only
    except OSError:           # no /proc: horses enforce no lease of their own (lease.py)
        pass
    return board


class OwnForkLauncher:
    """Horses the worker forks itself (each watches its own board entry)."""

    def __init__(self, spec: LaunchSpec, board: DeadlineBoard | None = None) -> None:
        self.spec = spec
        self.board = board
        self.running: list[Slot] = []
        self.view: BoardView | None = None   # the board read-only, inherited by each horse
        #: process groups of finished horses whose leftovers are killed once the horse
        #: is gone (it may still be flushing, e.g. its spans, after its report)
        self.leftovers: list[int] = []

    def start(self) -> None:
        if self.board is None:
            self.board = make_board(self.spec)
        if self.board is not None and self.view is None:
            try:      # mapped once here: each horse keeps this view, drops the writable map
                self.view = BoardView(self.board.reader_fd())
            except OSError:       # no /proc: horses enforce no lease of their own (lease.py)
                self.view = None
        oom_target()              # read once here, written by each horse (hygiene.py)

    def launch(self, jobs: Sequence[Job[Any]], entries: Sequence[int],
               while_forking: Callable[[], None]) -> list[Slot]:
        slots = [self._fork(job, entry) for job, entry in zip(jobs, entries)]
        self.running.extend(slots)
        while_forking()
        return slots

    def _fork(self, job: Job[Any], entry: int) -> Slot:
        read_fd, write_fd = os.pipe()
        parent_pid = os.getpid()
        keep = horse_keeps((write_fd,))        # (read_fd closed with the rest)
        cap_results(self.spec.result_cap())
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            lease = settle_in(self.board, keep=keep, view=self.view)
            horse_main(job, write_fd, parent_pid, self.spec.allowed, self.spec.retryable,
                       lease=lease, entry=entry)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        return Slot(job, pid, index=entry, fd=read_fd)

    def set_deadline(self, entry: int, deadline: float) -> None:
        if self.board is not None:
            self.board.set(deadline, entry)

    def waitables(self) -> list[Any]:
        return [s.fd for s in self.running if s.fd >= 0]

    def poll(self, readable: Collection[Any] | None) -> None:
        if not self.running:
            return
        flood = flood_max(self.spec.result_cap())
        for slot in self.running:
            if slot.poll_own(self.spec.deliver, flood) and self.spec.kill_children:
                # the job's own children (``subprocess.Popen``) outlive the horse in its
                # process group: killed with it once the horse itself is gone. One that
                # called ``setsid()`` left the group and escapes, by design
                self.leftovers.append(slot.pid)
        self.running = [s for s in self.running if not s.done]
        if self.leftovers:
            self.tidy()

    def tidy(self, wait: float = 0.0) -> None:
        """SIGKILL the process groups of finished horses that have exited (``wait``: give a
        horse still exiting that long)."""
        deadline = time.monotonic() + wait
        while self.leftovers:
            for pgid in list(self.leftovers):
                if _running(pgid):
                    continue
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.leftovers.remove(pgid)
            if not self.leftovers or time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    def renew(self) -> None:
        """Each horse imports job code afresh anyway."""

    def close(self) -> None:
        self.tidy(wait=2.0)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:
        return True


__all__ = ["OwnForkLauncher", "make_board"]
