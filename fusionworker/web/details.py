"""What the job page adds to a job record: its dependencies and their statuses,
the jobs waiting on it, its batch, and a traceback that starts at the job's own
frames. Every read is one pipeline of bounded size (``MAX_REFS`` refs)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..core.batch import batch_status
from ..core.connection import texts
from ..core.keys import Keys

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: dependencies and dependents shown on a job page (a fan-in of thousands is cut)
MAX_REFS = 200

#: a frame line of a traceback: ``  File "path", line N, in name``
_FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')
#: files of the worker itself (the horse that calls the job, the middleware around it)
_OWN = re.compile(r"[/\\]fusionworker[/\\](runtime|core|middleware|events|ops|worker\.py)")
_HEAD = "Traceback (most recent call last):"


def split_ref(ref: str) -> tuple[str, str]:
    queue, _, job_id = ref.partition(":")
    return queue, job_id


def trim_traceback(text: str | None) -> tuple[str | None, int]:
    """``text`` without the worker's own leading frames of each traceback block
    (``Traceback (most recent call last):`` up to the first frame of another file),
    and how many frames were left out. A block made only of the worker's frames is
    kept whole: then the error is the worker's and those frames are the story."""
    if not text:
        return text, 0
    lines = text.splitlines()
    out: list[str] = []
    dropped = 0
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i] != _HEAD:
            i += 1
            continue
        # collect the frames of this block: a frame line and its indented lines
        j = i + 1
        frames: list[list[str]] = []
        while j < len(lines) and lines[j].startswith("  "):
            if _FRAME.match(lines[j]) or not frames:
                frames.append([])
            frames[-1].append(lines[j])
            j += 1
        first_own = next((n for n, f in enumerate(frames)
                          if not (_FRAME.match(f[0]) and _OWN.search(f[0]))), None)
        if first_own is not None and first_own > 0:
            dropped += first_own
            frames = frames[first_own:]
        for frame in frames:
            out.extend(frame)
        i = j
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), dropped


def dependencies(r: RedisClient, prefix: str, job_id: str, queue: str,
                 refs: list[str] | None) -> list[dict[str, Any]]:
    """The jobs ``job_id`` depends on: queue, id, status (None: gone), still waited on."""
    refs = list(refs or [])[:MAX_REFS]
    if not refs:
        return []
    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    for ref in refs:
        dep_queue, dep_id = split_ref(ref)
        pipe.hget(keys.queue(dep_queue).job(dep_id), "status")
    pipe.smembers(keys.queue(queue).base + f"deps:{job_id}")
    *statuses, waiting = pipe.execute()
    still = set(texts(list(waiting)))
    return [{"queue": split_ref(ref)[0], "id": split_ref(ref)[1],
             "status": status.decode() if isinstance(status, bytes) else status,
             "waited_on": ref in still}
            for ref, status in zip(refs, statuses, strict=True)]


def dependents(r: RedisClient, prefix: str, job_id: str, queue: str) -> list[dict[str, Any]]:
    """Jobs still waiting on ``job_id`` (the set is emptied once the job ended)."""
    keys = Keys(prefix)
    refs = sorted(texts(list(r.srandmember(keys.queue(queue).base + f"dependents:{job_id}",
                                            MAX_REFS) or [])))
    if not refs:
        return []
    pipe = r.pipeline(transaction=False)
    for ref in refs:
        dep_queue, dep_id = split_ref(ref)
        pipe.hget(keys.queue(dep_queue).job(dep_id), "status")
    return [{"queue": split_ref(ref)[0], "id": split_ref(ref)[1],
             "status": status.decode() if isinstance(status, bytes) else status}
            for ref, status in zip(refs, pipe.execute(), strict=True)]


def batch_of(r: RedisClient, prefix: str, ref: str | None) -> dict[str, Any] | None:
    """The status of the batch ``"queue:batch_id"`` (``exists: false`` once fired and gone)."""
    if not ref or ":" not in ref:
        return None
    queue, batch_id = split_ref(ref)
    doc = batch_status(r, Keys(prefix).queue(queue).base, batch_id)
    doc["queue"] = queue
    return doc
