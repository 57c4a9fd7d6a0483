"""Failure callbacks: POST a JSON note to a webhook after a job's final failure.

The URL is the job's ``on_failure_url`` or, failing that, the global
``FAILURE_WEBHOOK_URL``. The body::

    {"event": "failed", "job_id": ..., "queue": ..., "function": ...,
     "error": "Type: message", "error_type": ..., "error_message": ...,
     "reason": "exception", "attempts": 3, "worker": "host.123"}

Jobs the reaper fails as ``abandoned`` are reported too (``reason``
``abandoned``), by the worker whose reaper pass found them.

The worker loop only puts the note on a bounded in-memory queue
(``after_finish``, after the outcome is recorded); a daemon thread does the
HTTP call with a short timeout. So a slow or dead webhook never delays a claim
or a job. A failed POST is logged and counted (``callbacks_failed`` in the
heartbeat hash), a full queue drops the note and counts it
(``callbacks_dropped``); nothing here ever raises into the worker.

If the worker process dies with notes still queued, those notes are lost
(the job's failure itself is already recorded in Redis). A note is sent
once: there is no retry of the webhook.

A webhook's URL often carries its secret: a user and password, a token in the
query, or the path itself (Slack's ``/services/T/B/XXXX``). The log names the
scheme, host and port only (:func:`shown_url`), and an error's message is logged
without any part of the URL's user, password, path or query (:func:`scrubbed`).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

from ..core.config import Settings
from ..core.hooks import Middleware, OutcomeReason
from ..core.job import FailureReason

if TYPE_CHECKING:  # pragma: no cover
    import requests

    from ..core.hooks import Outcome, WorkerContext
    from ..core.job import Job

__all__ = ["FailureCallbacks", "failure_payload"]

log = logging.getLogger("fusionworker.callbacks")

#: Seconds a webhook POST may take (connect and read each).
TIMEOUT = 5.0
#: Notes waiting to be sent; beyond this they are dropped and counted.
BUFFER = 1000


def failure_payload(job: Job[Any], outcome: Outcome, worker_name: str) -> dict[str, Any]:
    """The JSON body POSTed for a job's final failure."""
    error = (f"{outcome.error_type}: {outcome.error_message}" if outcome.error_message
             else outcome.error_type)
    return {
        "event": "failed", "job_id": job.id, "queue": job.queue, "function": job.func,
        "error": error, "error_type": outcome.error_type,
        "error_message": outcome.error_message, "reason": outcome.reason,
        "attempts": job.attempts, "worker": worker_name,
    }


class FailureCallbacks(Middleware):
    """Middleware: queue a webhook POST when a job failed for good."""

    def __init__(self, settings: Settings, *, timeout: float = TIMEOUT,
                 buffer: int = BUFFER) -> None:
        self.default_url = settings.failure_webhook_url
        self.timeout = timeout
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(buffer)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- worker side (never blocks, never raises) --------------------------------

    def after_finish(self, worker: WorkerContext, job: Job[Any], outcome: Outcome) -> None:
        # a job stopped on request (job stop, the dashboard) is an operator's act, not a
        # failure to alert on (Celery's revoke is no task_failure either)
        if (outcome.status != "failed" or not outcome.recorded
                or outcome.reason == OutcomeReason.STOPPED):
            return
        url = job.on_failure_url or self.default_url
        if url:
            self.submit(url, failure_payload(job, outcome, worker.name))

    def on_job_reaped(self, worker: WorkerContext, job: Job[Any], outcome: str) -> None:
        if outcome == "abandoned":
            self.abandoned(worker, job)

    def abandoned(self, worker: WorkerContext, job: Job[Any]) -> None:
        """The reaper failed ``job`` as abandoned (its workers died; attempts used up)."""
        url = job.on_failure_url or self.default_url
        if url:
            error = f"{job.error_type}: {job.error_message}" if job.error_type else "abandoned"
            self.submit(url, {
                "event": "failed", "job_id": job.id, "queue": job.queue, "function": job.func,
                "error": error, "error_type": job.error_type,
                "error_message": job.error_message, "reason": FailureReason.ABANDONED,
                "attempts": job.attempts, "worker": worker.name,
            })

    def submit(self, url: str, payload: dict[str, Any]) -> bool:
        """Queue one POST; False (and counted) if the buffer is full."""
        self._ensure_thread()
        try:
            self._queue.put_nowait((url, payload))
        except queue.Full:
            with self._lock:
                self.dropped += 1
            log.error("Failure callback for job %s dropped: %d notes already waiting",
                      payload.get("job_id"), self._queue.maxsize)
            return False
        return True

    def on_stop(self, worker: WorkerContext) -> None:
        self.close(timeout=2.0)

    def describe(self) -> dict[str, Any]:
        return {"callbacks_sent": self.sent, "callbacks_failed": self.failed,
                "callbacks_dropped": self.dropped}

    def close(self, timeout: float = 2.0) -> None:
        """Let queued notes go out for up to ``timeout`` seconds, then stop the thread."""
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)
        self._thread = None

    # -- sender thread -------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="fusionworker-callbacks",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        # imported by the sender thread, at the first note: requests (with urllib3 and
        # every codec charset_normalizer loads) is ~14 MiB a worker that never sends a
        # note would carry for nothing
        import requests

        session = requests.Session()
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                self._post(session, *item)
        finally:
            session.close()

    def _post(self, session: requests.Session, url: str, payload: dict[str, Any]) -> None:
        try:
            response = session.post(url, json=payload, timeout=self.timeout)
            response.raise_for_status()
        except Exception as exc:  # noqa: BLE001 - requests' own, or urllib3's for a bad host
            with self._lock:
                self.failed += 1
            try:
                said = scrubbed(str(exc), url)
            except Exception:  # noqa: BLE001 - the sender thread outlives any URL
                said = type(exc).__name__
            log.warning("Failure callback for job %s to %s failed: %s",
                        payload.get("job_id"), shown_url(url), said)
            return
        with self._lock:
            self.sent += 1
        log.info("Failure callback for job %s sent to %s", payload.get("job_id"),
                 shown_url(url))


