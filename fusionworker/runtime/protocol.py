"""What the worker, its fork server and the horses say to each other: the one place
that writes and reads the wire.

Two channels:

* **the fork server's socket** (worker <-> fork server, forkserver/): messages
  are 4-byte big-endian length + bytes (:func:`frame`). Headers are ``marshal``
  data (:func:`head_frame`): the worker and its fork server write them for each
  other, nothing a job or Redis sends is ever unmarshalled, and it is one C call
  each way (JSON cost both processes Python code, and the fork server a
  copy-on-write fault for each page that code touched after each fork). The
  worker sends a :class:`RunRequest` per job as two frames: ``{"func",
  "entry"}`` (what the server needs itself: the module to preload, the deadline
  entry to watch) and the job's own body (marshal data too, :func:`job_of`),
  which the server hands to a waiting horse unparsed. The server answers, per
  request and in order, a :class:`StartNotice` (``{"pid", "e"}``); forwards each
  progress frame of a horse as a :class:`ProgressNotice` (``{"pid", "update",
  "e"}``); a :class:`MovedNotice` (``{"pid", "to", "e"}``) when a warm horse died
  before it took its job; and, once a job ended (its report, or its horse exited
  without one), an :class:`ExitNotice`: ``{"pid", "status", "size", "e"}``
  followed by a frame of ``size`` bytes, the report as the horse wrote it,
  unparsed (the worker reads it as untrusted JSON). ``"e"`` is the job's deadline
  board entry, unique among the worker's running jobs. With warm horses the
  server hands a sync horse that reported its first job to the worker: a
  :class:`HandoverNotice` (``{"pid", "e", "h", "f"}``) whose write carries the
  horse's job pipe write end and report pipe read end (SCM_RIGHTS); the worker
  writes that horse's job frames and reads its reports itself from then on
  (design.md, "The direct path"), and the server says a handed horse's wait
  status once it reaped it (:class:`GoneNotice`, ``{"pid", "gone"}``). A
  :class:`StartNotice` of a warm sync job says its function's cap (``"c"``). An
  async horse (``--async-per-horse``) is handed over with its first job: its
  :class:`HandoverNotice` (``"a"``, and the function's cap ``"c"``) is also the
  answer to that job's request (design.md, "Async horses").
* **a horse's report pipe** (horse -> whoever forked it): zero or more
  progress frames (``RS`` + JSON + ``\\n``, RFC 7464; at most one per 0.1 s,
  progress.py), then one :class:`HorseReport` as JSON (it starts with ``{``),
  then EOF (a warm horse that stays: :data:`STAY` instead of EOF; one that
  refuses a job the worker wrote it: :data:`REFUSED` then :data:`STAY`). A horse runs job code: what it writes is read as JSON, never
  unmarshalled.

Only the standard library, ``core.codec`` and ``core.job`` (which the fork server
loads anyway) are imported here: the fork server and every horse load this module.
"""

from __future__ import annotations

import array
import fcntl
import json
import logging
import marshal
import os
import select
import socket
import struct
import termios
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.codec import decode, encode  # a job's arguments travel as tagged JSON
from ..core.job import made_job

if TYPE_CHECKING:  # pragma: no cover
    from ..core.job import Job

HEADER = struct.Struct(">I")

#: A progress frame on a report pipe starts with ASCII RS (RFC 7464); a report with ``{``.
FRAME_START = 0x1E

#: What a warm horse writes after its report when it stays for another job (a report
#: never holds a raw newline).
STAY = b"\n"

#: What a warm horse writes (then STAY) instead of a report when the worker wrote it a
#: job it may not run (the direct path: its function's cap, or an ``async def`` job
#: that belongs to an async horse): nothing ran, the job goes to the fork server.
REFUSED = b"\x15"

#: What a handed warm horse writes before it runs the first job of a function it has
#: not run yet, once it decided it may run it (its function resolved, nothing of the
#: job run): ACCEPT, the function's cap in digits, a newline. The worker takes a
#: REFUSED as a refusal only in that place, before any of the job's code ran.
ACCEPT = b"\x06"

