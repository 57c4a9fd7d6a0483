"""Launchers: how a claimed job gets its process, as :class:`~.slot.Slot` objects.

The loop (loop.py) hands a launcher the jobs to start and their deadline-board
entries, and asks it which slots ended; it never sees a fork server or a pipe.

| launcher | the job runs in | used by |
|---|---|---|
| :class:`ForkServerLauncher` | a horse forked by the fork server (forkserver/) | every worker |
| :class:`OwnForkLauncher` (ownfork.py) | a horse the worker forks itself | the fallback when no fork server starts |
| :class:`InProcessLauncher` | this process (no isolation) | ``fusionworker.testing`` |

Each launcher keeps the slots it started until they ended. The horses'
deadlines (deadlines.py) are a launcher's too: :meth:`Launcher.set_deadline`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from ..core.job import Job
from .direct import DirectHorses
from .forkserver.client import ForkServer, ForkServerDied
from .inprocess import InProcessLauncher
from .launchspec import LaunchSpec
from .ownfork import OwnForkLauncher, make_board
from .protocol import StartNotice
from .slot import Slot

log = logging.getLogger(__name__)

#: Seconds a fork server may leave a request unanswered before it is taken for hung and
#: SIGKILLed (its requests are asked again: _ask_again). It answers in milliseconds, but
#: with warm horses it imports the --import modules before its first answer: generous.
ANSWER_TIMEOUT = 120.0


class Launcher(Protocol):
    """How the loop starts jobs and learns that they ended."""

    def start(self) -> None:
        """Before the first job (the worker registered)."""

    def launch(self, jobs: Sequence[Job[Any]], entries: Sequence[int],
               while_forking: Callable[[], None]) -> list[Slot]:
        """A slot per job (``entries``: their board entries); ``while_forking`` runs
        once, before any job can have ended, overlapping the fork where it can."""
        ...

    def set_deadline(self, entry: int, deadline: float) -> None:
        """Board entry ``entry``: its horse dies at ``deadline`` (monotonic; inf: none)."""

    def waitables(self) -> list[Any]:
        """What the loop's select() waits on for the running slots' ends."""
        ...

    def poll(self, readable: Collection[Any] | None) -> None:
        """Mark the slots whose horse ended as done (``readable``: what the last select()
        found readable; None: look at everything)."""

    def tidy(self) -> None:
        """Each loop turn: what finished horses left behind."""

    def renew(self) -> None:
        """SIGHUP: the next jobs see changed job code (running ones finish as they are)."""

    def close(self) -> None:
        """The worker stops."""


class ForkServerLauncher:
    """Horses forked by the fork server; forked by the worker itself while it has none
    (it could not start, or died and could not be restarted)."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.own = OwnForkLauncher(spec)
        self.server: ForkServer | None = None
        #: old fork servers (SIGHUP) still running horses: closed after their last one
        self.retiring: list[ForkServer] = []
        #: the running slots of the fork servers' horses, by board entry (an async horse's pid runs several)
        self.by_entry: dict[int, Slot] = {}
        #: each fork server's (by id) unanswered requests, in the order its answers come
        self.asked: dict[int, deque[Slot]] = {}
        #: modules whose first job was launched (warm horses: said once, :meth:`_say_loads`)
        self.launched_modules: set[str] = set()
        #: the warm horses each fork server (by id) handed over: the direct path (direct.py)
        self.pools: dict[int, DirectHorses] = {}
        #: jobs whose handed horse died before reading them, to hand on (:meth:`_hand_on`)
        self.moved: list[tuple[ForkServer, Slot]] = []

    def start(self) -> None:
        """Start a fork server (with the board, made once: every server maps the same)."""
        self.own.start()
        server = self._new_server(warm=True)
        try:
            server.start()
        except ForkServerDied as exc:
            log.warning("Worker %s: %s; forking horses from the worker itself",
                        self.spec.name, exc)
            return
        self.server = server

    def _new_server(self, warm: bool) -> ForkServer:
        """A fork server's handle, not started; ``warm``: with the worker's warm horses."""
        board = self.own.board
        server = ForkServer(self.spec.allowed, self.spec.retryable, otel=self.spec.tracing(),
                            board_fd=board.fd if board is not None else -1,
                            kill_children=self.spec.kill_children,
                            warm=self.spec.warm() if warm else None,
                            imports=self.spec.imports() if warm else (),
                            result_cap=self.spec.result_cap(), log=self.spec.log())
        server.on_update = self._update
        server.on_move = self._moved
        server.on_start = lambda notice: self._answered(server, notice)
        server.on_cancel = lambda entry: self._pool(server).cancel(entry)
        server.on_handover = lambda notice, job_w, fd: self._pool(server).adopt(
            notice, job_w, fd)
        server.on_gone = lambda pid, status: self.moved.extend(
            (server, slot) for slot in self._pool(server).gone(pid, status))
        return server

    def _pool(self, server: ForkServer) -> DirectHorses:
        """The horses ``server`` handed over (made at its first; made again when the
        server was started again in place: the old one's horses died with it)."""
        pool = self.pools.get(id(server))
        if pool is not None and pool.pid != (server.proc.pid if server.proc else 0):
            self._drop_pool(server)
            pool = None
        if pool is None:
            pool = self.pools[id(server)] = DirectHorses(server, self.own.board,
                                                         self.spec.deliver)
            pool.on_blocked = self._blocked
            pool.awaited = lambda entry: any(
                slot.index == entry for slot in self.asked.get(id(server), ()))
        return pool

    def _drop_pool(self, server: ForkServer) -> None:
        pool = self.pools.pop(id(server), None)
        if pool is not None:
            pool.close()

    def _hand_on(self, server: ForkServer, slots: list[Slot]) -> None:
        """Jobs a handed horse of ``server`` did not run (it died before reading them,
        or refused them): each goes to the fork server as a new request; its slot waits
        for the answer's pid (a kill asked for meanwhile is sent then, Slot.bind)."""
        if self.server is not None:     # after a reload: the new server, as any new job
            server = self.server
        if not server.alive:
            # submit() would start it again in place, and the slots of the dead one (the
            # running jobs of its handed horses too) would wait for notices that never
            # come: its death first (every slot of it ends, these too, given back)
            self._origin_died(server)
        slots = [slot for slot in slots if not slot.done]
        if not slots:
            return
        for slot in slots:      # an asked slot, not a running one, until the answer
            slot.hand_on(server)
            self.by_entry.pop(slot.index, None)
        self.asked.setdefault(id(server), deque()).extend(slots)
        try:
            server.submit([slot.job for slot in slots], [slot.index for slot in slots])
        except ForkServerDied:
            self._origin_died(server)

    def _alone(self, job: Job[Any], entry: int) -> Slot | None:
        """A suspect (its fork server died under it before, beside other jobs): it runs
        in a fork server of its own, so that if that one dies too, its death is this
        job's (Slot.alone) and no other job pays. None: none could be started."""
        server = self._new_server(warm=False)
        try:
            server.start()
            server.submit([job], [entry])
        except ForkServerDied:
            server.close()
            return None
        slot = Slot.asked(job, server, index=entry)
        slot.alone = True
        self.asked[id(server)] = deque([slot])
        self.retiring.append(server)       # closed by tidy() once its horse ended
        return slot

    def _update(self, entry: int, frame: str) -> None:
        """A progress frame of the job on board entry ``entry``: as its attempt (its token
        fences the write; a frame of a job no longer running is dropped)."""
        slot = self.by_entry.get(entry)
        if slot is not None:
            self.spec.deliver(slot.job, frame)

    def _answered(self, server: ForkServer, notice: StartNotice) -> None:
        """The answer to ``server``'s oldest open request: ``notice.pid`` runs that job
        (an async horse's, ``shared``: with other jobs, its mates, directasync.py)."""
        asked = self.asked.get(id(server))
        if not asked:      # cannot be: one answer per request, in order
            log.warning("Worker %s: the fork server answered a request it was not sent "
                        "(horse %d)", self.spec.name, notice.pid)
            return
        slot = asked.popleft()
        if not asked:
            del self.asked[id(server)]
        pool = self._pool(server) if server.warm else None
        if pool is not None:    # its later jobs may go to a handed horse (direct.py)
            pool.modules.add(slot.job.func.partition(":")[0])
            pool.caps[slot.job.func] = max(1, notice.cap)
            if notice.shared:   # an async horse, handed (before this notice)
                pool.join(slot, notice.pid, notice.cap)
            elif pool.async_horses:
                pool.drop_early(slot.index)
        slot.bind(notice.pid)
        self.by_entry[slot.index] = slot
        if notice.shared and pool is not None:   # what its horse wrote for it meanwhile
            pool.drop_early(slot.index, notice.pid)

    def _blocked(self, entry: int, seconds: float) -> None:
        """The job on ``entry`` holds its async horse's event loop: said, and it is the
        culprit if the horse is killed (Slot.outcome)."""
        slot = self.by_entry.get(entry)
        if slot is None or slot.done:
            return
        slot.held_loop()
        mates = len(slot.mates.slots) - 1 if slot.mates is not None else 0
        log.warning("Worker %s: job %s (%s) blocks the event loop of its async horse %d for "
                    "%.1f s (%d other job(s) of the horse wait; it is killed at the first "
                    "deadline, the others go back to their queue)", self.spec.name,
                    slot.job.id, slot.job.func, slot.pid, seconds, mates)

    def _moved(self, entry: int, to: int) -> None:
        """The job on board entry ``entry`` went to the horse ``to`` (a warm horse died
        before it took it; the server answered with that horse before): its slot follows."""
        slot = self.by_entry.get(entry)
        if slot is None:
            return
        slot.moved(to)

    def launch(self, jobs: Sequence[Job[Any]], entries: Sequence[int],
               while_forking: Callable[[], None]) -> list[Slot]:
        """Every request goes to the fork server and no answer is waited for: each slot
        gets its horse's pid when the answer is read with the ends (:meth:`_answered`);
        ``while_forking`` runs after the requests went."""
        if not jobs:
            return []
        if any(job.shared_deaths for job in jobs):
            return self._launch_suspects(jobs, entries, while_forking)
        return self._launch_shared(jobs, entries, while_forking)

    def _launch_shared(self, jobs: Sequence[Job[Any]], entries: Sequence[int],
                       while_forking: Callable[[], None]) -> list[Slot]:
        """:meth:`launch` on the worker's fork server (or its own forks)."""
        server = self.server
        direct: list[Slot] = []
        if server is not None:
            if (self.by_entry or id(server) in self.asked) and not server.alive:
                self._origin_died(server)   # died unnoticed (before submit() starts a new one)
            direct, jobs, entries = self._direct(server, jobs, entries)
            try:
                if jobs:
                    server.submit(jobs, entries)
            except ForkServerDied as exc:
                log.warning("Worker %s: fork server unavailable (%s): forking from the worker",
                            self.spec.name, exc)
                self._origin_died(server)
                server = None
        if server is None:
            return direct + self.own.launch(jobs, entries, while_forking)
        if server.warm:
            self._say_loads(jobs)
        slots = [Slot.asked(job, server, index=entry) for job, entry in zip(jobs, entries)]
        if slots:
            self.asked.setdefault(id(server), deque()).extend(slots)
        while_forking()
        return direct + slots

    def _direct(self, server: ForkServer, jobs: Sequence[Job[Any]], entries: Sequence[int]
                ) -> tuple[list[Slot], Sequence[Job[Any]], Sequence[int]]:
        """The jobs an idle horse ``server`` handed over takes (their slots, bound), and
        the rest, for the server."""
        pool = self.pools.get(id(server))
        if pool is None or not (pool.idle or pool.async_horses):
            return [], jobs, entries
        if pool.pid != (server.proc.pid if server.proc else 0):   # it died idle, unnoticed
            self._drop_pool(server)
            return [], jobs, entries
        direct: list[Slot] = []
        rest: list[Job[Any]] = []
        rest_entries: list[int] = []
        to_async: list[tuple[Job[Any], int]] = []     # the async horses' (directasync.py)
        for job, entry in zip(jobs, entries):
            if job.func in pool.async_funcs:
                to_async.append((job, entry))
                continue
            slot = pool.take(job, entry)
            if slot is None:
                rest.append(job)
                rest_entries.append(entry)
            else:
                direct.append(slot)
        if to_async:
            written, left = pool.take_async(to_async)
            direct += written
            rest += [to_async[i][0] for i in left]
            rest_entries += [to_async[i][1] for i in left]
        for slot in direct:
            self.by_entry[slot.index] = slot
        return direct, rest, rest_entries

    def _launch_suspects(self, jobs: Sequence[Job[Any]], entries: Sequence[int],
                         while_forking: Callable[[], None]) -> list[Slot]:
        """:meth:`launch`, each suspect in a fork server of its own (:meth:`_alone`)."""
        slots: list[Slot | None] = [None] * len(jobs)
        rest = []
        for i, (job, entry) in enumerate(zip(jobs, entries)):
            if job.shared_deaths:
                slots[i] = self._alone(job, entry)
            if slots[i] is None:
                rest.append(i)
        others = self._launch_shared([jobs[i] for i in rest], [entries[i] for i in rest],
                                     while_forking) if rest else []
        if not rest:
            while_forking()
        for i, slot in zip(rest, others):
            slots[i] = slot
        return [slot for slot in slots if slot is not None]

    def _say_loads(self, jobs: Sequence[Job[Any]]) -> None:
        """Warm horses: the first job of a module not named with ``--import`` is said once:
        the fork server imports the module then and forks its pool with it, so that first
        burst waits for those forks (``--import`` has them ready at start)."""
        for job in jobs:
            module = job.func.partition(":")[0]
            if module in self.launched_modules or len(self.launched_modules) >= 1024:
                continue
            self.launched_modules.add(module)
            if module not in self.spec.imports():
                log.info("Worker %s: first job of %s, a module not named with --import: the "
                         "fork server imports it now and forks its warm horses with it (name "
                         "it with --import to have them ready before the first job)",
                         self.spec.name, module)

    def set_deadline(self, entry: int, deadline: float) -> None:
        self.own.set_deadline(entry, deadline)

    def _servers(self) -> list[ForkServer]:
        """Every fork server a running horse was forked by, or that owes an answer
        (after SIGHUP: old and new)."""
        if not self.by_entry and not self.asked:
            return []
        if not self.retiring and self.server is not None:
            # every slot is the current server's: renew() moves an old server that still
            # runs horses (or owes answers) to `retiring`; submit() restarts a dead one
            # in place
            return [self.server]
        found: dict[int, ForkServer] = {}
        for slot in [*self.by_entry.values(), *(q[0] for q in self.asked.values() if q)]:
            if slot.origin is not None:
                found[id(slot.origin)] = slot.origin
        return list(found.values())

    def waitables(self) -> list[Any]:
        socks: list[Any] = [s.sock for s in self._servers() if s.sock is not None]
        for pool in self.pools.values():
            socks.extend(pool.waitables())
        return socks + self.own.waitables()

    def poll(self, readable: Collection[Any] | None) -> None:
        """A server is read when the last select() found its socket readable (an answer,
        an exit, or its death): no system call on a turn with nothing new. Every notice
        is read here, so nothing read waits for a later turn."""
        if self.asked:
            self._hung(time.monotonic())
        if self.by_entry or self.asked:
            for server in self._servers():
                if (readable is not None and server.sock is not None
                        and server.sock not in readable):
                    continue
                self._read_exits(server)
        self._poll_pools(readable)
        if self.by_entry or self.asked:
            ended = [entry for entry, slot in self.by_entry.items() if slot.done]
            for entry in ended:
                del self.by_entry[entry]
        self.own.poll(readable)

    def _poll_pools(self, readable: Collection[Any] | None) -> None:
        """Read the handed horses' pipes (direct.py; an idle horse's death or write too),
        then hand on the jobs a handed horse never read."""
        if not self.pools and not self.moved:     # fresh horses: nothing handed
            return
        for pool in list(self.pools.values()):
            if pool.by_fd:
                self.moved.extend((pool.origin, slot) for slot in pool.poll(readable))
        while self.moved:
            server, slot = self.moved.pop(0)
            self._hand_on(server, [slot])

    def _read_exits(self, server: ForkServer) -> None:
        """The exits ``server`` reported, then its death if it died."""
        exits, died = server.exits()
        for entry, notice in exits.items():
            slot = self.by_entry.get(entry)
            if slot is not None and slot.origin is server:
                slot.exited(notice)
        if died:
            self._origin_died(server)

    def _hung(self, now: float) -> None:
        """SIGKILL a fork server whose oldest open request is ANSWER_TIMEOUT old (stopped,
        wedged): its death is read like any other (:meth:`_origin_died`)."""
        for asked in self.asked.values():
            server = asked[0].origin if asked else None
            if (server is None or server.proc is None or server.proc.poll() is not None
                    or now - asked[0].started < ANSWER_TIMEOUT):
                continue
            log.error("Worker %s: the fork server (pid %d) left a request unanswered for "
                      "%.0f s: killing it", self.spec.name, server.proc.pid,
                      now - asked[0].started)
            server.proc.kill()

    def _origin_died(self, server: ForkServer) -> None:
        """A fork server is gone: its horses died with it (PDEATHSIG). The requests it
        did not answer are asked again (:meth:`_ask_again`)."""
        exits, _ = server.exits()          # what it reported (and answered) before it went
        self._drop_pool(server)            # its handed horses died with it (PDEATHSIG)
        for slot in self.by_entry.values():
            if slot.origin is server and not slot.done:
                if slot.index in exits:
                    slot.exited(exits[slot.index])
                else:
                    slot.origin_died()
        unanswered = self.asked.pop(id(server), None)
        if unanswered:
            self._ask_again(list(unanswered))

    def _ask_again(self, slots: list[Slot]) -> None:
        """Requests a dead fork server never answered go once more to the worker's fork
        server (started again if it died), never to a horse of the worker (a job killing
        its parent must not kill the worker); one asked twice already or a suspect's
        (it may be what kills servers) ends as that death (:meth:`Slot.unanswered`); the
        rest, when no server takes them, get horses the worker forks (:meth:`_fork_own`)."""
        for slot in slots:
            if slot.asked_again or slot.alone:
                slot.unanswered(self.spec.name)
        rest, server = [s for s in slots if not s.done], self.server
        if server is not None and rest:
            log.warning("Worker %s: the fork server died before starting %d job(s): "
                        "asking a new one", self.spec.name, len(rest))
            try:
                server.submit([s.job for s in rest], [s.index for s in rest])
            except ForkServerDied:
                self._fork_own(rest)
                return
            for slot in rest:
                slot.ask_again(server)
                self.asked.setdefault(id(server), deque()).append(slot)
        elif rest:
            self._fork_own(rest)

    def _fork_own(self, slots: list[Slot]) -> None:
        """Jobs a fork server took but never answered for (it died): the worker forks
        their horses itself, with the same attempt and board entry. As when the server
        dies during any launch, a job may have begun in a horse that died with it."""
        log.warning("Worker %s: the fork server died before starting %d job(s): forking "
                    "them from the worker", self.spec.name, len(slots))
        own = self.own.launch([s.job for s in slots], [s.index for s in slots], lambda: None)
        for slot, new in zip(slots, own):
            slot.adopt(new)
        self.own.running = [s for s in self.own.running if s not in own] + slots

    def tidy(self) -> None:
        self.own.tidy()
        if self.retiring:
            in_use = {id(server) for server in self._servers()}
            for old in [o for o in self.retiring if id(o) not in in_use]:
                self.retiring.remove(old)
                self._drop_pool(old)
                old.close()

    def renew(self) -> None:
        """A fresh fork server, so changed job code is seen by the next job. Horses still
        running on the old one must not die with it: it is kept until its last horse
        ended (:meth:`tidy`), the new one forks the next jobs."""
        old, self.server = self.server, None
        if old is None:
            return
        if id(old) in self.pools:          # its handed horses: idle ones retire now
            self.pools[id(old)].retire_idle()
        if id(old) in self.asked or any(slot.origin is old for slot in self.by_entry.values()):
            self.retiring.append(old)
        else:
            self._drop_pool(old)
            old.close()
        self.start()
        log.info("Worker %s: new fork server; the next job imports its code afresh",
                 self.spec.name)

    def close(self) -> None:
        self.own.close()
        for server in [*self.retiring, *([self.server] if self.server else [])]:
            self._drop_pool(server)
            server.close()
        self.retiring.clear()
        self.server = None


__all__ = ["ForkServerLauncher", "InProcessLauncher", "LaunchSpec", "Launcher",
           "OwnForkLauncher", "make_board"]
