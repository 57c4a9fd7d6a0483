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
later horses find it imported.

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

Horses are forked ahead: the server always holds one ready horse, forked
while the worker records the previous job (or idles), blocked on a pipe
until its one job arrives (EOF instead: it exits). It is still a fresh
process per job, forked from the same lean server; it takes its own process
group, PDEATHSIG and signal set-up only once its job came, so an idle one is
not a horse yet. A ready horse forked before a module preload is retired.

Protocol (one horse at a time): the worker sends ``run`` with the job; the
server hands it to the ready horse and answers ``{"pid"}``, then ``{"pid", "status",
"report"}`` once the horse reported and closed its pipe (``status`` 0: its
exit, the unmapping of its memory, overlaps the worker's recording; the
server reaps it later) or, without a report, once it exited. Messages are
4-byte big-endian length + JSON. The server ignores SIGINT/SIGTERM (shutdown is the worker's business)
and exits when the worker closes the socket.
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
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct(">I")

# Runs in the fresh interpreter: ``fusionworker`` is registered without running
# its ``__init__`` (which pulls in redis and the worker: exactly the memory the
# server exists to avoid). Job code that does ``from fusionworker import Retry``
# runs the real ``__init__`` on first use (PEP 562 module ``__getattr__``), in
# its horse only. ``fusionworker.job`` is both a submodule and, after the real
# ``__init__``, the ``@job`` decorator: serve() drops the submodule attribute so
# that ``from fusionworker import job`` in job code gets the decorator.
_BOOT = """\
# fusionworker fork server
import importlib.util, json, os, sys
path, pkg_dir, args = json.loads(sys.argv[1])
sys.path[:] = path
spec = importlib.util.spec_from_file_location(
    "fusionworker", pkg_dir + "/__init__.py", submodule_search_locations=[pkg_dir])
pkg = importlib.util.module_from_spec(spec)
sys.modules["fusionworker"] = pkg
def _load_package(name):
    if name != "job" and os.path.exists(os.path.join(pkg_dir, name + ".py")):
        raise AttributeError(name)   # a submodule: the import system loads it by itself
    del pkg.__getattr__
    spec.loader.exec_module(pkg)
    return getattr(pkg, name)
pkg.__getattr__ = _load_package
from fusionworker.forkserver import serve
serve(**args)
"""


def _frame(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg).encode()
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
    """One message, or None at EOF (the other side is gone)."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


# -- server side (the lean process) -------------------------------------------------


class _Running:
    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self.buf = bytearray()
        self.status: int | None = None
        self.func = ""


def serve(fd: int, worker_pid: int, allowed: list[str], retryable: list[str],
          preload: bool, otel: dict[str, Any] | None = None, board_fd: int = -1) -> None:
    """Main loop of the fork server. Never returns normally: exits with the worker.

    ``otel``: trace every horse's job (``otel.setup_horses`` arguments). ``board_fd``:
    the worker's horse deadlines (horse.DeadlineBoard), enforced inside each horse.
    """
    import gc

    from . import horse as horse_mod

    package = sys.modules.get(__package__)
    if package is not None and "__getattr__" in vars(package):   # the lazy package (_BOOT)
        vars(package).pop("job", None)   # the submodule; the real __init__ binds the decorator
    if otel:
        from .otel import setup_horses

        setup_horses(**otel)

    horse_mod.set_pdeathsig()
    if board_fd >= 0:   # the worker's lease deadlines, enforced inside each horse
        slots = max(1, os.fstat(board_fd).st_size // 8)   # one entry per worker slot
        horse_mod.attach_board(horse_mod.DeadlineBoard(slots=slots, fd=board_fd))
    if os.getppid() != worker_pid:          # the worker died before PDEATHSIG was armed
        os._exit(0)
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
    server_pid = os.getpid()

    def spawn() -> tuple[int, int, int]:
        """Fork a horse that waits for its job: (pid, job pipe write end, report read end)."""
        job_r, job_w = os.pipe()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the horse
            signal.set_wakeup_fd(-1)
            for other in (job_w, read_fd, fd, wake_r, wake_w):
                try:
                    os.close(other)
                except OSError:
                    pass
            _waiting_horse(job_r, write_fd, server_pid, allowed_t, retryable_t)
        os.close(job_r)
        os.close(write_fd)
        return pid, job_w, read_fd

    gc.freeze()
    ready = spawn()      # the next job's horse, forked ahead (off the job's critical path)

    while True:
        fds = [sock, wake_r] + [r.fd for r in running.values() if r.fd >= 0]
        try:
            readable, _, _ = select.select(fds, [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            horse_mod.drain(wake_r)
        for run in list(running.values()):
            if run.fd >= 0 and run.fd in readable:
                _read_report(run)
        if running or exiting:
            _reap_children(running, exiting)
        for run in list(running.values()):
            if run.status is None and run.fd < 0 and run.buf:
                # the horse closed its pipe after its report (horse_main): the outcome is
                # known; it is reaped later, while it unmaps its memory (off the critical path)
                exiting.add(run.pid)
                run.status = 0
            if run.status is None:
                continue
            if run.fd >= 0:   # it exited: everything it wrote is in the pipe already
                _read_report(run, final=True)
            del running[run.pid]
            send_msg(sock, {"pid": run.pid, "status": run.status,
                            "report": run.buf.decode("utf-8", "replace")})
            module = run.func.partition(":")[0]
            if preload and module not in preloaded and _reported_ok(run.buf):
                preloaded.add(module)
                _preload(module)
                gc.freeze()
                if ready is not None:   # forked before the preload: retire it
                    os.close(ready[1])
                    os.close(ready[2])
                    exiting.add(ready[0])
                    ready = None
            # release the report (a 100 MB result) before forking the next horse: the
            # server would otherwise keep that size for good (issue 18.10)
            run.buf = bytearray()
            del run
            if ready is None:
                ready = spawn()
        if sock in readable:
            msg = recv_msg(sock)
            if msg is None:                  # the worker is gone or done with us
                os._exit(0)
            body = json.dumps(msg).encode()
            for _ in range(2):    # a ready horse killed meanwhile: fork a fresh one
                if ready is None:
                    ready = spawn()
                (pid, job_w, read_fd), ready = ready, None
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
            if read_fd >= 0:
                os.set_blocking(read_fd, False)
            new.func = msg["func"]
            running[pid] = new
            send_msg(sock, {"pid": pid})
            del msg, body         # a job's large arguments: not kept until the next job


def _waiting_horse(job_r: int, write_fd: int, server_pid: int, allowed: tuple[str, ...],
                   retryable: tuple[str, ...]) -> None:  # pragma: no cover - the horse
    """A horse forked ahead: wait for its one job on ``job_r``, then run it.

    EOF without a job (the server retired it, or died): exit. It joins its own
    process group only with its job (horse_main), so an idle one is no horse yet.
    """
    from . import horse as horse_mod
    from .job import Job

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
        from .codec import decode  # arguments travel as tagged JSON (codec.py)

        job = Job(id=msg["id"], queue=msg["queue"], func=msg["func"], args=decode(msg["args"]),
                  kwargs=decode(msg["kwargs"]), timeout=msg["timeout"])
        if "trace" in msg:   # OpenTelemetry on: what the job's span needs
            job.attempts, job.priority, job.traceparent, job.tracestate = msg["trace"]
        horse_mod.watch_slot = int(msg.get("slot", 0))   # its deadline entry (pool.py)
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        os._exit(70)
    horse_mod.horse_main(job, write_fd, server_pid, allowed, retryable)


def _reap_children(running: dict[int, _Running], exiting: set[int]) -> None:
    """Reap every horse that exited: running ones get their status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            for run in running.values():
                if run.status is None:
                    run.status = 0
            exiting.clear()
            return
        if not pid:
            return
        run = running.get(pid)
        if run is not None and run.status is None:
            run.status = status
        exiting.discard(pid)


def _read_report(running: _Running, final: bool = False) -> None:
    while True:
        try:
            chunk = os.read(running.fd, 65536)
        except BlockingIOError:
            if final:
                break
            return
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            chunk = b""
        if not chunk:
            break
        running.buf.extend(chunk)
    os.close(running.fd)
    running.fd = -1


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


# -- worker side ---------------------------------------------------------------------


class ForkServerDied(RuntimeError):
    """The fork server went away (killed, crashed) or could not be started."""


class ForkServer:
    """The worker's handle of its fork server (started lazily, restarted if it dies)."""

    def __init__(self, allowed: tuple[str, ...], retryable: tuple[str, ...],
                 otel: dict[str, Any] | None = None, board_fd: int = -1) -> None:
        self.board_fd = board_fd        # the worker's DeadlineBoard (horse.py), shared
        self.allowed = tuple(allowed)
        self.retryable = tuple(retryable)
        self.otel = otel
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._exits: dict[int, dict[str, Any]] = {}

    def start(self) -> None:
        """Start the server process (a fresh interpreter; about 30 ms, once)."""
        ours, theirs = socket.socketpair()
        pkg_dir = os.path.dirname(os.path.abspath(__file__))
        args = {"fd": theirs.fileno(), "worker_pid": os.getpid(), "allowed": list(self.allowed),
                "retryable": list(self.retryable), "preload": bool(self.allowed),
                "board_fd": self.board_fd}
        if self.otel:
            args["otel"] = self.otel
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps([sys.path, pkg_dir, args])],
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

    def run(self, job: Any, while_forking: Callable[[], None] | None = None) -> int:
        """Ask for a horse for ``job``; returns its pid. Raises ForkServerDied.

        ``while_forking`` runs between the request and the server's answer.
        """
        if not self.alive:
            self.close()
            self.start()
        assert self.sock is not None
        try:
            send_msg(self.sock, self._run_msg(job))
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
            self.close()
            raise ForkServerDied("the fork server went away") from None
        if while_forking:
            while_forking()
        try:
            reply = recv_msg(self.sock)
        except OSError as exc:
            reply = None
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
        if reply is None:
            self.close()
            raise ForkServerDied("the fork server went away")
        return int(reply["pid"])

    def poll_exit(self, block: bool) -> dict[str, Any] | None:
        """The exit message of the running horse, if there (``block``: wait for it).

        Raises ForkServerDied when the server is gone.
        """
        assert self.sock is not None
        if not block:
            readable, _, _ = select.select([self.sock], [], [], 0)
            if not readable:
                return None
        return self._recv()

    def _run_msg(self, job: Any) -> dict[str, Any]:
        """The ``run`` request of one job (what _waiting_horse reads)."""
        from .codec import encode  # tagged JSON: _waiting_horse decodes

        msg = {"id": job.id, "queue": job.queue, "func": job.func,
               "args": encode(job.args), "kwargs": encode(job.kwargs), "timeout": job.timeout}
        if self.otel:
            msg["trace"] = [job.attempts, job.priority, job.traceparent, job.tracestate]
        return msg

    # -- many horses at once (--concurrency N, see pool.py) -------------------------

    def spawn_many(self, jobs: list[Any], slots: list[int] | None = None) -> list[int]:
        """Ask for one horse per job, all requests sent before any answer is read (the
        server answers in order); returns their pids. Exit messages of other horses
        that arrive meanwhile are kept for :meth:`exits`. Raises ForkServerDied."""
        if not self.alive:
            self.close()
            self.start()
        assert self.sock is not None
        msgs = [self._run_msg(job) for job in jobs]
        for msg, slot in zip(msgs, slots or ()):
            msg["slot"] = slot        # the horse's entry on the deadline board (pool.py)
        data = b"".join(_frame(msg) for msg in msgs)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
            self.close()
            raise ForkServerDied("the fork server went away") from None
        pids: list[int] = []
        while len(pids) < len(jobs):
            msg = self._recv()
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
                self._exits[int(msg["pid"])] = msg
        except ForkServerDied:
            died = True
        out, self._exits = self._exits, {}
        return out, died or self.sock is None

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
