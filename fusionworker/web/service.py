"""What the dashboard reads and does, on top of ``Queue``, ``admin`` and ``cron``.

Every read is bounded: registries are paged with ZRANGE offsets (``LIMIT`` for a
priority range of the pending set), job records are read with one pipelined
HGETALL per page, the event timeline reads the job's own history (capped; a
window of the stream for a job without one). Nothing scans the keyspace. Errors users can cause raise :class:`ApiError` (a 4xx status
and a message); every action is logged and emitted as an ``admin`` event naming
who did it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..core import admin, cron, job_reads
from ..core.config import Settings
from ..core.connection import mask_url, texts
from ..core.job import DONE_STATUSES, Job, JobStatus, check_priority
from ..core.keys import InvalidQueueName, Keys, check_queue_name
from ..core.queue import BANDS, Queue, _band_range, find_queue_of, known_queues
from ..core.queue_read import stats_many
from ..core.scripts import replies
from ..exceptions import FunctionNotAllowed, InvalidFunction, InvalidOperation, NoSuchJob
from ..ops.info import collect_info
from . import details

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

log = logging.getLogger("fusionworker.web")

#: the dashboard's tabs, in its order: every status a job can have
STATUSES = (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED, JobStatus.HELD,
            JobStatus.STARTED, JobStatus.FAILED, JobStatus.FINISHED, JobStatus.CANCELED)
#: what GET /api/v1/jobs lists: the registries, and the stopped jobs of `failed`
LISTED = (*STATUSES, JobStatus.STOPPED)
#: registries listed oldest (or soonest) first; the others newest (or best) first
OLDEST_FIRST = (JobStatus.SCHEDULED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.HELD)
MAX_PER_PAGE = 500
#: queues the overview shows per page (and polls)
QUEUES_PER_PAGE = 50
#: ``GET /api/v1/queues`` without ``page`` or ``per_page``: every queue while there are
#: at most this many (the answer of before), else the first page of this many by name
#: with ``next_page`` (the full list of 10,000 queues is megabytes and seconds)
QUEUES_UNPAGED = MAX_PER_PAGE
#: the longest ``match`` (a part of a queue name) the queue listings take
MAX_MATCH = 200
#: ids read per request when a filter needs the job records (function, or priority
#: outside the pending set): the page then continues from ``next_start``
FILTER_SCAN = 2000


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


#: the largest integer a page, offset or count of the API takes (no Redis range is longer)
MAX_INT = 10**12


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a one-line error."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse_int(value: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an integer within ``low``..``high`` (``high`` at most :data:`MAX_INT`);
    else 400 naming ``name``."""
    text = str(value).strip() if isinstance(value, (str, int)) else ""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(text)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name} must be an integer, got {shown(value)}") from None
    high = MAX_INT if high is None else high
    if (low is not None and number < low) or number > high or number < -MAX_INT:
        bounds = f"between {low if low is not None else -MAX_INT} and {high}"
        raise ApiError(400, f"{name} must be {bounds}, got {number}")
    return number


def fingerprint(parts: Any) -> str:
    """A short digest of what a live page shows: the page asks again with it and
    gets nothing new while it holds."""
    data = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def job_summary(job: Job[Any]) -> dict[str, Any]:
    return {"id": job.id, "queue": job.queue, "func": job.func, "status": job.status,
            "priority": job.priority, "enqueued_at": job.enqueued_at,
            "scheduled_for": job.scheduled_for, "started_at": job.started_at,
            "ended_at": job.ended_at, "attempts": job.attempts, "error": job.error,
            "worker": job.worker_name, "failure_reason": job.failure_reason}


def _priority_range(priority: str | None) -> tuple[int, int] | None:
    """A ``priority`` filter (a band's name or one value) as its lowest and highest
    priority; None without one."""
    if priority in (None, ""):
        return None
    bands = {b[0]: (b[1], b[2]) for b in BANDS}
    if priority in bands:
        return bands[str(priority)]
    value = parse_int(priority, "priority", -1023, 1023)
    return value, value


def _matches(job: Job[Any], function: str | None, band: tuple[int, int] | None) -> bool:
    """Whether ``job`` passes the function (a part of its name) and priority filters."""
    if function and function not in job.func:
        return False
    return band is None or band[0] <= job.priority <= band[1]


class _InfoSource:
    """What ``collect_info`` reads of the CLI's App."""

    def __init__(self, connection: RedisClient, settings: Settings) -> None:
        self.connection = connection
        self.settings = settings
        self.masked_url = mask_url(settings.redis_url)