def shown_url(url: str) -> str:
    """What a log may show of a webhook's ``url``: its scheme, host and port; its
    user, password, path and query (any of which may be its secret) as ``***``."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "(a URL that does not parse)"
    if parts.scheme.lower() not in ("http", "https"):
        return "(a URL that is not http or https)"
    host = f"[{host}]" if ":" in host else host
    return (f"{parts.scheme}://{'***@' if '@' in parts.netloc else ''}{host}"
            f"{f':{port}' if port else ''}{'/***' if parts.path.strip('/') else ''}"
            f"{'?***' if parts.query else ''}")


def scrubbed(text: str, url: str) -> str:
    """``text`` (an HTTP library's error, which may repeat the URL or a part of it)
    with every part of ``url`` that may be a secret replaced by ``***``: the user
    and password, the path and each of its segments, the query and each value, as
    written and as the library writes them (percent-encoded)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(not shown: its URL does not parse)"
    if parts.scheme.lower() not in ("http", "https"):   # "user:pw@host" parses as a scheme
        return "(not shown: its URL is not http or https)"
    secrets = _spelled(_parts_of(url, parts))
    # (a part of one or two characters is no secret, and would blot out the message)
    for secret in sorted((s for s in secrets if len(s) >= 3 and s != "/"), key=len,
                         reverse=True):
        text = text.replace(secret, "***")
    return text


def _parts_of(url: str, parts: Any) -> set[str]:
    """The parts of ``url`` that may be its secret, as parsed and as written (the
    parser drops tabs and line ends, which the HTTP library keeps)."""
    found = {parts.netloc.rpartition("@")[0], parts.username or "", parts.password or "",
             parts.path, parts.query, parts.fragment, *parts.path.split("/")}
    found.update(value for _, value in parse_qsl(parts.query, keep_blank_values=True))
    after = url.split("://", 1)[-1]
    cuts = [i for i in (after.find("/"), after.find("?"), after.find("#")) if i >= 0]
    if cuts:
        cut = min(cuts)
        found.update({after[cut:], after[cut:].partition("?")[2],
                      after[:cut].rpartition("@")[0]})
    return {s for s in found if s}


def _spelled(secrets: set[str]) -> set[str]:
    """Each secret, decoded and percent-encoded the ways an HTTP library writes it."""
    spelled = secrets | {unquote(s) for s in secrets}
    spelled |= {quote(s, safe=safe) for s in list(spelled)
                for safe in ("/", "/:@", "", "/?=&:@")}
    spelled |= {quote_plus(s) for s in list(spelled)}
    return spelled
