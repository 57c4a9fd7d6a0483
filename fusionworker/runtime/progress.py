"""Progress and meta from inside a job: ``fusionworker.current_job()``.

Inside a running job (a plain or an ``async def`` function, in its horse, or
in ``fusionworker.testing``'s in-process worker) :func:`current_job` returns
the job's :class:`JobContext`; anywhere else it returns None (as RQ's
``get_current_job`` does)::

    from fusionworker import current_job

    def import_rows(path):
        job = current_job()
        rows = load(path)
        start = job.meta.get("next_row", 0)        # what an earlier attempt stored
        for i in range(start, len(rows)):
            store(rows[i])
            job.meta["next_row"] = i + 1
            job.set_progress((i + 1) / len(rows), f"row {i + 1} of {len(rows)}")

The horse still never talks to Redis. The sequence (horse H, its sender thread
F, fork server S, worker parent P)::

    H: set_progress(...) / meta[k] = v: the value is checked AT THE CALL (a bad
       one raises there, in the job, and nothing is kept); then stored in
       memory and F is woken (the first call starts F). No syscall on H's own
       thread beyond waking F.
    F: at most one frame per SEND_INTERVAL (0.1 s): what changed since the last
       frame (progress, message, time; the whole meta if it changed), one
       RS-framed JSON line (RFC 7464: 0x1e, JSON, newline) on the horse's
       report pipe, ahead of the report.
    S: forwards every frame at once to P ({"pid", "update"}), in pipe order:
       all of a horse's frames reach P before its exit message.
    P: merges the frame into the job's pending changes; at most once per
       FUSIONWORKER_PROGRESS_INTERVAL per job it writes them with progress.lua,
       fenced by the attempt's token (ProgressRelay). What arrives sooner waits
       for the next frame, the loop's next tick (<= 1 s) or the outcome.
    H: the job returns (or raises, or times out): F is stopped (a frame it is
       writing is finished first) and the whole final state goes in the report.
    P: finish.lua (requeue.lua 'return' for a job given back) writes that final
       state with the outcome, in the same script and round trip, fenced by the
       same token: the last value is never lost to the rate limit.

What if a process dies right there: H dies (SIGKILL, segfault, OOM) -> what
it set in its last SEND_INTERVAL is lost, the rest (what P holds) is written
with the outcome. P dies -> H dies with it (PDEATHSIG); what P had not
written yet (at most one interval) is lost; the job keeps the last written
values and the reaper re-queues it; the next attempt starts from the stored
``meta``. S dies -> H dies with it; as "H dies". Redis unreachable -> P keeps
the pending changes and tries again at the next due time; the outcome carries
them. The attempt was taken back (reaped, deleted) -> progress.lua refuses
(the token is no longer the job's): a late horse writes nothing, P logs it
once and drops that attempt's further changes; no key is created for a
deleted job.

No cost for a job that never calls these: no thread, no frame, no field in
the report, no Redis write; the parent pays one test per read of the pipe.

Rules: ``fraction`` is a number in [0, 1]; ``message`` a string of at most
:data:`MESSAGE_LIMIT` characters; ``meta`` keys are strings and values what
job arguments may be (tagged JSON, ``codec.py``); the meta, encoded, is at
most :data:`META_LIMIT` bytes. Meta values are encoded when assigned: change
a value in place (``meta["rows"].append(...)``) and assign it again (or call
``save_meta()``) to publish it. Threads of the job may call these; a process
the job forks may not (:func:`current_job` is None there).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from ..core import codec
from ..core.job_habits import RQNames
from ..exceptions import MetaTooLarge
from .protocol import write_all

#: The horse sends at most one frame per this many seconds.
SEND_INTERVAL = 0.1
#: Longest progress message, characters.
MESSAGE_LIMIT = 1024
#: Largest meta, bytes of its tagged JSON.
META_LIMIT = 64 * 1024
#: Seconds the sender or the report waits for the context's lock (held for microseconds).
_LOCK_WAIT = 1.0
#: A frame longer than this is dropped by the parent (a job that bypassed the checks).
FRAME_LIMIT = META_LIMIT + 2 * MESSAGE_LIMIT + 4096


def check_fraction(fraction: Any) -> float:
    """``fraction`` as a float in [0, 1], else ValueError / TypeError naming it."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"set_progress: fraction must be a number in [0, 1], got "
                        f"{type(fraction).__name__} {fraction!r}")
    value = float(fraction)
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"set_progress: fraction must be in [0, 1] (0.25 = 25 %), got "
                         f"{fraction!r}")
    return value