def _json_field(value: Any, name: str, kind: type) -> Any:
    if value in (None, ""):
        return kind()
    try:
        found = json.loads(str(value))
    except ValueError:
        raise ApiError(400, f"{name} must be JSON ({'a list' if kind is list else 'an object'})"
                       ) from None
    if not isinstance(found, kind):
        raise ApiError(400, f"{name} must be a JSON {'list' if kind is list else 'object'}")
    return found


class Dashboard:
    def __init__(self, connection: RedisClient, settings: Settings) -> None:
        self.r = connection
        self.settings = settings
        self.prefix = settings.prefix

    # -- reads -------------------------------------------------------------------

    def queue_names(self) -> list[str]:
        return known_queues(self.r, self.prefix)

    def queue(self, name: str, must_exist: bool = True) -> Queue:
        try:
            check_queue_name(name)
        except InvalidQueueName as exc:
            raise ApiError(400, str(exc)) from None
        if must_exist and not self.r.sismember(Keys(self.prefix).queues, name):
            raise ApiError(404, f"no queue {name!r}")
        return Queue(name, self.r, settings=self.settings)

    def queues(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """The stats of every queue, or of ``names`` (a few pipelines whatever their
        number)."""
        return stats_many(self.r, self.settings,
                          self.queue_names() if names is None else names,
                          admin.workers(self.r, self.prefix))

    def queue_page(self, page: Any = 1, per_page: Any = QUEUES_PER_PAGE,
                   names: list[str] | None = None, match: Any = None) -> dict[str, Any]:
        """One page of the queues by name (of ``names`` when read already; of those
        whose name holds ``match``, any case, when given), with their stats: what the
        overview shows (and polls) at any number of queues. ``next_page``: the page
        after it, None on the last."""
        page_n, size, names, shown = self.names_page(page, per_page, names, match)
        heartbeats = admin.workers(self.r, self.prefix)
        pages = max(1, -(-len(names) // size))
        return {"queues": stats_many(self.r, self.settings, shown, heartbeats),
                "total": len(names),
                "page": page_n, "per_page": size, "pages": pages,
                "first": (page_n - 1) * size + 1 if shown else 0,
                "last": (page_n - 1) * size + len(shown),
                "next_page": page_n + 1 if page_n < pages else None,
                "match": match or None}

    def workers(self) -> list[dict[str, Any]]:
        now = admin.server_time(self.r)
        return [admin.describe_worker(w, now) for w in admin.workers(self.r, self.prefix)]

    def info(self, page: Any = None, per_page: Any = QUEUES_PER_PAGE) -> dict[str, Any]:
        """``info --json``; with ``page``, the queues of that page only."""
        if page is None:
            return collect_info(_InfoSource(self.r, self.settings))
        return collect_info(_InfoSource(self.r, self.settings), page=parse_int(page, "page", 1),
                            per_page=parse_int(per_page, "per_page", 1, MAX_PER_PAGE))

    def now(self) -> float:
        return admin.server_time(self.r)

    def suspended(self) -> float | None:
        return admin.suspended_for(self.r, self.prefix)

    def names_page(self, page: Any = 1, per_page: Any = QUEUES_PER_PAGE,
                   names: list[str] | None = None, match: Any = None,
                   ) -> tuple[int, int, list[str], list[str]]:
        """(page, per_page, every name, the names of that page), checked (``names``:
        every name, when read already; ``match``: only the names holding it, any case)."""
        page_n = parse_int(page, "page", 1)
        size = parse_int(per_page, "per_page", 1, MAX_PER_PAGE)
        names = self.queue_names() if names is None else names
        if match:
            if not isinstance(match, str) or len(match) > MAX_MATCH:
                raise ApiError(400, f"match must be text of at most {MAX_MATCH} characters")
            folded = match.casefold()
            names = [name for name in names if folded in name.casefold()]
        return page_n, size, names, names[(page_n - 1) * size:page_n * size]

    def chart(self, minutes: int = 60, queue: str | None = None,
              names: list[str] | None = None) -> list[dict[str, Any]]:
        """Finished and failed per minute of ``queue``, or of ``names``, or of all."""
        if queue:
            names = [self.queue(queue).name]
        elif names is None:
            names = self.queue_names()
        return admin.minute_counts(self.r, names, self.prefix, minutes)

    def cron_entries(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in cron.list_entries(self.r, self.prefix, self.queue_names())]

    def status_counts(self, queue: str) -> dict[str, int]:
        """How many jobs each status tab of ``queue`` holds (one pipeline of ZCARDs)."""
        k = self.queue(queue).qkeys
        pipe = self.r.pipeline(transaction=False)
        for status in STATUSES:
            pipe.zcard(k.registry(status))
        return {str(s): int(n) for s, n in zip(STATUSES, pipe.execute(), strict=True)}

    def _records(self, q: Queue, ids: list[str]) -> list[Job[Any]]:
        return [job for job in self._records_aligned(q, ids) if job is not None]

    def jobs(self, queue: str | None, status: str = JobStatus.QUEUED, priority: str | None = None,
             function: str | None = None, page: Any = 1, per_page: Any = 50,
             start: Any = None, unless: str | None = None) -> dict[str, Any]:
        """One page of a registry, newest (or best, or soonest) first; see the module doc.

        A page read by offsets has a ``fingerprint`` (of its ids and the total); given
        ``unless`` equal to it, the records are not read and ``jobs`` is None."""
        if not queue:
            raise ApiError(400, "queue is required (GET /api/v1/queues lists them)")
        if status not in LISTED:
            raise ApiError(400, f"unknown status {status!r}; one of {', '.join(LISTED)}")
        page_n = parse_int(page, "page", 1)
        size = parse_int(per_page, "per_page", 1, MAX_PER_PAGE)
        q = self.queue(queue)
        key, only = details.listed_from(q.qkeys, status)
        band = _priority_range(priority)
        newest_first = status not in OLDEST_FIRST
        result: dict[str, Any] = {"queue": q.name, "status": status, "page": page_n,
                                  "per_page": size, "priority": priority or None,
                                  "function": function or None, "next_start": None}
        if not function and not only and (band is None or status == JobStatus.QUEUED):
            ids, total = self._page_ids(key, (page_n - 1) * size, size, band, newest_first)
            result["total"] = total
            result["pages"] = max(1, -(-total // size))
            result["fingerprint"] = fingerprint([status, page_n, size, total, *ids])
            result["jobs"] = (None if unless == result["fingerprint"]
                              else [job_summary(j) for j in self._records(q, ids)])
            return result
        # filters on fields of the record: scan a bounded window from ``start``
        begin = parse_int(start, "start", 0) if start not in (None, "") else 0
        found, position = self._scan(q, key, begin, size, function, band, newest_first, only)
        total = int(self.r.zcard(key))
        result.update(total=None, pages=None, fingerprint=None, scanned_from=begin,
                      next_start=position if position < total else None,
                      jobs=[job_summary(j) for j in found])
        return result

    def _page_ids(self, key: str, offset: int, size: int, band: tuple[int, int] | None,
                  newest_first: bool) -> tuple[list[str], int]:
        """The ids of one page of a registry by offset (of a priority band or value of
        the queued registry, best first) and how many there are in all."""
        if band is None:
            total = int(self.r.zcard(key))
            ids = (self.r.zrevrange(key, offset, offset + size - 1) if newest_first
                   else self.r.zrange(key, offset, offset + size - 1))
        else:
            lo, hi = _band_range(*band)
            total = int(self.r.zcount(key, lo, hi))
            ids = self.r.zrevrangebyscore(key, hi, lo, start=offset, num=size)
        return texts(ids), total

    def _scan(self, q: Queue, key: str, begin: int, size: int, function: str | None,
              band: tuple[int, int] | None, newest_first: bool,
              only: str | None = None) -> tuple[list[Job[Any]], int]:
        """Up to ``size`` jobs of a window of the registry from ``begin`` that match the
        filters (``only``: of that status), and the position after the last one looked
        at."""
        window = texts(self.r.zrevrange(key, begin, begin + FILTER_SCAN - 1) if newest_first
                       else self.r.zrange(key, begin, begin + FILTER_SCAN - 1))
        found: list[Job[Any]] = []
        position = begin
        for chunk in range(0, len(window), 200):
            for job in self._records_aligned(q, window[chunk:chunk + 200]):
                position += 1
                if job is not None and _matches(job, function, band) and (
                        only is None or job.status == only):
                    found.append(job)
                    if len(found) == size:
                        return found, position
        return found, position

    def _records_aligned(self, q: Queue, ids: list[str]) -> list[Job[Any] | None]:
        return job_reads.jobs(self.r, self.prefix, [(q.name, job_id) for job_id in ids])

    def find(self, job_id: str, queue: str | None = None) -> Queue:
        if not job_id or len(job_id) > 200:
            raise ApiError(400, "bad job id")
        if queue:
            self.queue(queue)
        name = find_queue_of(self.r, job_id, self.prefix, queue or None)
        if name is None:
            raise ApiError(404, f"no job {job_id!r}" + (f" in queue {queue!r}" if queue else ""))
        return Queue(name, self.r, settings=self.settings)

    def _hash(self, q: Queue, job_id: str) -> dict[str, str]:
        return job_reads.job_hashes(self.r, self.prefix, [(q.name, job_id)])[0]

    def job_fingerprint(self, job_id: str, queue: str | None = None) -> tuple[str, str]:
        """(queue, digest of the job record): one HGETALL when the queue is given."""
        if queue:
            q = self.queue(queue, must_exist=False)
            data = self._hash(q, job_id)
            if not data:
                raise ApiError(404, f"no job {job_id!r} in queue {queue!r}")
        else:
            q = self.find(job_id)
            data = self._hash(q, job_id)
        return q.name, fingerprint(sorted(data.items()))

    def job(self, job_id: str, queue: str | None = None) -> dict[str, Any]:
        q = self.find(job_id, queue)
        data = self._hash(q, job_id)
        if not data:
            raise ApiError(404, f"no job {job_id!r}")
        job = Job.from_hash(data)
        doc = job.to_dict()
        doc["wait_time"] = job.wait_time
        doc["fingerprint"] = fingerprint(sorted(data.items()))
        found = details.timeline(self.r, self.prefix, job)
        doc["dependencies"] = details.dependencies(self.r, self.prefix, job.id, q.name,
                                                   job.depends_on)
        doc["dependents"], doc["dependents_count"] = (
            details.dependents(self.r, self.prefix, job.id, q.name)
            if job.has_dependents and job.status not in DONE_STATUSES else ([], 0))
        doc["batch_status"] = details.batch_of(self.r, self.prefix, job.batch)
        doc["traceback_short"], doc["traceback_hidden_frames"] = details.trim_traceback(
            job.traceback)
        doc["events"] = sorted((details.event_row(i, e) for i, e in found),
                               key=lambda e: (str(e.get("@timestamp") or ""), details.stream_order(e["id"])))
        doc["timeline_rows"] = details.bounded_progress(doc["events"])
        return doc

    # -- actions -----------------------------------------------------------------

    def _audit(self, who: str, action: str, queue: str | None = None, job: Any = None,
               detail: str = "") -> None:
        said = [action, queue, f"job {job.id}" if job is not None else "", detail, "by", who]
        log.info("web: %s", " ".join(part for part in said if part))
        source = job if job is not None else {"id": None, "queue": queue}
        ev.emit_job_event(self.settings, "admin", source, connection=self.r,
                          worker=f"web:{who}", reason=action)

    def set_priority(self, who: str, job_id: str, priority: Any,
                     queue: str | None = None) -> dict[str, Any]:
        value = parse_int(priority, "priority", -1023, 1023)
        check_priority(value)
        q = self.find(job_id, queue)
        job = self._guard(lambda: q.reprioritize(job_id, value))
        self._audit(who, "reprioritize", q.name, job, f"to {value}")
        return job_summary(job)

    def requeue(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        return self._act(who, "requeue", job_id, queue, Queue.requeue)

    def cancel(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        return self._act(who, "cancel", job_id, queue, Queue.cancel)

    def stop(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        """A running job is killed by its worker (ends ``stopped``); a queued one canceled."""
        return self._act(who, "stop", job_id, queue, Queue.stop)

    def hold(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        return self._act(who, "hold", job_id, queue, Queue.hold)

    def release(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        return self._act(who, "release", job_id, queue, Queue.release)

    def _act(self, who: str, action: str, job_id: str, queue: str | None,
             change: Callable[[Queue, str], Job[Any]]) -> dict[str, Any]:
        """``change(queue, job_id)`` on the job's queue, audited as ``action``; the job."""
        q = self.find(job_id, queue)
        job = self._guard(lambda: change(q, job_id))
        self._audit(who, action, q.name, job)
        return job_summary(job)

    def delete(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        q = self.find(job_id, queue)
        job = q.fetch_job(job_id)
        self._guard(lambda: q.delete(job_id))
        self._audit(who, "delete", q.name, job)
        return {"deleted": job_id, "queue": q.name}

    def requeue_failed(self, who: str, queue: str, ids: list[str] | None) -> dict[str, Any]:
        q = self.queue(queue)
        if ids is None:
            count = q.requeue_all_failed()
            self._audit(who, "requeue-all-failed", q.name, detail=f"{count} job(s)")
            return {"queue": q.name, "requeued": count, "errors": []}
        count, errors = self._each(who, "requeue", q.name, ids, q.requeue)
        return {"queue": q.name, "requeued": count, "errors": errors}

    def delete_many(self, who: str, queue: str, ids: list[str]) -> dict[str, Any]:
        q = self.queue(queue)

        def delete(job_id: str) -> Job[Any] | None:
            job = q.fetch_job(job_id)
            q.delete(job_id)
            return job

        count, errors = self._each(who, "delete", q.name, ids, delete)
        return {"queue": q.name, "deleted": count, "errors": errors}

    def cancel_many(self, who: str, queue: str, ids: list[str]) -> dict[str, Any]:
        q = self.queue(queue)
        count, errors = self._each(who, "cancel", q.name, ids, q.cancel)
        return {"queue": q.name, "canceled": count, "errors": errors}

    def _each(self, who: str, action: str, queue: str, ids: list[str],
              change: Callable[[str], Job[Any] | None]) -> tuple[int, list[str]]:
        """``change(job_id)`` for each of ``ids``, each audited as ``action``: how many
        were changed, and the error of each that was not."""
        errors, count = [], 0
        for job_id in ids:
            try:
                job = change(str(job_id))
                count += 1
                self._audit(who, action, queue, job)
            except (NoSuchJob, InvalidOperation) as exc:
                errors.append(str(exc))
        return count, errors

    def pause(self, who: str, queue: str, paused: bool) -> dict[str, Any]:
        q = self.queue(queue)
        q.pause() if paused else q.unpause()
        self._audit(who, "pause" if paused else "unpause", q.name)
        return {"queue": q.name, "paused": paused}

    def max_active(self, who: str, queue: str, limit: Any) -> dict[str, Any]:
        q = self.queue(queue)
        value = None if limit in (None, "", "none") else parse_int(limit, "max_active", 1)
        q.set_max_active(value)
        self._audit(who, "set-max-active", q.name, detail=str(value))
        return {"queue": q.name, "max_active": value}

    def suspend(self, who: str, on: bool) -> dict[str, Any]:
        admin.suspend(self.r, self.prefix) if on else admin.resume(self.r, self.prefix)
        self._audit(who, "suspend" if on else "resume")
        return {"suspended": on}

    def shutdown_worker(self, who: str, name: str, mode: str = "warm") -> dict[str, Any]:
        """Ask worker ``name`` to stop as SIGTERM would (``cold``: its jobs go back)."""
        try:
            admin.request_shutdown(self.r, name, self.prefix, mode)
        except InvalidOperation as exc:
            raise ApiError(404, str(exc)) from None
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        self._audit(who, "shutdown", detail=f"worker {name} ({mode})")
        return {"worker": name, "shutdown": mode}

    def cron(self, who: str, name: str, action: str, queue: str | None = None) -> dict[str, Any]:
        try:
            if action == "pause":
                where = cron.pause(self.r, self.settings, name, queue or None)
            elif action == "resume":
                where = cron.resume(self.r, self.settings, name, queue or None).queue
            else:
                where = cron.remove(self.r, self.settings, name, queue or None)
        except cron.NoSuchCronEntry as exc:
            raise ApiError(404, str(exc)) from None
        except InvalidQueueName as exc:
            raise ApiError(400, str(exc)) from None
        except (cron.InvalidSchedule, ValueError) as exc:   # the entry Redis holds: unusable
            raise ApiError(409, f"cron entry {name!r} cannot be {action}d as Redis holds it: "
                                f"{str(exc)[:200]}") from None
        self._audit(who, f"cron-{action}", where, detail=name)
        return {"cron": name, "queue": where, "action": action}

    def run_now(self, who: str, job_id: str, queue: str | None = None) -> dict[str, Any]:
        """A scheduled job (delayed, or waiting for a retry) becomes due now: its score
        and ``scheduled_for`` are set to the server time in one script (nothing done
        if it left the scheduled set meanwhile); the next claim promotes it."""
        q = self.find(job_id, queue)
        if not replies.changed(q.scripts.run_now(keys=[q.qkeys.base], args=[job_id])):
            status = job_reads.job_fields(self.r, self.prefix, [(q.name, job_id)],
                                          ("status",))[0]["status"]
            raise ApiError(409, f"job {job_id} is {status or 'gone'}, not scheduled: only a "
                                "scheduled job (delayed or waiting for a retry) can run now")
        self.r.publish(q.qkeys.wake, "run-now")
        job = q.fetch_job(job_id)
        self._audit(who, "run-now", q.name, job)
        return job_summary(job) if job is not None else {"id": job_id, "queue": q.name}

    def rate_limit(self, who: str, queue: str, rate: Any, scope: str = "queue",
                   group: str = "") -> dict[str, Any]:
        """Set (``"10/s"``, ``"600/m"``, ``"1000/h"``) or remove (empty, ``none``) the rate
        limit of the queue (scope ``queue``), of each of its groups (``every``) or of one
        group (``group``), as ``set-rate-limit`` does."""
        q = self.queue(queue)
        if scope not in ("queue", "every", "group"):
            raise ApiError(400, "scope is queue, every (each group) or group")
        if scope == "group" and not group:
            raise ApiError(400, "name the group whose rate limit to set")
        spec = str(rate).strip() if rate not in (None, "") else ""
        value = None if spec.lower() in ("", "none") else spec
        try:
            q.set_rate_limit(value, per_group=scope == "every",
                             group=group if scope == "group" else None)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        where = f"group {group}" if scope == "group" else scope
        self._audit(who, "set-rate-limit", q.name, detail=f"{where} {value or 'none'}")
        return {"queue": q.name, "scope": where, "rate": value,
                "rate_limit": q.rate_limit, "group_rate_limit": q.group_rate_limit}

    def cron_add(self, who: str, fields: dict[str, Any], queue: str | None) -> dict[str, Any]:
        """Create or replace a cron entry (``cron add``): name, schedule, func, args (a JSON
        list), kwargs (a JSON object), timezone, priority. The function must be allowed
        to this process (default deny, as at enqueue)."""
        q = self.queue(queue or "default", must_exist=False)
        args = _json_field(fields.get("args"), "args", list)
        kwargs = _json_field(fields.get("kwargs"), "kwargs", dict)
        given = fields.get("priority")    # not given: the function's @job priority, else 0
        priority = (None if given in (None, "") else
                    parse_int(given, "priority", -1023, 1023))
        for key in ("name", "schedule", "func"):
            if not str(fields.get(key) or "").strip():
                raise ApiError(400, f"{key} is required")
        if "/" in str(fields["name"]):   # /api/v1/cron/{name} could not address it
            raise ApiError(400, "name may not contain '/'")
        try:
            entry = cron.register(self.r, self.settings, str(fields["name"]).strip(),
                                  str(fields["schedule"]).strip(), str(fields["func"]).strip(),
                                  args, kwargs, queue=q.name, priority=priority,
                                  timezone=str(fields.get("timezone") or "UTC").strip())
        except (cron.InvalidSchedule, FunctionNotAllowed, InvalidFunction, ValueError,
                TypeError) as exc:
            raise ApiError(400, str(exc)) from None
        self._audit(who, "cron-add", q.name, detail=f"{entry.name} {entry.schedule}")
        return entry.to_dict()

    def cron_run_now(self, who: str, name: str, queue: str | None = None) -> dict[str, Any]:
        """Enqueue a run of the entry now (its schedule is left as it is)."""
        try:
            entry = cron.get_entry(self.r, self.settings, name, queue or None)
        except cron.NoSuchCronEntry as exc:
            raise ApiError(404, str(exc)) from None
        except InvalidQueueName as exc:
            raise ApiError(400, str(exc)) from None
        except ValueError as exc:        # the entry Redis holds cannot be read
            raise ApiError(409, f"cron entry {name!r} cannot be run as Redis holds it: "
                                f"{str(exc)[:200]}") from None
        q = Queue(entry.queue, self.r, settings=self.settings)
        try:
            job = q.enqueue_call(entry.func, entry.args, entry.kwargs, priority=entry.priority,
                                 timeout=entry.timeout, max_retries=entry.max_retries)
        except (FunctionNotAllowed, ValueError, TypeError) as exc:
            raise ApiError(400, str(exc)) from None
        self._audit(who, "cron-run", q.name, job, detail=name)
        return {"cron": name, "queue": q.name, "job_id": job.id}

    @staticmethod
    def _guard(call: Any) -> Any:
        try:
            return call()
        except NoSuchJob as exc:
            raise ApiError(404, str(exc)) from None
        except (InvalidOperation, ValueError) as exc:
            raise ApiError(409, str(exc)) from None
