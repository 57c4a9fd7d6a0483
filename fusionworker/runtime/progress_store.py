"""The worker parent's side of job progress: frames in, coalesced fenced writes out.

A horse sends progress/meta frames through its pipe (the whole sequence and
its crash points: progress.py). :class:`ProgressRelay` keeps, per running
attempt, the changes not written yet and writes them with ``progress.lua``:

* rate limit: at most one write per job per ``FUSIONWORKER_PROGRESS_INTERVAL``
  (default 1 s); changes in between are merged, the last value wins. A frame
  that arrives when the job's interval is over is written at once; pending
  changes are written by :meth:`ProgressRelay.flush_due`, which the loop runs
  on its tick (single slot: at least once a second; N slots: at the due time);
* fencing: the attempt's token, as for every outcome write. A refused write
  (the attempt was taken back) is logged once and that attempt writes no more;
* the last value: :meth:`ProgressRelay.final_fields` gives the fields the
  outcome script writes with the outcome (the horse's final state from its
  report, else what is pending), so the rate limit never loses the last value;
* events: each write that carried a progress value calls the middleware hook
  ``on_progress`` (the event log emits a ``progress`` event), so events are
  rate-limited alike.

No job that reports nothing ever reaches this code beyond one dict lookup
when its outcome is recorded.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from ..core.job import safe_text
from ..core.keys import Keys
from ..core.scripts import replies
from .progress import FRAME_LIMIT, MESSAGE_LIMIT, META_LIMIT

if TYPE_CHECKING:  # pragma: no cover
    from ..core.job import Job
    from ..events.middleware import ScriptEvents

log = logging.getLogger(__name__)

#: What a failed write leaves pending for the next try (an outage, a refusal such as OOM).
_WRITE_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.ResponseError)


@dataclass
class _Track:
    """One running attempt that reported something."""

    job: Job[Any]
    pending: dict[str, Any] = field(default_factory=dict)
    next_write: float = 0.0         # monotonic time of the next allowed write
    stale: bool = False             # the attempt was taken back: write nothing more


def parse_frame(text: str) -> dict[str, Any] | None:
    """The changes a frame carries, checked again here (the job runs arbitrary code and
    may write to its pipe itself); None for a frame that is not one."""
    if len(text) > FRAME_LIMIT:
        return None
    try:
        frame = json.loads(text)
    except (ValueError, RecursionError):   # nested past the parser's depth
        return None
    if not isinstance(frame, dict):
        return None
    out: dict[str, Any] = {}
    p = frame.get("p")
    if (isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p)
            and 0.0 <= p <= 1.0):
        m, t = frame.get("m"), frame.get("t")
        out["p"] = float(p)
        out["m"] = safe_text(m[:MESSAGE_LIMIT]) if isinstance(m, str) else None
        out["t"] = float(t) if isinstance(t, (int, float)) and math.isfinite(t) else None
    meta = frame.get("meta")
    if isinstance(meta, dict):
        text_meta = json.dumps(meta, separators=(",", ":"))
        if len(text_meta) <= META_LIMIT + 1024:
            out["meta"] = text_meta
    return out


def fields_of(state: dict[str, Any]) -> list[str]:
    """Job-hash fields (name, value, ...) for progress.lua / finish.lua of ``state``."""
    out: list[str] = []
    if "p" in state:
        out += ["progress", repr(state["p"]), "progress_message", state.get("m") or ""]
        if state.get("t") is not None:
            out += ["progress_at", repr(state["t"])]
    if "meta" in state:
        out += ["meta", state["meta"]]
    return out


class ProgressRelay:
    """Per running attempt: pending changes, rate limit, fenced writes (module docstring)."""

    def __init__(self, scripts: Any, keys: Keys, *, name: str, interval: float,
                 on_progress: Callable[[Job[Any], float, str | None], None]) -> None:
        self.scripts, self.keys, self.name = scripts, keys, name
        #: seconds between two writes of one job (FUSIONWORKER_PROGRESS_INTERVAL)
        self.interval = float(interval)
        #: each written progress value (the middleware hook ``on_progress``)
        self.on_progress = on_progress
        #: progress.lua writes each ``progress`` event (events/middleware.py), or None
        self.events: ScriptEvents | None = None
        self._tracks: dict[tuple[str, str], _Track] = {}

    def received(self, job: Job[Any], text: str) -> None:
        """A frame of ``job``'s horse arrived: merge it; write if the job's interval is over."""
        frame = parse_frame(text)
        if frame is None:
            log.warning("Worker %s: dropped a malformed progress frame of job %s",
                        self.name, job.id)
            return
        key = (job.id, job.token or "")
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(job)
        if track.stale or not frame:
            return
        track.pending.update(frame)
        if time.monotonic() >= track.next_write:
            self._write(track)

    def flush_due(self) -> None:
        """Write the pending changes of every job whose interval is over."""
        if not self._tracks:
            return
        now = time.monotonic()
        for track in list(self._tracks.values()):
            if track.pending and not track.stale and now >= track.next_write:
                self._write(track)

    def next_due(self) -> float | None:
        """When :meth:`flush_due` has something to write (monotonic), or None."""
        due = [t.next_write for t in self._tracks.values() if t.pending and not t.stale]
        return min(due) if due else None

    def final_fields(self, job: Job[Any], final: dict[str, Any] | None) -> list[str]:
        """The fields to write with ``job``'s outcome: its horse's final state (report),
        else what is still pending. Forgets the attempt."""
        track = self._tracks.pop((job.id, job.token or ""), None) if self._tracks else None
        state: dict[str, Any] = {}
        if track is not None and not track.stale:
            state.update(track.pending)
        if final:
            state.update(parse_frame(json.dumps(final)) or {})
        return fields_of(state) if state else []

    def _write(self, track: _Track) -> None:
        job, changes = track.job, track.pending
        track.pending = {}
        track.next_write = time.monotonic() + self.interval
        try:
            keys, block = [self.keys.queue(job.queue).base], [""]
            if self.events is not None and "p" in changes:   # progress.lua writes the event
                keys.append(self.events.stream)
                block = self.events.block("progress", job, progress=changes["p"],
                                          progress_message=changes.get("m"))
            written, lost = replies.progress(self.scripts.progress(
                keys=keys, args=[job.id, job.token or "", *block, *fields_of(changes)]))
        except _WRITE_ERRORS as exc:
            track.pending = {**changes, **track.pending}   # next due time, or the outcome
            log.warning("Worker %s: could not write the progress of job %s (%s); trying "
                        "again later", self.name, job.id, exc)
            return
        if not written:
            track.stale = True
            log.warning("Worker %s: progress of job %s refused: the attempt was taken back "
                        "meanwhile (attempt token no longer current)", self.name, job.id)
            return
        if "p" in changes:
            if lost and self.events is not None:     # counted dropped by the event log's hook
                self.events.lost_progress.add(job.id)
            self.on_progress(job, changes["p"], changes.get("m"))
