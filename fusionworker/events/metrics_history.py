"""Per-queue history for the dashboard's charts: jobs finished, failed and retried
and a histogram of job durations, per minute (kept 2 h) and per 10 minutes
(kept 26 h), read back as throughput, failures and duration percentiles.

Written from the event stream (``fw:events``), not on the job path: a reader
(:func:`record_from_stream`; the dashboard runs it every few seconds) takes the
entries after its cursor and adds them up into::

    fw:{q}:hist:60:<epoch minute>          HASH  finished, failed, retry, d<k>
    fw:{q}:hist:600:<epoch 10-minute>      HASH  the same, per 10 minutes
    fw:hist:all:60:<epoch minute>          HASH  the same summed over every queue
    fw:hist:all:600:<epoch 10-minute>      HASH  (the charts of all queues, read in
                                                 one hash per bucket)

``d<k>`` counts the attempts whose duration fell in bucket ``k`` (quarter powers
of two of a millisecond: ``2**(k/4) <= ms < 2**((k+1)/4)``, ``k`` in 0..99), so
a percentile is known within 19 %. Each hash expires (``EXPIREAT``) its
retention after its own end, so the history holds at most 120 + 156 small
hashes per queue, and as many for the sums. The cursor (``fw:hist:cursor``) and a lock
(``fw:hist:lock``, so that two dashboards do not count twice) are global keys.

Limits: only events that reach the Redis stream are counted (with
``ELASTICSEARCH_URL`` set there is no history); entries trimmed
from the stream before a reader took them are not counted (the stream keeps
``event_stream_maxlen`` entries; a reader every 5 s keeps up with far more than
any worker fleet writes in 5 s). The first pass starts at the entries of the
last 26 h.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ..core.keys import InvalidQueueName, Keys, check_queue_name
from ..core.redis_client import stored_count

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient

#: resolution (seconds) -> retention (seconds after the bucket's end)
RESOLUTIONS = {60: 7200, 600: 26 * 3600}
#: the ranges the charts show: name -> (resolution, buckets)
RANGES = {"hour": (60, 60), "day": (600, 144)}
BUCKETS = 100
#: stream entries one pass reads at most (in pages of PAGE)
PASS_LIMIT = 200_000
PAGE = 2000
#: the counts of every queue summed (``fw:hist:all:<r>:<b>``); no queue has this name
ALL = "*"
OUTCOMES = {"completed": "finished", "failed": "failed", "timeout": "failed",
            "abandoned": "failed", "retry": "retry"}

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _cursor_key(prefix: str) -> str:
    return f"{prefix}:hist:cursor"


def _lock_key(prefix: str) -> str:
    return f"{prefix}:hist:lock"


def bucket_key(prefix: str, queue: str, resolution: int, bucket: int) -> str:
    return Keys(prefix).queue(queue).history(resolution, bucket)


def duration_bucket(seconds: float) -> int:
    ms = seconds * 1000.0
    if ms < 1.0:
        return 0
    return min(BUCKETS - 1, int(math.log2(ms) * 4))


def bucket_ms(k: int) -> float:
    """The middle (geometric) of duration bucket ``k``, in milliseconds."""
    return float(2 ** ((k + 0.5) / 4)) if k else 0.5


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _add(counts: dict[tuple[str, int, int], dict[str, int]], fields: dict[str, str],
         when: float) -> None:
    kind = OUTCOMES.get(fields.get("event", ""))
    queue = fields.get("queue") or ""
    if kind is None or not queue:
        return
    try:
        check_queue_name(queue)
    except InvalidQueueName:
        return
    duration = fields.get("duration")
    k = None
    if duration not in (None, ""):
        try:
            k = duration_bucket(max(0.0, float(duration)))
        except ValueError:
            k = None
    for resolution in RESOLUTIONS:
        for where in (queue, ALL):   # the queue's bucket and the sum over every queue
            row = counts[(where, resolution, int(when // resolution))]
            row[kind] += 1
            if k is not None:
                row[f"d{k}"] += 1


def record_from_stream(r: RedisClient, prefix: str, now: float | None = None,
                       limit: int = PASS_LIMIT) -> int:
    """Add the stream entries after the cursor to the history; returns how many were
    read (0 when another reader holds the lock)."""
    token = uuid.uuid4().hex
    if not r.set(_lock_key(prefix), token, nx=True, px=60_000):
        return 0
    try:
        return _record(r, prefix, time.time() if now is None else now, limit)
    finally:
        r.eval(_RELEASE, 1, _lock_key(prefix), token)


def _record(r: RedisClient, prefix: str, now: float, limit: int) -> int:
    stream = Keys(prefix).events
    cursor = r.get(_cursor_key(prefix))
    start = f"({_text(cursor)}" if cursor else f"{int((now - 26 * 3600) * 1000)}-0"
    counts: dict[tuple[str, int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    read = 0
    last = None
    while read < limit:
        page = r.xrange(stream, min=start, max="+", count=PAGE) or []
        for entry_id, raw in page:
            last = _text(entry_id)
            fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
            _add(counts, fields, int(last.split("-", 1)[0]) / 1000.0)
        read += len(page)
        if len(page) < PAGE:
            break
        start = f"({last}"
    if last is None:
        return 0
    pipe = r.pipeline(transaction=False)
    for (queue, resolution, bucket), row in counts.items():
        expire_at = (bucket + 1) * resolution + RESOLUTIONS[resolution]
        if expire_at <= now:
            continue
        key = (Keys(prefix).history_all(resolution, bucket) if queue == ALL
               else bucket_key(prefix, queue, resolution, bucket))
        for field, n in row.items():
            pipe.hincrby(key, field, n)
        pipe.expireat(key, int(expire_at))
    pipe.set(_cursor_key(prefix), last)
    pipe.execute()
    return read


def percentile(hist: dict[int, int], fraction: float) -> float | None:
    total = sum(hist.values())
    if not total:
        return None
    rank = fraction * total
    seen = 0
    for k in sorted(hist):
        seen += hist[k]
        if seen >= rank:
            return _shown(bucket_ms(k))
    return _shown(bucket_ms(max(hist)))


def _shown(ms: float) -> float:
    """Three significant digits at most (a bucket is 19 % wide)."""
    return round(ms, 1) if ms >= 10 else round(ms, 2)


def history(r: RedisClient, prefix: str, queues: list[str] | None, span: str = "hour",
            now: float | None = None) -> dict[str, Any]:
    """Rows oldest first, summed over ``queues``: ``{"t": bucket start, "finished",
    "failed", "retry", "p50", "p95", "p99"}`` (milliseconds; None without a timed
    attempt), and the same over the whole span in ``total``. ``queues`` None: every
    queue, read from the sums the recorder keeps (one hash per bucket whatever the
    number of queues; counted since this version of the recorder)."""
    resolution, n = RANGES[span]
    now = time.time() if now is None else now
    last = int(now // resolution)
    span_buckets = list(range(last - n + 1, last + 1))
    pipe = r.pipeline(transaction=False)
    if queues is None:
        queues = [ALL]
    for queue in queues:
        for bucket in span_buckets:
            pipe.hgetall(Keys(prefix).history_all(resolution, bucket) if queue == ALL
                         else bucket_key(prefix, queue, resolution, bucket))
    answers = pipe.execute() if queues else []
    rows = []
    whole: dict[int, int] = defaultdict(int)
    totals = {"finished": 0, "failed": 0, "retry": 0}
    for i, bucket in enumerate(span_buckets):
        hist: dict[int, int] = defaultdict(int)
        row: dict[str, Any] = {"t": bucket * resolution, "finished": 0, "failed": 0, "retry": 0}
        for q in range(len(queues)):
            _add_bucket(answers[q * n + i], row, hist)
        for field in totals:
            totals[field] += row[field]
        for k, v in hist.items():
            whole[k] += v
        row.update(p50=percentile(hist, 0.5), p95=percentile(hist, 0.95),
                   p99=percentile(hist, 0.99))
        rows.append(row)
    total = {**totals, "p50": percentile(whole, 0.5), "p95": percentile(whole, 0.95),
             "p99": percentile(whole, 0.99)}
    return {"range": span, "bucket_seconds": resolution, "rows": rows, "total": total}


def _add_bucket(data: dict[Any, Any], row: dict[str, Any], hist: dict[int, int]) -> None:
    """One bucket hash added to ``row`` (its counts) and ``hist`` (its ``d<N>`` duration
    buckets); a field or count that is no number (written by another program) adds 0."""
    for key, raw in data.items():
        field, value = _text(key), stored_count(raw)
        if field.startswith("d"):
            if field[1:].isdigit():
                hist[int(field[1:])] += value
        elif field in row:
            row[field] += value


class HistoryRecorder:
    """A daemon thread running :func:`record_from_stream` every ``interval`` seconds
    (the dashboard starts one; any number may run: the lock keeps one at a time)."""

    def __init__(self, connection: RedisClient, prefix: str, interval: float = 5.0) -> None:
        import threading

        self.connection = connection
        self.prefix = prefix
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fusionworker-history",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        import logging

        import redis

        log = logging.getLogger("fusionworker.events")
        while True:
            try:
                record_from_stream(self.connection, self.prefix)
            except redis.RedisError as exc:   # Redis away: try again next turn
                log.warning("history: cannot read the event stream: %s", type(exc).__name__)
            if self._stop.wait(self.interval):
                return
