"""What the job page adds to a job record: its dependencies and their statuses,
the jobs waiting on it, its batch, and a traceback that starts at the job's own
frames. Every read is one pipeline of bounded size (``MAX_REFS`` refs)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..core import job_reads
from ..core.batch import batch_status
from ..core.connection import texts
from ..core.job import JobStatus
from ..core.keys import Keys
from ..core.redis_client import stored_number

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: dependencies, and jobs of a batch, shown on a page (a fan-in of thousands is cut)
MAX_REFS = 200
#: jobs waiting on a job shown on its page (the rest counted)
MAX_DEPENDENTS = 20

#: a frame line of a traceback: ``  File "path", line N, in name``
_FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')
#: files of the worker itself (the horse that calls the job, the middleware around it)
_OWN = re.compile(r"[/\\]fusionworker[/\\](runtime|core|middleware|events|worker\.py)")
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


def statuses(r: RedisClient, prefix: str, refs: list[str]) -> list[dict[str, Any]]:
    """Queue, id and status (None: gone) of each job ``"queue:id"``, one pipeline."""
    refs = refs[:MAX_REFS]
    if not refs:
        return []
    found = job_reads.job_fields(r, prefix, [split_ref(ref) for ref in refs], ("status",))
    return [{"queue": split_ref(ref)[0], "id": split_ref(ref)[1], "status": job["status"]}
            for ref, job in zip(refs, found, strict=True)]


def dependencies(r: RedisClient, prefix: str, job_id: str, queue: str,
                 refs: list[str] | None) -> list[dict[str, Any]]:
    """The jobs ``job_id`` depends on: queue, id, status (None: gone), still waited on."""
    found = statuses(r, prefix, list(refs or []))
    if not found:
        return []
    still = set(texts(list(r.smembers(Keys(prefix).queue(queue).deps(job_id)))))
    for dep in found:
        dep["waited_on"] = f"{dep['queue']}:{dep['id']}" in still
    return found


def dependents(r: RedisClient, prefix: str, job_id: str, queue: str
               ) -> tuple[list[dict[str, Any]], int]:
    """Up to ``MAX_DEPENDENTS`` jobs still waiting on ``job_id``, and how many there are
    (the set is emptied once the job ended)."""
    key = Keys(prefix).queue(queue).dependents(job_id)
    pipe = r.pipeline(transaction=False)
    pipe.scard(key)
    pipe.srandmember(key, MAX_DEPENDENTS)
    count, some = pipe.execute()
    return statuses(r, prefix, sorted(texts(list(some or [])))), int(count)


def batch_of(r: RedisClient, prefix: str, ref: str | None) -> dict[str, Any] | None:
    """The status of the batch ``"queue:batch_id"`` (``exists: false`` once fired and gone)."""
    if not ref or ":" not in ref:
        return None
    queue, batch_id = split_ref(ref)
    doc = batch_status(r, Keys(prefix).queue(queue).base, batch_id)
    doc["queue"] = queue
    return doc


#: stream entries read (newest first) for a worker's recent outcomes
OUTCOME_SCAN = 500
OUTCOME_EVENTS = ("completed", "failed", "retry", "timeout", "abandoned", "requeued")


def worker_detail(r: RedisClient, prefix: str, name: str) -> dict[str, Any] | None:
    """A worker's heartbeat hash described (as ``info``), its slots with the job each
    runs, its memory (``rss_mib`` when its heartbeat reports it) and its last outcomes
    (from the newest ``OUTCOME_SCAN`` entries of the event stream)."""
    from ..core import admin
    from ..core.connection import text_hash
    from ..events import FIELDS

    keys = Keys(prefix)
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(keys.worker(name))
    pipe.pttl(keys.worker(name))
    found, pttl = pipe.execute()
    data = admin.with_beat_age(text_hash(found), pttl)
    if not data:
        return None
    now = admin.server_time(r)
    doc = admin.describe_worker(data, now)
    doc["rss_mib"] = stored_number(data.get("rss_mib"))
    processes = stored_number(data.get("processes"))
    doc["processes"] = int(processes) if processes is not None and processes < 1e9 else None
    doc["extra"] = {k: v for k, v in sorted(data.items()) if k.startswith(("events_",
                                                                         "callbacks_"))}
    doc["slots"] = _slots(r, prefix, doc["current_jobs"][:MAX_REFS], doc["queues"] or [], now)
    doc["outcomes"] = _outcomes(r, keys.events, name, FIELDS)
    return doc


def _slots(r: RedisClient, prefix: str, jobs: list[str], queues: list[str],
           now: float) -> list[dict[str, Any]]:
    """The job each slot runs: its queue (the first of ``queues`` holding it), function,
    status, age and progress (None each for a job no queue holds)."""
    answers = iter(job_reads.job_fields(
        r, prefix, [(queue, job_id) for job_id in jobs for queue in queues],
        ("queue", "func", "status", "started_at", "progress")))
    slots = []
    for job_id in jobs:
        found = [a for a in (next(answers) for _ in queues) if a["queue"]]
        slot = found[0] if found else dict.fromkeys(("queue", "func", "status", "started_at"))
        started = slot["started_at"]
        slots.append({"id": job_id, "queue": slot["queue"], "func": slot["func"],
                      "status": slot["status"],
                      "age": max(0.0, now - started) if started is not None else None,
                      "progress": slot.get("progress")})
    return slots


def _outcomes(r: RedisClient, stream: str, name: str, fields_shown: Any,
              want: int = 25) -> list[dict[str, Any]]:
    """The worker's last ``want`` outcomes among the newest ``OUTCOME_SCAN`` entries."""
    from ..core.connection import text_hash

    outcomes: list[dict[str, Any]] = []
    top, read = "+", 0
    while read < OUTCOME_SCAN and len(outcomes) < want:
        page = r.xrevrange(stream, max=top, count=OUTCOME_SCAN // 2) or []
        for entry_id, raw in page:
            fields = text_hash(raw or {})
            if fields.get("worker") == name and fields.get("event") in OUTCOME_EVENTS:
                outcomes.append({"id": str(texts([entry_id])[0]),
                                 **{f: fields.get(f) for f in fields_shown}})
                if len(outcomes) == want:
                    break
        read += len(page)
        if len(page) < OUTCOME_SCAN // 2:
            break
        top = f"({texts([page[-1][0]])[0]}"
    return outcomes


#: stream entries read per window of a job's timeline
TIMELINE_SCAN = 500
#: progress events the job page's timeline shows (the latest); the others are one row
PROGRESS_ROWS = 5


def stream_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id in the stream's own order: ``ms-seq`` as two numbers (as text,
    ``...-10`` sorts before ``...-9``: events of one millisecond came out shuffled)."""
    ms, _, seq = str(entry_id).partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0


#: an event's fields the timeline computes with: numbers, whatever the history holds
_NUMBERS = ("duration", "progress", "wait_time", "attempt")


def event_row(entry_id: str, event: dict[str, Any]) -> dict[str, Any]:
    """One event of the timeline: its documented fields, the ones it computes with
    read as numbers (None when the history holds none there: ``"x"``, ``inf``)."""
    from ..events import FIELDS

    row: dict[str, Any] = {"id": entry_id, **{f: event.get(f) for f in FIELDS}}
    for name in _NUMBERS:
        if row.get(name) is not None:
            row[name] = stored_number(row[name])
    attempt = row.get("attempt")
    if attempt is not None:
        row["attempt"] = int(attempt) if abs(attempt) < 1e18 else None
    return row


def bounded_progress(events: list[dict[str, Any]],
                     keep: int = PROGRESS_ROWS) -> list[dict[str, Any]]:
    """The timeline's rows: every event but ``progress``, of which the latest ``keep``
    are shown and the earlier ones stand as one row (``elided``: how many), where the
    first of them was: a job that reports every second does not grow its page."""
    progress = [n for n, e in enumerate(events) if e.get("event") == "progress"]
    if len(progress) <= keep:
        return events
    hidden = set(progress[:-keep])
    rows: list[dict[str, Any]] = []
    for n, event in enumerate(events):
        if n == progress[0]:
            rows.append({**event, "elided": len(hidden)})
        elif n not in hidden:
            rows.append(event)
    return rows


def timeline(r: RedisClient, prefix: str, job: Any) -> list[tuple[str, dict[str, Any]]]:
    """The job's events: its own history (every event, written with it: one LRANGE).
    A job without one (its events written by an older version) is looked up in the
    stream, in windows of ``TIMELINE_SCAN`` entries from its enqueue, its last start
    and its end (stream ids are delivery times: producers and workers deliver in
    batches, so each window starts a second early), merged."""
    from ..core.job import DONE_STATUSES
    from ..events import job_history, job_timeline

    kept = job_history(r, prefix, job.queue, job.id) if job.queue else []
    if kept:
        return kept

    end = job.ended_at if job.status in DONE_STATUSES else None
    starts = [job.enqueued_at or 0.0]
    for moment in (job.started_at, end):
        if moment and moment > starts[-1] + 1.0:
            starts.append(moment - 1.0)
    found: dict[str, dict[str, Any]] = {}
    for start in starts:
        for entry_id, event in job_timeline(r, prefix, job.id, start, end,
                                            scan_limit=TIMELINE_SCAN):
            found[entry_id] = event
    return sorted(found.items())


def listed_from(qkeys: Any, status: str) -> tuple[str, str | None]:
    """The registry ``GET /api/v1/jobs`` lists a status from, and the status its records
    must have (None: all): stopped jobs are kept in the failed registry, as RQ keeps
    them, and found by a scan of it."""
    if status == JobStatus.STOPPED:
        return qkeys.registry(JobStatus.FAILED), JobStatus.STOPPED
    return qkeys.registry(status), None