def check_message(message: Any) -> str | None:
    if message is None:
        return None
    if not isinstance(message, str):
        raise TypeError(f"set_progress: message must be a string or None, got "
                        f"{type(message).__name__}")
    if len(message) > MESSAGE_LIMIT:
        raise ValueError(f"set_progress: message is {len(message)} characters long; at most "
                         f"{MESSAGE_LIMIT} are kept")
    return message


def _size(key: str, encoded: Any) -> int:
    """Bytes ``key: value`` adds to the meta's JSON (close enough for the limit)."""
    return len(json.dumps(key)) + len(json.dumps(encoded, separators=(",", ":"))) + 2


class JobMeta(dict):  # type: ignore[type-arg]
    """The job's ``meta``: a dict whose every change is checked and published.

    Each value is encoded (tagged JSON) when it is assigned: a value the codec
    refuses raises :class:`~fusionworker.codec.UnsupportedType` (naming
    ``meta['key']``), a meta over :data:`META_LIMIT` raises
    :class:`~fusionworker.exceptions.MetaTooLarge`; either way the meta is
    unchanged.
    """

    def __init__(self, initial: Mapping[str, Any], lock: threading.Lock,
                 changed: Callable[[], None]) -> None:
        super().__init__()
        self._lock = lock
        self._changed = changed
        self._encoded: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self._total = 2
        for key, value in initial.items():   # from an earlier attempt: stored, so valid
            self._put(key, *self._check(key, value, check_size=False))

    # -- checks and bookkeeping (callers hold no lock; _put/_drop run under it) --------

    def _check(self, key: Any, value: Any, check_size: bool = True) -> tuple[Any, Any, int]:
        if not isinstance(key, str):
            raise codec.UnsupportedType(
                f"meta keys must be strings, got {type(key).__name__} {key!r}")
        encoded = codec.encode(value, f"meta[{key!r}]")
        size = _size(key, encoded)
        if check_size:
            total = self._total - self._sizes.get(key, 0) + size
            if total > META_LIMIT:
                raise MetaTooLarge(
                    f"meta[{key!r}] would make the job's meta {total} bytes of JSON; the limit "
                    f"is {META_LIMIT} bytes (keep large data elsewhere and store a reference)")
        return value, encoded, size

    def _put(self, key: str, value: Any, encoded: Any, size: int) -> None:
        self._total += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        self._encoded[key] = encoded
        dict.__setitem__(self, key, value)

    def _drop(self, key: str) -> None:
        self._total -= self._sizes.pop(key, 0)
        self._encoded.pop(key, None)

    def snapshot(self) -> dict[str, Any]:
        """The encoded meta (call under the lock)."""
        return dict(self._encoded)

    # -- the dict interface --------------------------------------------------------

    def __setitem__(self, key: str, value: Any) -> None:
        checked = self._check(key, value)
        with self._lock:
            self._put(key, *checked)
        self._changed()

    def __delitem__(self, key: str) -> None:
        with self._lock:
            dict.__delitem__(self, key)
            self._drop(key)
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        items = dict(*args, **kwargs)
        if not items:
            return
        checked = []
        total = self._total
        sizes = dict(self._sizes)
        for key, value in items.items():
            value, encoded, size = self._check(key, value, check_size=False)
            total += size - sizes.get(key, 0)
            sizes[key] = size
            checked.append((key, value, encoded, size))
        if total > META_LIMIT:
            raise MetaTooLarge(f"meta.update(...) would make the job's meta {total} bytes of "
                               f"JSON; the limit is {META_LIMIT} bytes")
        with self._lock:
            for key, value, encoded, size in checked:
                self._put(key, value, encoded, size)
        self._changed()

    def __ior__(self, other: Any) -> JobMeta:   # type: ignore[misc]
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = self[key]
        del self[key]
        return value

    def popitem(self) -> tuple[str, Any]:
        if not self:
            raise KeyError("popitem(): meta is empty")
        key = next(reversed(list(self.keys())))
        return key, self.pop(key)

    def clear(self) -> None:
        with self._lock:
            dict.clear(self)
            self._encoded.clear()
            self._sizes.clear()
            self._total = 2
        self._changed()

    def __reduce__(self) -> Any:     # a copy (pickle, copy.copy) is a plain dict
        return (dict, (dict(self),))