#: How many times the fork server hands on a job whose warm horse died before taking it,
#: at most (the worker hands a job its handed horse never read to the server once).
MOVES_MAX = 3



# -- the fork server's socket: framing ---------------------------------------------------


def frame(data: bytes) -> bytes:
    """``data`` as one frame, passed through as it is (a job's body, a horse's report)."""
    return HEADER.pack(len(data)) + data


def head_frame(msg: dict[str, Any]) -> bytes:
    """A message header (module docstring) as one frame: ``marshal`` data."""
    return frame(marshal.dumps(msg))


def take_frames(buf: bytearray) -> list[bytes]:
    """Cut every complete frame off the front of ``buf`` (what arrived so far)."""
    out: list[bytes] = []
    pos = 0
    while len(buf) - pos >= HEADER.size:
        size = HEADER.unpack_from(buf, pos)[0]
        if len(buf) - pos - HEADER.size < size:
            break
        out.append(bytes(buf[pos + HEADER.size:pos + HEADER.size + size]))
        pos += HEADER.size + size
    del buf[:pos]
    return out


def unread(job_w: int) -> int:
    """Bytes a horse has not read from its job pipe (``job_w``, its write end: the pipe
    keeps them after the horse died); 0 when the system cannot say."""
    count = array.array("i", [0])
    try:
        fcntl.ioctl(job_w, termios.FIONREAD, count)
    except OSError:
        return 0
    return count[0]


def _frame_at(buf: bytearray, pos: int) -> tuple[bytes | None, int]:
    """The frame that starts at ``pos`` of ``buf`` and where it ends; None while it is
    not complete."""
    if len(buf) - pos < HEADER.size:
        return None, pos
    size = HEADER.unpack_from(buf, pos)[0]
    end = pos + HEADER.size + size
    if len(buf) < end:
        return None, pos
    return bytes(buf[pos + HEADER.size:end]), end


# -- worker -> fork server ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRequest:
    """Run one job: ``func`` (the module the server may preload), ``entry`` (its entry on
    the deadline board) and ``body``, the job as the horse reads it (:func:`job_of`)."""

    func: str
    entry: int
    body: bytes

    @classmethod
    def of(cls, job: Job[Any], entry: int = 0, trace: bool = False) -> RunRequest:
        """The request for ``job``; ``trace``: OpenTelemetry on (the span's fields go too)."""
        msg: dict[str, Any] = {"id": job.id, "queue": job.queue, "func": job.func,
                               "args": encode(job.args), "kwargs": encode(job.kwargs),
                               "timeout": job.timeout}
        if trace:
            msg["trace"] = [job.attempts, job.priority, job.traceparent, job.tracestate]
        msg["attempt"], msg["max_retries"] = job.attempts, job.max_retries
        if job.retry_on is not None:       # the job's own retryable classes (horse/run.py)
            msg["retry_on"] = job.retry_on
        if getattr(job, "meta", None):     # current_job().meta starts from it (progress.py)
            msg["meta"] = encode(job.meta)
        return cls(job.func, entry, marshal.dumps(msg))

    def encode(self) -> bytes:
        return head_frame({"func": self.func, "entry": self.entry}) + frame(self.body)

    @staticmethod
    def split(frames: list[bytes]) -> tuple[list[RunRequest], bytes | None]:
        """The requests among the frames the server received, in order (a request is
        two frames), and the frame of a request whose body is still on its way (or None)."""
        requests: list[RunRequest] = []
        pos = 0
        while pos < len(frames):
            meta = marshal.loads(frames[pos])
            if pos + 1 == len(frames):
                return requests, frames[pos]
            requests.append(RunRequest(meta["func"], int(meta.get("entry", 0)), frames[pos + 1]))
            pos += 2
        return requests, None


#: What a horse reads on its job pipe before the job: its deadline board entry (its own
#: lease, horse/lease.py), a signed 32-bit integer (-1: none)
ENTRY = struct.Struct(">i")


