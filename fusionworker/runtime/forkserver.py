"""The fork server: a lean child of the worker that forks the horses.

Why: ``fork()`` + ``_exit`` + ``waitpid`` costs in proportion to the memory
(page tables) of the process that forks. The worker parent holds redis-py,
click, psutil, the middleware: ~45 MiB, ~2.5 ms a fork on a small VM. The fork
server is a fresh interpreter that imported only what a horse needs
(``fusionworker.horse`` and its few stdlib modules, ~16 MiB), so forking a
horse from it costs a fraction of that. Each job still gets a fresh process
(isolation is unchanged): a job's changes to module state die with its horse.
Once a horse ran a function of an allowed module (registered or allow-listed,
see ``functions.py``) successfully, the server imports that module too, so
later horses find it imported, and resolves each function of it that runs
(every check of ``functions.resolve``), so later horses find it resolved
(``horse.resolved``; resolved again after each later preload, whose import
may rebind it).

Processes and what happens when one dies::

    worker (parent) --socketpair--> fork server --fork--> horse (own process group)

    * worker dies  -> PR_SET_PDEATHSIG kills the server, which kills the horse
                      (the horse's PDEATHSIG names the server): no orphan job.
    * server dies  -> the worker reads EOF: the running job fails as killed
                      (``fork server died``), its horse's group is killed, and
                      a new server is started for the next job.
    * horse dies   -> the server reaps it and sends its wait status and
                      whatever report it wrote; the worker decides as before.
    * timeouts and kills: the worker signals the horse's process group itself
      (same user), exactly as with a horse of its own.

Horses are forked ahead: the server always holds a ready horse (as many as
the largest batch of requests one turn brought, at most ``READY_MAX``: a
worker with many slots sends its claims at once), forked while the worker
records the previous jobs (or idles), each blocked on a pipe until its one
job arrives (EOF instead: it exits). It is still a fresh
process per job, forked from the same lean server; it takes its own process
group, PDEATHSIG and signal set-up only once its job came, so an idle one is
not a horse yet. A ready horse forked before a module preload is retired.

Protocol: messages are 4-byte big-endian length + bytes. The worker sends a
``run`` request per job as two frames: JSON ``{"func", "slot"}`` (what the
server itself needs: the module to preload, the deadline entry to watch)
and the job's JSON, which the server hands to the ready horse unparsed. For
each request, in order, the server answers JSON ``{"pid"}``. A progress
frame the horse writes while its job runs (progress.py) is forwarded in the
same turn as JSON ``{"pid", "update"}``. For each horse, once it reported and
closed its pipe (``status`` 0: its exit, the unmapping of its memory,
overlaps the worker's recording; the server reaps it later) or, without a
report, once it exited: JSON ``{"pid", "status", "size"}`` followed by a
frame of ``size`` bytes, the report as the horse wrote it (not JSON-escaped
again). The server reads the socket into a buffer and serves every complete
request of a turn (one epoll wait over the socket, the SIGCHLD wake-up pipe
and the report pipes of the running horses), then sends its answers of that
turn at once (outcomes before it forks the next ready horse). The server
ignores SIGINT/SIGTERM (shutdown is the worker's business) and exits when
the worker closes the socket, after reaping the horses that reported
(``LAST_REAPS``).
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..core.job import Job

from ..core.codec import decode, encode  # a job's arguments travel as tagged JSON (codec.py)
from ..core.functions import resolve
from .progress import FRAME_START, read_available, take_frames

_HEADER = struct.Struct(">I")

# Runs in the fresh interpreter. Importing the package is cheap (its public names are
# imported on first use, PEP 562): the server loads this module, the horse and what they
# import, not redis or the worker. Job code's ``from fusionworker import Retry`` loads
# that name in its horse only.
_BOOT = """\
# fusionworker fork server
import json, sys
path, args = json.loads(sys.argv[1])
sys.path[:] = path
from fusionworker.runtime.forkserver import serve
serve(**args)
"""


def _frame(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg).encode()
    return _HEADER.pack(len(data)) + data


def _raw(data: bytes) -> bytes:
    """A frame of bytes passed through as they are (a job's body, a horse's report)."""
    return _HEADER.pack(len(data)) + data


def send_msg(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall(_frame(msg))


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        try:
            chunk = sock.recv(n - got)
        except InterruptedError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_msg(sock: socket.socket) -> dict[str, Any] | None:
    """One message, or None at EOF (the other side is gone). An exit message carries the
    horse's report as a frame of its own (``size`` bytes, not JSON-escaped again): it is
    read here and put under ``report``, as text."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(head)[0])
    if body is None:
        return None
    msg: dict[str, Any] = json.loads(body)
    if "size" in msg:
        report = _recv_exact(sock, _HEADER.size + int(msg.pop("size")))
        if report is None:
            return None
        msg["report"] = report[_HEADER.size:].decode("utf-8", "replace")
    return msg