class JobContext(RQNames):
    """The running job, seen from inside: who it is, and how it reports progress.

    ``id``, ``queue``, ``func``, ``attempt`` (1 on the first run), ``max_retries``,
    ``timeout``, ``args``, ``kwargs``; ``progress`` / ``progress_message`` (what this
    attempt set, None before), ``meta`` (starts with what the job's record held when it
    was claimed, e.g. from an earlier attempt). RQ's names too: ``get_id()``,
    ``origin`` (the queue), ``func_name``.
    """

    def __init__(self, job: Any, sender: Any) -> None:
        self.id: str = job.id
        self.queue: str = job.queue
        self.func: str = job.func
        self.attempt: int = job.attempts
        self.max_retries: int = job.max_retries
        self.timeout: float = job.timeout
        self.args: list[Any] = job.args
        self.kwargs: dict[str, Any] = job.kwargs
        self.progress: float | None = None
        self.progress_message: str | None = None
        self._lock = threading.Lock()
        self._sender = sender
        self._dirty_progress = self._dirty_meta = False
        self._set_progress = self._set_meta = False
        self._progress_at: float | None = None
        self.meta = JobMeta(getattr(job, "meta", None) or {}, self._lock, self._meta_changed)

    def __repr__(self) -> str:
        return (f"<JobContext {self.id} {self.func} on {self.queue}, attempt {self.attempt}, "
                f"progress {self.progress!r}>")

    def set_progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the job is: ``fraction`` in [0, 1], an optional short message.

        Cheap enough for a tight loop: the value is sent at most every
        SEND_INTERVAL and written to Redis at most every
        FUSIONWORKER_PROGRESS_INTERVAL; the last one always lands (with the outcome).
        """
        value = check_fraction(fraction)
        text = check_message(message)
        with self._lock:
            self.progress, self.progress_message = value, text
            self._dirty_progress = self._set_progress = True
        self._sender.changed(self)

    def save_meta(self) -> None:
        """Encode every meta value again and publish them (after a value was changed in
        place, e.g. ``meta["ids"].append(x)``; RQ's name). Checked like an assignment."""
        self.meta.update(dict(self.meta))

    def _meta_changed(self) -> None:
        with self._lock:
            self._dirty_meta = self._set_meta = True
        self._sender.changed(self)

    # -- for the senders -----------------------------------------------------------

    def take_frame(self) -> bytes | None:
        """The changes since the last frame, as one frame; None if nothing changed."""
        if not self._lock.acquire(timeout=_LOCK_WAIT):
            return None      # see final_state
        try:
            body: dict[str, Any] = {}
            if self._dirty_progress:
                self._progress_at = time.time()
                body.update(p=self.progress, m=self.progress_message, t=self._progress_at)
            if self._dirty_meta:
                body["meta"] = self.meta.snapshot()
            self._dirty_progress = self._dirty_meta = False
        finally:
            self._lock.release()
        if not body:
            return None
        return b"\x1e" + json.dumps(body, separators=(",", ":")).encode() + b"\n"

    def final_state(self) -> dict[str, Any] | None:
        """Everything this attempt set (for the report), or None if it set nothing.

        The lock is only ever held for a few assignments; should a job's thread hold
        it for good (cut down inside it), the report goes without the state rather
        than never.
        """
        if not self._lock.acquire(timeout=_LOCK_WAIT):
            return None
        try:
            if not (self._set_progress or self._set_meta):
                return None
            state: dict[str, Any] = {}
            if self._set_progress:
                if self._dirty_progress or self._progress_at is None:
                    self._progress_at = time.time()
                state.update(p=self.progress, m=self.progress_message, t=self._progress_at)
            if self._set_meta:
                state["meta"] = self.meta.snapshot()
            return state
        finally:
            self._lock.release()


class PipeSender:
    """In the horse: frames to the report pipe from a thread of their own, at most one
    per SEND_INTERVAL (the job's thread never blocks on the pipe, and SIGALRM, which
    Python delivers on the main thread only, never cuts a frame in half)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._io = threading.Lock()           # held while a frame is written
        self._start = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last = -SEND_INTERVAL

    def changed(self, ctx: JobContext) -> None:
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, args=(ctx,), daemon=True,
                                                    name="fusionworker-progress")
                    self._wake.set()
                    self._thread.start()
                    return
        if not self._wake.is_set():
            self._wake.set()

    def _run(self, ctx: JobContext) -> None:  # pragma: no cover - a thread of the horse
        while True:
            self._wake.wait()
            delay = self._last + SEND_INTERVAL - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self._io:
                if self._closed:
                    return
                self._wake.clear()           # before the snapshot: a later change wakes us
                frame = ctx.take_frame()
                if frame is not None:
                    try:
                        write_all(self.fd, frame)
                    except OSError:          # the reader is gone: so is our parent
                        self._closed = True
                        return
                    self._last = time.monotonic()

    def close(self) -> None:
        """No frame after this returns (one being written is finished first); the
        thread ends (a warm horse runs more jobs: it must not keep one per job)."""
        with self._io:
            self._closed = True
        self._wake.set()


class DirectSender:
    """In ``fusionworker.testing``'s in-process worker: frames go straight to the
    worker's relay, from the job's own thread, at most one per SEND_INTERVAL."""

    def __init__(self, deliver: Callable[[str], None]) -> None:
        self.deliver = deliver
        self._next = 0.0

    def changed(self, ctx: JobContext) -> None:
        now = time.monotonic()
        if now < self._next:
            return                 # kept: the final state goes with the outcome
        self._next = now + SEND_INTERVAL
        frame = ctx.take_frame()
        if frame is not None:
            self.deliver(frame[1:-1].decode())

    def close(self) -> None:
        pass


# -- the job running in this process ----------------------------------------------------

_job: Any = None                                  # set by begin(); None: no job runs here
_make_sender: Callable[[], Any] | None = None
_context: JobContext | None = None
_sender: Any = None                               # the context's sender, once made
_context_lock = threading.Lock()


def begin(job: Any, *, fd: int = -1, deliver: Callable[[str], None] | None = None) -> None:
    """The job starts in this process: frames go to pipe ``fd`` or to ``deliver``.

    Costs two assignments: the context and its sender are made on the first
    :func:`current_job` call.
    """
    global _job, _make_sender, _context
    _job, _context = job, None
    _make_sender = ((lambda: DirectSender(deliver)) if deliver is not None
                    else (lambda: PipeSender(fd)))


def end() -> dict[str, Any] | None:
    """The job ended: stop sending; its final state (for the report), or None."""
    global _job, _make_sender, _context, _sender
    ctx, sender = _context, _sender
    _job, _make_sender, _context, _sender = None, None, None, None
    if ctx is None:
        return None
    sender.close()
    return ctx.final_state()


#: an async horse's task (horse/asyncloop.py): [job, deliver, its context once made]
_task: ContextVar[list[Any] | None] = ContextVar("fusionworker_job", default=None)


def begin_task(job: Any, deliver: Callable[[str], None]) -> list[Any]:
    """In an async horse, inside the job's task: :func:`current_job` of this task (and
    of what it awaits) is ``job``'s, whatever the other tasks run. Frames go to
    ``deliver`` (at most one per SEND_INTERVAL, the rest with the report)."""
    holder: list[Any] = [job, deliver, None]
    _task.set(holder)
    return holder


def task_holder() -> list[Any] | None:
    """The holder :func:`begin_task` gave the running task's context (a task a job's
    code creates inherits its job's), or None."""
    return _task.get()