def for_horse(request: RunRequest) -> bytes:
    """What the fork server writes to a horse's job pipe: the entry, then the body."""
    return ENTRY.pack(request.entry) + request.body


#: The body of a frame on an async horse's job pipe that cancels the task of its entry
CANCEL = b"C"


def cancel_for_horse(entry: int) -> bytes:
    """The frame the worker writes to an async horse's job pipe to cancel the task of
    the job on board entry ``entry`` (a stop of that job: ``job stop``)."""
    return frame(ENTRY.pack(entry) + CANCEL)


#: the first byte of the body of an async job's frame (a body is a marshalled dict: its
#: first byte is "{", or 0xFB with marshal's reference flag, never "A")
ASYNC = b"A"
#: what an async horse writes when it takes no more jobs (a line of its own)
LEAVING = b"-"
#: the start of an async horse's line naming the job that holds its loop
HOLDS_LOOP = b"!"


def for_async_horse(entry: int, body: bytes) -> bytes:
    """The frame of an ``async def`` job (the body of its :class:`RunRequest`) on an
    async horse's job pipe (the first one makes a ready horse an async horse)."""
    return frame(ENTRY.pack(entry) + ASYNC + body)


def take_lines(buf: bytearray) -> list[bytes]:
    """Cut every complete line off the front of ``buf`` (an async horse's report pipe:
    ``<entry> <report>``, ``<entry> <RS-frame>``, ``-``, ``!<entry> <seconds>``)."""
    end = buf.rfind(b"\n")
    if end < 0:
        return []
    lines = bytes(buf[:end]).split(b"\n")
    del buf[:end + 1]
    return lines


def from_server(data: bytes) -> tuple[int, bytes]:
    """In the horse: (board entry, the job's body) of what :func:`for_horse` wrote."""
    return ENTRY.unpack_from(data)[0], data[ENTRY.size:]


def job_of(body: bytes) -> Job[Any]:
    """In the horse: the job of a :class:`RunRequest`'s body.

    The body is ``marshal`` data: the worker wrote it (plain data: strings, numbers,
    the codec's lists and dicts, at most ``MAX_DEPTH`` deep) and only its own horses
    read it; nothing a horse or Redis sends is ever unmarshalled. One C call: a fresh
    horse's first ``json.loads`` touches ~60 pages of the fork server's heap (each a
    copy-on-write fault, ~150 us of its CPU)."""
    msg = marshal.loads(body)
    job = made_job({
        "id": msg["id"], "queue": msg["queue"], "func": msg["func"],
        "args": decode(msg["args"]), "kwargs": decode(msg["kwargs"]),
        "timeout": msg["timeout"], "attempts": msg.get("attempt", 0),
        "max_retries": msg.get("max_retries", 0)})
    if "retry_on" in msg:
        job.retry_on = [str(name) for name in msg["retry_on"]]
    if "meta" in msg:   # what the job's record holds (progress.py): current_job().meta
        job.meta = decode(msg["meta"])
    if "trace" in msg:   # OpenTelemetry on: what the job's span needs
        job.attempts, job.priority, job.traceparent, job.tracestate = msg["trace"]
    return job


# -- fork server -> worker ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartNotice:
    """The answer to a :class:`RunRequest`: the pid of the horse that got the job.

    ``shared``: an async horse's (it runs other jobs at the same time): the first job
    of a new async horse is answered by the horse's :class:`HandoverNotice`, which the
    worker's handle reads as this notice too (forkserver/client.py); a job the server
    gave that horse in the same turn, by this notice (``"a"``), after it."""

    pid: int
    entry: int = -1          #: the job's board entry (unique among the running jobs)
    shared: bool = False
    #: how many jobs a horse running this function may run in all (warm horses: the
    #: worker hands the function's later jobs to the horses it was handed itself)
    cap: int = 0

    def encode(self) -> bytes:
        if self.shared:
            return head_frame({"pid": self.pid, "e": self.entry, "c": self.cap, "a": 1})
        if self.cap:
            return head_frame({"pid": self.pid, "e": self.entry, "c": self.cap})
        return head_frame({"pid": self.pid, "e": self.entry})