def _frames(buf: bytearray) -> list[bytes]:
    """Take every complete frame off the front of ``buf``."""
    out: list[bytes] = []
    pos = 0
    while len(buf) - pos >= _HEADER.size:
        size = _HEADER.unpack_from(buf, pos)[0]
        if len(buf) - pos - _HEADER.size < size:
            break
        out.append(bytes(buf[pos + _HEADER.size:pos + _HEADER.size + size]))
        pos += _HEADER.size + size
    del buf[:pos]
    return out


# -- server side (the lean process) -------------------------------------------------


class _Running:
    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self.buf = bytearray()
        self.status: int | None = None
        self.func = ""


def serve(fd: int, worker_pid: int, allowed: list[str], retryable: list[str],
          preload: bool, otel: dict[str, Any] | None = None, board_fd: int = -1,
          kill_children: bool = True) -> None:
    """Main loop of the fork server. Never returns normally: exits with the worker.

    ``kill_children``: SIGKILL what a job left in its horse's process group once the
    horse exited, before reaping it (``FUSIONWORKER_KILL_JOB_CHILDREN``; :func:`_reap`).

    ``otel``: trace every horse's job (``otel.setup_horses`` arguments). ``board_fd``:
    the worker's horse deadlines (horse.DeadlineBoard), enforced by this process's
    lease watchdog (horse.LeaseWatchdog, one thread for every horse).
    """
    import gc

    from . import horse as horse_mod

    if otel:
        from ..middleware.otel import setup_horses

        setup_horses(**otel)

    horse_mod.set_pdeathsig()
    if os.getppid() != worker_pid:          # the worker died before PDEATHSIG was armed
        os._exit(0)
    try:       # a group of its own: a stop signal to the worker's group leaves it running
        os.setpgid(0, 0)
    except OSError:
        pass
    watchdog: horse_mod.LeaseWatchdog | None = None
    if board_fd >= 0:   # the worker's lease deadlines, enforced here (horse.py docstring)
        slots = max(1, os.fstat(board_fd).st_size // 8)   # one entry per worker slot
        watchdog = horse_mod.LeaseWatchdog(horse_mod.DeadlineBoard(slots=slots, fd=board_fd))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    sock = socket.socket(fileno=fd)
    allowed_t, retryable_t = tuple(allowed), tuple(retryable)
    running: dict[int, _Running] = {}   # by pid: every horse whose exit is not reported
    exiting: set[int] = set()        # horses that reported, not reaped yet
    preloaded: set[str] = set()
    tried: set[str] = set()          # references resolved here once (_remember)
    server_pid = os.getpid()

    def spawn() -> tuple[int, int, int]:
        """Fork a horse that waits for its job: (pid, job pipe write end, report read end)."""
        job_r, job_w = os.pipe()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the horse
            signal.set_wakeup_fd(-1)
            # the other ready horses' job pipes too: a copy of a write end held here
            # would keep that horse from ever reading its job's end
            others = [end for horse in ready for end in horse[1:]]
            for other in (job_w, read_fd, fd, wake_r, wake_w, ep.fileno(), *others):
                try:
                    os.close(other)
                except OSError:
                    pass
            _waiting_horse(job_r, write_fd, server_pid, allowed_t, retryable_t)
        os.close(job_r)
        os.close(write_fd)
        return pid, job_w, read_fd

    ep = select.epoll()
    ep.register(fd, select.EPOLLIN)          # the worker's requests (and its EOF)
    ep.register(wake_r, select.EPOLLIN)      # SIGCHLD
    by_fd: dict[int, _Running] = {}          # report pipe -> its horse
    inbox = bytearray()                      # what the worker sent, not parsed yet
    out: list[bytes] = []                    # frames for the worker, sent once per turn

    def close_report(run: _Running) -> None:
        ep.unregister(run.fd)     # before close: horses forked since hold the pipe too
        del by_fd[run.fd]
        os.close(run.fd)
        run.fd = -1

    def finish(run: _Running) -> None:
        """The horse's outcome is known: report it, preload its module, release it."""
        del running[run.pid]
        out.append(_frame({"pid": run.pid, "status": run.status, "size": len(run.buf)}))
        out.append(_raw(bytes(run.buf)))
        module = run.func.partition(":")[0]
        if preload and module not in preloaded and _reported_ok(run.buf):
            preloaded.add(module)
            _preload(module)
            _resolve_again(allowed_t)    # the import may have rebound what was resolved
            gc.freeze()
            for pid, job_w, read_fd in ready:   # forked before the preload: retired
                os.close(job_w)
                os.close(read_fd)
                exiting.add(pid)
            ready.clear()
        if module in preloaded and run.func not in tried and len(tried) < _REMEMBER_MAX:
            tried.add(run.func)
            _remember(run.func, allowed_t)
            gc.freeze()
        # release the report (a 100 MB result) before forking the next horse: the
        # server would otherwise keep that size for good (issue 18.10)
        run.buf = bytearray()

    def start(meta: dict[str, Any], body: bytes) -> None:
        """Hand one job to a ready horse (a fresh one if none is left or it died)."""
        for _ in range(2):
            pid, job_w, read_fd = ready.pop(0) if ready else spawn()
            try:
                horse_mod._write_all(job_w, body)
                sent = True
            except BrokenPipeError:
                sent = False
            os.close(job_w)
            if sent:
                break
            os.close(read_fd)
            read_fd = -1
        new = _Running(pid, read_fd)
        new.func = meta["func"]
        if read_fd >= 0:
            os.set_blocking(read_fd, False)
            by_fd[read_fd] = new
            ep.register(read_fd, select.EPOLLIN)
            if watchdog is not None:   # its entry on the board (runtime/slot.py: one per slot)
                watchdog.watch(pid, int(meta.get("slot", 0)))
        running[pid] = new
        out.append(_frame({"pid": pid}))

    gc.freeze()
    #: horses forked ahead, off the jobs' critical path: as many as the largest batch of
    #: requests seen in one turn (1 for a worker with one slot), at most READY_MAX
    ready: list[tuple[int, int, int]] = []
    want = 1
    ready.append(spawn())

    while True:
        events = ep.poll()
        eof = False
        ended: list[_Running] = []   # horses whose report or exit came this turn
        for efd, _ in events:
            if efd == wake_r:
                horse_mod.drain(wake_r)
            elif efd == fd:
                eof = _receive(sock, inbox)
            else:
                run = by_fd.get(efd)
                if run is None:
                    continue
                done = _read_report(run)
                _forward_frames(out, run)
                if done:
                    close_report(run)
                    ended.append(run)
        if running or exiting:
            for pid in _reap_children(running, exiting, watchdog, kill_children):
                if pid in running:
                    ended.append(running[pid])
        for run in ended:
            if run.pid not in running:
                continue                 # listed twice (its pipe closed, then reaped)
            if run.status is None and run.fd < 0 and _has_report(run.buf):
                # the horse closed its pipe after its report (horse_main): the outcome is
                # known; it is reaped later, while it unmaps its memory (off the critical path)
                exiting.add(run.pid)
                run.status = 0
            if run.status is None:
                continue
            if run.fd >= 0:   # it exited: everything it wrote is in the pipe already
                _read_report(run)
                _forward_frames(out, run)
                close_report(run)
            finish(run)
        if out:               # the outcomes go out before the next horse is forked
            eof = not _send(sock, out) or eof
        # no new job once the worker is gone: nobody would record it (its lease returns it)
        frames = _frames(inbox) if not eof else []
        for meta, body in zip(frames[::2], frames[1::2]):   # run request: meta, then job
            start(json.loads(meta), body)
        want = min(READY_MAX, max(want, len(frames) // 2))
        if len(frames) % 2:                  # a meta whose body is still on its way
            inbox[:0] = _raw(frames[-1])
        del frames
        if out:
            eof = not _send(sock, out) or eof
        if eof:
            _last_reaps(running, exiting, ready, watchdog, kill_children)
            os._exit(0)
        while len(ready) < want:             # fork ahead, but answer the worker first
            ready.append(spawn())
            if ep.poll(0):
                break


def _receive(sock: socket.socket, inbox: bytearray) -> bool:
    """Everything the worker's socket holds now, into ``inbox``; True at EOF (the worker
    is gone or done with us). It reads on until the socket would block, so requests
    followed by the worker's end are seen as that end in the same turn: a worker
    killed right after sending them starts no job (nobody would record it)."""
    flags = 0                               # the first read: epoll said it is readable
    while True:
        try:
            chunk = sock.recv(1 << 18, flags)
        except BlockingIOError:             # all read, the worker is still there
            return False
        except ConnectionResetError:        # the worker died with data unread: gone
            return True
        if not chunk:
            return True
        inbox.extend(chunk)
        flags = socket.MSG_DONTWAIT


def _send(sock: socket.socket, out: list[bytes]) -> bool:
    """Send this turn's answers; False: the worker is gone (it died or closed the
    socket), which ends the server as an EOF does, without a traceback."""
    data = b"".join(out)
    out.clear()
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def _waiting_horse(job_r: int, write_fd: int, server_pid: int, allowed: tuple[str, ...],
                   retryable: tuple[str, ...]) -> None:  # pragma: no cover - the horse
    """A horse forked ahead: wait for its one job on ``job_r``, then run it.

    EOF without a job (the server retired it, or died): exit. It joins its own
    process group only with its job (horse_main), so an idle one is no horse yet.
    """
    from ..core.job import Job
    from . import horse as horse_mod

    try:
        chunks = []
        while True:
            chunk = os.read(job_r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(job_r)
        if not chunks:
            os._exit(0)
        msg = json.loads(b"".join(chunks))
        job: Job[Any] = Job(
            id=msg["id"], queue=msg["queue"], func=msg["func"], args=decode(msg["args"]),
            kwargs=decode(msg["kwargs"]), timeout=msg["timeout"],
            attempts=msg.get("attempt", 0), max_retries=msg.get("max_retries", 0))
        if "meta" in msg:   # what the job's record holds (progress.py): current_job().meta
            job.meta = decode(msg["meta"])
        if "trace" in msg:   # OpenTelemetry on: what the job's span needs
            job.attempts, job.priority, job.traceparent, job.tracestate = msg["trace"]
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        os._exit(70)
    horse_mod.horse_main(job, write_fd, server_pid, allowed, retryable)


def _reap_children(running: dict[int, _Running], exiting: set[int], watchdog: Any = None,
                   kill_children: bool = True) -> list[int]:
    """Reap every horse that exited: running ones get their status; returns the pids
    reaped. Under the lease watchdog's lock: it never signals a pid reaped here
    (horse.LeaseWatchdog)."""
    if watchdog is None:
        return _reap(running, exiting, None, kill_children)
    with watchdog.lock:
        return _reap(running, exiting, watchdog, kill_children)


def _reap(running: dict[int, _Running], exiting: set[int], watchdog: Any,
          kill_children: bool) -> list[int]:
    """``kill_children``: each exited horse is looked at before it is reaped (``WNOWAIT``):
    a zombie keeps its pid, so its process group id still names only what it left there
    (a job's ``subprocess.Popen`` children), which is SIGKILLed; then it is reaped. A
    child that called ``setsid()`` left the group and escapes, by design. (A horse that
    never got a job has no group of its own: nothing is signalled.)"""
    reaped: list[int] = []
    while True:
        try:
            if kill_children:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if info is None or not info.si_pid:
                    return reaped
                pid = info.si_pid
                _kill_group(pid)
                status = os.waitpid(pid, 0)[1]
            else:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    return reaped
        except ChildProcessError:
            for run in running.values():
                if run.status is None:
                    run.status = 0
                    reaped.append(run.pid)
                if watchdog is not None:
                    watchdog.forget(run.pid)
            exiting.clear()
            return reaped
        if watchdog is not None:
            watchdog.forget(pid)
        found = running.get(pid)
        if found is not None and found.status is None:
            found.status = status
        exiting.discard(pid)
        reaped.append(pid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


#: Horses the server forks ahead at most (see serve: as many as the largest batch of
#: requests one turn brought, e.g. the claims a worker with many slots sends at once).
READY_MAX = 16

#: Seconds the server, told to exit, waits for horses that reported and are still
#: exiting (e.g. flushing their spans), reaping them and their leftovers; below the
#: 2 s ForkServer.close() gives it.
LAST_REAPS = 1.5


def _last_reaps(running: dict[int, _Running], exiting: set[int],
                ready: list[tuple[int, int, int]], watchdog: Any, kill_children: bool) -> None:
    """The worker closed the socket: retire the ready horse, kill what still runs a job
    (it would die with us anyway, PDEATHSIG; its group goes with it), and reap the rest
    so that what their jobs left behind is killed too."""
    for _, job_w, read_fd in ready:
        os.close(job_w)                # it reads EOF: it exits
        os.close(read_fd)
    for run in running.values():       # not reported: a job still running
        if kill_children:
            _kill_group(run.pid)
        else:
            try:
                os.kill(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + LAST_REAPS
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                time.sleep(0.01)
                continue
        except ChildProcessError:
            return                     # no child left
        _reap_children(running, exiting, watchdog, kill_children)


def _read_report(running: _Running) -> bool:
    """Read what the horse's report pipe holds; True at EOF (the caller closes it)."""
    return read_available(running.fd, running.buf)


def _forward_frames(out: list[bytes], run: _Running) -> None:
    """The progress frames at the front of the horse's pipe data, for the worker."""
    if run.buf and run.buf[0] == FRAME_START:
        for frame in take_frames(run.buf):
            out.append(_frame({"pid": run.pid, "update": frame}))


def _has_report(buf: bytearray) -> bool:
    """The pipe data is a report (not nothing, not a progress frame cut off by death)."""
    return bool(buf) and buf[0] != FRAME_START


def _reported_ok(buf: bytearray) -> bool:
    try:
        return bool(json.loads(buf.decode()).get("ok"))
    except (ValueError, AttributeError):
        return False


def _preload(module: str) -> None:
    """Import a module a horse just ran fine, so later horses find it imported."""
    import importlib

    try:
        importlib.import_module(module)
    except BaseException:  # noqa: BLE001 - a bad import must not kill the server; horses still try
        pass


#: How many job functions the server resolves for its horses (horse.resolved), at most.
_REMEMBER_MAX = 1024


def _remember(ref: str, allowed: tuple[str, ...]) -> None:
    """Resolve ``ref`` here, once its module is preloaded, with every check of
    ``functions.resolve``: the horses forked from now on find it in ``horse.resolved``
    (the same checks on the same module state: a horse is a copy of this process).
    An ``async def`` also has asyncio preloaded (``horse.call`` imports it on first
    use: a server of sync jobs does not map it, ~6 MiB with ssl)."""
    import importlib
    import inspect

    from . import horse as horse_mod

    try:
        func = resolve(ref, allowed)
        horse_mod.resolved[ref] = func
        if inspect.iscoroutinefunction(inspect.unwrap(func)):
            importlib.import_module("asyncio")
    except BaseException:  # noqa: BLE001 - refused or broken: each horse checks it and says why
        pass


def _resolve_again(allowed: tuple[str, ...]) -> None:
    """After a preload: resolve every remembered function again (an import can rebind
    a module's attributes); one that no longer resolves is forgotten."""
    from . import horse as horse_mod

    for ref in list(horse_mod.resolved):
        try:
            horse_mod.resolved[ref] = resolve(ref, allowed)
        except BaseException:  # noqa: BLE001 - as in _remember
            del horse_mod.resolved[ref]


# -- worker side ---------------------------------------------------------------------


class ForkServerDied(RuntimeError):
    """The fork server went away (killed, crashed) or could not be started."""


class ForkServer:
    """The worker's handle of its fork server (started lazily, restarted if it dies)."""

    def __init__(self, allowed: tuple[str, ...], retryable: tuple[str, ...],
                 otel: dict[str, Any] | None = None, board_fd: int = -1,
                 kill_children: bool = True) -> None:
        self.board_fd = board_fd        # the worker's DeadlineBoard (horse.py), shared
        #: the server kills what a job left in its horse's group (FUSIONWORKER_KILL_JOB_CHILDREN)
        self.kill_children = kill_children
        self.allowed = tuple(allowed)
        self.retryable = tuple(retryable)
        self.otel = otel
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._exits: dict[int, dict[str, Any]] = {}
        #: gets (pid, frame) for every progress frame of a horse (progress.py); None: dropped
        self.on_update: Callable[[int, str], None] | None = None

    def start(self) -> None:
        """Start the server process (a fresh interpreter; about 30 ms, once)."""
        ours, theirs = socket.socketpair()
        args = {"fd": theirs.fileno(), "worker_pid": os.getpid(), "allowed": list(self.allowed),
                "retryable": list(self.retryable), "preload": bool(self.allowed),
                "board_fd": self.board_fd, "kill_children": self.kill_children}
        if self.otel:
            args["otel"] = self.otel
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps([sys.path, args])],
                pass_fds=[theirs.fileno()] + ([self.board_fd] if self.board_fd >= 0 else []),
                stdin=subprocess.DEVNULL, close_fds=True,
            )
        except OSError as exc:
            ours.close()
            raise ForkServerDied(f"cannot start the fork server: {exc}") from exc
        finally:
            theirs.close()
        self.sock = ours

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def run(self, job: Job[Any], while_forking: Callable[[], None] | None = None) -> int:
        """Ask for a horse for ``job``; returns its pid. Raises ForkServerDied.

        ``while_forking`` runs between the request and the server's answer.
        """
        return self.spawn_many([job], None, while_forking)[0]

    def poll_exit(self, block: bool) -> dict[str, Any] | None:
        """The exit message of the running horse, if there (``block``: wait for it).

        Raises ForkServerDied when the server is gone.
        """
        assert self.sock is not None
        while True:
            if not block:
                readable, _, _ = select.select([self.sock], [], [], 0)
                if not readable:
                    return None
            msg = self._recv()
            if not self._update(msg):
                return msg

    def _update(self, msg: dict[str, Any]) -> bool:
        """Hand a progress frame to :attr:`on_update`; False: ``msg`` is something else."""
        if "update" not in msg:
            return False
        if self.on_update is not None:
            self.on_update(int(msg["pid"]), msg["update"])
        return True

    def _run_msg(self, job: Job[Any], slot: int = 0) -> bytes:
        """The ``run`` request of one job: a small frame the server reads (its function,
        its deadline entry) and the job's own frame, which the server passes to the horse
        as it is (what _waiting_horse reads)."""
        msg = {"id": job.id, "queue": job.queue, "func": job.func,
               "args": encode(job.args), "kwargs": encode(job.kwargs), "timeout": job.timeout}
        if self.otel:
            msg["trace"] = [job.attempts, job.priority, job.traceparent, job.tracestate]
        msg["attempt"], msg["max_retries"] = job.attempts, job.max_retries
        if getattr(job, "meta", None):     # current_job().meta starts from it (progress.py)
            msg["meta"] = encode(job.meta)
        return _frame({"func": job.func, "slot": slot}) + _raw(json.dumps(msg).encode())

    # -- many horses at once (--concurrency N, see runtime/loop.py) -----------------

    def spawn_many(self, jobs: list[Any], slots: list[int] | None = None,
                   while_forking: Callable[[], None] | None = None) -> list[int]:
        """Ask for one horse per job, all requests sent before any answer is read (the
        server answers in order); returns their pids. ``while_forking`` runs between the
        requests and the answers. Exit messages of other horses that arrive meanwhile
        are kept for :meth:`exits`. Raises ForkServerDied."""
        if not self.alive:
            self.close()
            self.start()
        assert self.sock is not None
        slots = slots or [0] * len(jobs)   # each horse's deadline board entry (runtime/slot.py)
        data = b"".join(self._run_msg(job, slot) for job, slot in zip(jobs, slots))
        try:
            self.sock.sendall(data)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
            self.close()
            raise ForkServerDied("the fork server went away") from None
        if while_forking:
            while_forking()
        pids: list[int] = []
        while len(pids) < len(jobs):
            msg = self._recv()
            if self._update(msg):
                continue
            if "status" in msg:
                self._exits[int(msg["pid"])] = msg
            else:
                pids.append(int(msg["pid"]))
        return pids

    def exits(self) -> tuple[dict[int, dict[str, Any]], bool]:
        """Every exit message the server sent so far (read without blocking), by pid,
        each handed over once; and whether the server is gone (its other horses then
        die with it: PDEATHSIG)."""
        died = False
        try:
            while self.sock is not None and select.select([self.sock], [], [], 0)[0]:
                msg = self._recv()
                if not self._update(msg):
                    self._exits[int(msg["pid"])] = msg
        except ForkServerDied:
            died = True
        out, self._exits = self._exits, {}
        return out, died or self.sock is None

    @property
    def has_exits(self) -> bool:
        """Exit messages received meanwhile (by :meth:`spawn_many`) wait for :meth:`exits`."""
        return bool(self._exits)

    def _recv(self) -> dict[str, Any]:
        assert self.sock is not None
        try:
            msg = recv_msg(self.sock)
        except OSError:
            msg = None
        if msg is None:
            self.close()
            raise ForkServerDied("the fork server went away")
        return msg

    def close(self) -> None:
        """Stop the server (closing the socket is its signal to exit)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