def end_task(holder: list[Any]) -> dict[str, Any] | None:
    """The task's job ended: its final state (for its report), or None."""
    ctx = holder[2]
    holder[0] = holder[2] = None
    return ctx.final_state() if ctx is not None else None


def current_job() -> JobContext | None:
    """The running job's :class:`JobContext`, or None outside a job."""
    holder = _task.get()
    if holder is not None:        # an async horse's task
        if holder[2] is None and holder[0] is not None:
            holder[2] = JobContext(holder[0], DirectSender(holder[1]))
        ctx: JobContext | None = holder[2]
        return ctx
    ctx = _context
    if ctx is not None or _job is None:
        return ctx
    return _make_context()


#: RQ's name (``from rq import get_current_job``): the same function
get_current_job = current_job


def _make_context() -> JobContext | None:
    global _context, _sender
    with _context_lock:
        if _context is None and _job is not None and _make_sender is not None:
            _sender = _make_sender()
            _context = JobContext(_job, _sender)
        return _context


def _forget_in_child() -> None:
    """A process the job forks is not the job (its frames would have no sender thread)."""
    global _job, _make_sender, _context, _sender, _context_lock
    _job, _make_sender, _context, _sender = None, None, None, None
    _context_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


__all__ = ["JobContext", "JobMeta", "current_job"]