@dataclass(frozen=True, slots=True)
class HandoverNotice:
    """A warm horse that reported its first job and stays, handed to the worker: its
    job pipe's write end and its report pipe's read end travel with this notice
    (SCM_RIGHTS, in that order); the worker writes its jobs and reads its reports from
    now on (design.md, "The direct path"). ``entry``: the board entry of the job it
    ran (its GPU device), ``done``: the jobs it ran.

    ``shared``: an async horse, handed with its first job (``entry``, of ``func``)
    as the answer to that job's request; ``cap``: the jobs a horse running ``func``
    may be handed in all."""

    pid: int
    entry: int
    done: int
    func: str = ""     # the function of the job it ran (it has run it: no verdict owed)
    shared: bool = False
    cap: int = 0

    def encode(self) -> bytes:
        if self.shared:
            return head_frame({"pid": self.pid, "e": self.entry, "h": self.done,
                               "f": self.func, "a": 1, "c": self.cap})
        return head_frame({"pid": self.pid, "e": self.entry, "h": self.done,
                           "f": self.func})


@dataclass(frozen=True, slots=True)
class GoneNotice:
    """A horse handed to the worker was reaped: its wait status."""

    pid: int
    status: int

    def encode(self) -> bytes:
        return head_frame({"pid": self.pid, "gone": self.status})


@dataclass(frozen=True, slots=True)
class MovedNotice:
    """A warm horse (horse/warm.py) died before it read the job it was handed (its
    job pipe still held it): the job went to the horse ``to`` instead; every later
    notice of the job names ``to``."""

    pid: int
    to: int
    entry: int = -1

    def encode(self) -> bytes:
        return head_frame({"pid": self.pid, "to": self.to, "e": self.entry})


@dataclass(frozen=True, slots=True)
class ProgressNotice:
    """A progress frame a horse wrote (its text between RS and the newline)."""

    pid: int
    update: str
    entry: int = -1

    def encode(self) -> bytes:
        return head_frame({"pid": self.pid, "update": self.update, "e": self.entry})


@dataclass(frozen=True, slots=True)
class ExitNotice:
    """A horse's end: its wait status (0 when it reported and closed its pipe; it is
    reaped later) and what its pipe held after the progress frames (its report)."""

    pid: int
    status: int
    report: bytes
    entry: int = -1

    def encode(self) -> bytes:
        return (head_frame({"pid": self.pid, "status": self.status, "size": len(self.report),
                            "e": self.entry}) + frame(self.report))


Notice = (StartNotice | ProgressNotice | ExitNotice | MovedNotice | HandoverNotice
          | GoneNotice)


def take_notices(buf: bytearray) -> list[Notice]:
    """Cut every complete notice off the front of ``buf`` (what the worker read of the
    fork server's socket so far), in the order they were sent; an incomplete one (an
    exit notice whose report frame is still on its way, too) stays for the next read."""
    out: list[Notice] = []
    pos = 0
    while True:
        body, end = _frame_at(buf, pos)
        if body is None:
            break
        msg: dict[str, Any] = marshal.loads(body)
        pid, entry = int(msg["pid"]), int(msg.get("e", -1))
        if "size" in msg:
            report, end = _frame_at(buf, end)
            if report is None:
                break
            out.append(ExitNotice(pid, int(msg["status"]), report, entry))
        elif "update" in msg:
            out.append(ProgressNotice(pid, msg["update"], entry))
        elif "to" in msg:
            out.append(MovedNotice(pid, int(msg["to"]), entry))
        elif "h" in msg:
            out.append(HandoverNotice(pid, entry, int(msg["h"]), str(msg.get("f", "")),
                                      bool(msg.get("a")), int(msg.get("c", 0))))
        elif "gone" in msg:
            out.append(GoneNotice(pid, int(msg["gone"])))
        else:
            out.append(StartNotice(pid, entry, bool(msg.get("a")), int(msg.get("c", 0))))
        pos = end
    del buf[:pos]
    return out


# -- a horse's report pipe ---------------------------------------------------------------


#: a str as a JSON string literal, as ``json.dumps`` writes it (ASCII, escapes): one C call
_quoted: Callable[[str], str] = json.encoder.encode_basestring_ascii
_OPTIONAL_FIELDS = ("result", "error_type", "error_message", "traceback", "retry_delay", "progress", "job", "ended")


@dataclass(slots=True)
class HorseReport:
    """What a horse writes once its job returned or raised (the death penalty included).

    ``reason`` is ``"ok"`` or a :class:`~fusionworker.core.job.FailureReason`; the
    fields come from job code, so the parent reads them as untrusted (exits.py)."""

    ok: bool
    reason: str
    result: Any = None
    error_type: Any = None
    error_message: Any = None
    traceback: Any = None
    retryable: Any = False
    retry_delay: Any = None
    progress: Any = None     # the job's final progress/meta (progress.py), if it set any
    #: the id of the job it reports for: a warm horse's pipe carries the reports of its
    #: jobs in turn, so the worker takes a report for the job it gave only (slot.py)
    job: Any = None
    ended: Any = None   # time.monotonic() as it was written: the job's end (slot.py)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "reason": self.reason}
        if self.job is not None:
            out["job"] = self.job
        if self.ok:
            out["result"] = self.result
        else:
            out.update(error_type=self.error_type, error_message=self.error_message,
                       traceback=self.traceback, retryable=self.retryable)
            if self.retry_delay is not None:
                out["retry_delay"] = self.retry_delay
        if self.progress is not None:
            out["progress"] = self.progress
        if self.ended is not None:
            out["ended"] = self.ended
        return out

    def encode(self) -> bytes:
        """The report's JSON. A plain success (text fields, no progress) is written by
        hand, the same bytes ``json.dumps`` writes, without an encoder object: in a fresh
        horse that call alone copied ~20 pages of the fork server's heap."""
        self.ended = time.monotonic() if self.ended is None else self.ended  # its end: slot.py
        if self.ok and self.progress is None and type(self.reason) is str and type(
                self.result) is str and type(self.job) is str:
            return ('{"ok": true, "reason": ' + _quoted(self.reason) + ', "job": ' + _quoted(
                self.job) + ', "result": ' + _quoted(self.result) + ', "ended": '
                + repr(self.ended) + "}").encode()
        return json.dumps(self.as_dict()).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HorseReport:
        return cls(ok=data.get("ok") is True, reason=data.get("reason") or "",
                   retryable=data.get("retryable", False),
                   **{name: data.get(name) for name in _OPTIONAL_FIELDS})

    @classmethod
    def decode(cls, data: bytes | bytearray) -> HorseReport | None:
        """The report in a pipe's data (its progress frames taken off), or None: nothing,
        a progress frame cut off by the horse's death, or no JSON object."""
        if not data or data[0] == FRAME_START:
            return None
        try:   # nested past the parser's depth: RecursionError (a job writing its pipe)
            parsed = json.loads(bytes(data).decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return None
        return cls.from_dict(parsed) if isinstance(parsed, dict) else None


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def send_reading(sock: socket.socket, data: bytes, read: Callable[[], bool]) -> bool:
    """Send ``data`` whole; while the socket would block, call ``read`` when the peer
    has something for us (it may itself be blocked sending it: with both ends full and
    nobody reading, both would hang for good). False: the peer is gone (``read``
    returned True, its EOF, or the send found the socket closed)."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view, socket.MSG_DONTWAIT):]
        except BlockingIOError:
            waiting = select.poll()
            waiting.register(sock, select.POLLIN | select.POLLOUT)
            if any(mask & (select.POLLIN | select.POLLHUP) for _, mask in waiting.poll()):
                if read():
                    return False
        except (BrokenPipeError, ConnectionResetError):
            return False
    return True


def take_progress(buffer: bytearray) -> Iterator[str]:
    """Cut the complete progress frames off the front of ``buffer`` (a report pipe's
    bytes); the report, or a frame not complete yet, stays."""
    while buffer and buffer[0] == FRAME_START:
        end = buffer.find(b"\n")
        if end < 0:
            return
        text = buffer[1:end].decode("utf-8", "replace")
        del buffer[:end + 1]
        yield text


def read_available(fd: int, buffer: bytearray, chunk: int = 65536,
                   drained: bool = False, limit: int = 0) -> bool:
    """Append what the non-blocking report pipe ``fd`` holds now to ``buffer``; True at
    EOF (or a read error: the writer is gone either way), False when it would block.
    The worker (a horse of its own) and the fork server (its horses) read alike.
    ``drained``: one read is enough when it returns less than ``chunk`` (the pipe is
    empty now: the read that would only say "nothing more" is saved; an EOF after it
    is seen at the next poll). ``limit``: stop once ``buffer`` holds more than that many
    bytes (a writer as fast as the reader would keep it here for ever; :func:`flood_max`)."""
    while not limit or len(buffer) <= limit:
        try:
            data = os.read(fd, chunk)
        except BlockingIOError:
            return False
        except InterruptedError:
            continue
        except OSError:
            return True
        if not data:
            return True
        buffer.extend(data)
        if drained and len(data) < chunk:
            return False
    return False


def flood_max(result_cap: int) -> int:
    """The bytes a horse's report pipe may hold unread before its horse is taken for a
    job writing on it what is no report (a report is at most the result cap and its
    envelope): twice the cap and a MiB; 0 (no bound) when results are not capped."""
    return 2 * result_cap + (1 << 20) if result_cap > 0 else 0


def flooded(what: str, pid: int, size: int) -> None:
    """Say that job ``what`` of horse ``pid`` flooded its report pipe (it is killed)."""
    logging.getLogger(__name__).error(
        "Job %s wrote %d bytes on the report pipe of its horse %d, more than a report can "
        "hold (FUSIONWORKER_MAX_RESULT_BYTES): the horse is killed", what, size, pid)


def first_report_job(data: bytes | bytearray) -> str | None:
    """The job named by the first JSON document of ``data`` (unreadable as a whole: a
    report followed by more), or None. A warm horse whose job wrote a report of its own
    sends its true one late, ahead of its next job's: that next job is not to blame."""
    try:
        doc, _ = json.JSONDecoder().raw_decode(bytes(data).decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    job = doc.get("job") if isinstance(doc, dict) else None
    return job if isinstance(job, str) else None


def report_of(job_id: str) -> bytes:
    """What every report line for job ``job_id`` holds (:meth:`HorseReport.encode`,
    ``json.dumps`` alike): a line without it is not that job's."""
    return b'"job": ' + _quoted(job_id).encode()


def has_report(buf: bytes | bytearray) -> bool:
    """The pipe data is a report (not nothing, not a progress frame cut off by death)."""
    return bool(buf) and buf[0] != FRAME_START


def drain(fd: int) -> None:
    """Read a non-blocking wake-up pipe (signals, SIGCHLD) empty."""
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, InterruptedError):
        pass


__all__ = [
    "ACCEPT", "ASYNC", "CANCEL", "ENTRY", "FRAME_START", "HOLDS_LOOP", "LEAVING", "MOVES_MAX",
    "REFUSED", "STAY", "ExitNotice", "GoneNotice", "HandoverNotice", "HorseReport", "MovedNotice",
    "Notice", "ProgressNotice", "RunRequest", "StartNotice", "cancel_for_horse", "drain",
    "flood_max", "flooded", "for_async_horse", "for_horse", "frame", "from_server", "has_report",
    "job_of", "read_available", "take_lines", "take_notices", "take_frames", "take_progress",
    "unread", "write_all",
]
