"""The form actions of the pages: each button posts ``action`` (and its fields) to
``/action``; :func:`dispatch` makes the same :class:`Dashboard` call as the API
(so each is audited the same way) and returns the message shown after the
redirect. CSRF and read-only are checked before (``views.form_action``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .service import ApiError, Dashboard


def dispatch(board: Dashboard, who: str, action: str, queue: str | None, job_id: str,
             ids: list[str], form: Any) -> str:
    """A page's form action -> the same Dashboard call as the API; returns a message."""
    if action == "suspend":
        board.suspend(who, True)
        return "All workers suspended"
    if action == "resume":
        board.suspend(who, False)
        return "Workers resumed"
    if action == "worker-shutdown":
        mode = str(form.get("mode") or "warm")
        board.shutdown_worker(who, str(form.get("worker") or ""), mode)
        return f"Worker {form.get('worker')}: {mode} shutdown asked"
    if action.startswith("cron-"):
        return _cron(board, who, action, queue, form)
    if action in ("requeue", "cancel", "stop", "delete", "priority", "run-now", "hold",
                  "release") and job_id:
        return _job(board, who, action, queue, job_id, form)
    if action in ("requeue-selected", "delete-selected", "cancel-selected"):
        return _bulk(board, who, action, queue, ids)
    if not queue:
        raise ApiError(400, "no queue given")
    return _queue(board, who, action, queue, form)


def _queue(board: Dashboard, who: str, action: str, queue: str, form: Any) -> str:
    """An action on queue ``queue`` itself."""
    if action in ("pause", "unpause"):
        board.pause(who, queue, action == "pause")
        return f"Queue {queue} {action}d"
    if action == "max-active":
        result = board.max_active(who, queue, form.get("limit"))
        return f"Queue {queue}: max active {result['max_active'] or 'none'}"
    if action == "rate-limit":
        result = board.rate_limit(who, queue, form.get("rate"), str(form.get("scope") or "queue"),
                                  str(form.get("group") or ""))
        return f"Queue {queue}: {result['scope']} rate limit {result['rate'] or 'removed'}"
    if action == "requeue-all-failed":
        result = board.requeue_failed(who, queue, None)
        return f"Requeued {result['requeued']} job(s)"
    raise ApiError(400, f"unknown action {action!r}")


def _job(board: Dashboard, who: str, action: str, queue: str | None, job_id: str,
         form: Any) -> str:
    if action == "priority":
        board.set_priority(who, job_id, form.get("priority"), queue)
        return f"Priority of {job_id} set to {form.get('priority')}"
    if action == "run-now":
        board.run_now(who, job_id, queue)
        return f"Job {job_id} runs now"
    if action == "stop":
        found = board.stop(who, job_id, queue)
        return (f"Job {job_id} canceled (it had not started)" if found["status"] == "canceled"
                else f"Job {job_id}: stop asked; its worker kills it")
    getattr(board, action)(who, job_id, queue)
    return f"Job {job_id}: {action} done"


def _cron(board: Dashboard, who: str, action: str, queue: str | None, form: Any) -> str:
    name = str(form.get("name") or "")
    if action == "cron-add":
        entry = board.cron_add(who, {k: form.get(k) for k in (
            "name", "schedule", "func", "args", "kwargs", "timezone", "priority")}, queue)
        return f"Cron entry {entry['name']} on {entry['queue']} added"
    if action == "cron-run":
        result = board.cron_run_now(who, name, queue)
        return f"Cron entry {name}: job {result['job_id']} enqueued"
    if action not in ("cron-pause", "cron-resume", "cron-remove"):
        raise ApiError(400, f"unknown action {action!r}")
    board.cron(who, name, action[5:], queue)
    return f"Cron entry {name}: {action[5:]} done"


def _bulk(board: Dashboard, who: str, action: str, queue: str | None, ids: list[str]) -> str:
    """Selected jobs of one queue (``queue`` and ids), or ``"queue:id"`` refs of any."""
    if not ids:
        raise ApiError(400, "select at least one job")
    by_queue: dict[str, list[str]] = {}
    for item in ids:
        where, sep, job_id = item.partition(":")
        if sep:
            by_queue.setdefault(where, []).append(job_id)
        elif queue:
            by_queue.setdefault(queue, []).append(item)
        else:
            raise ApiError(400, "no queue given")
    verb = action.split("-")[0]
    done, errors = 0, []
    for where, group in by_queue.items():
        call: Callable[[str, str, list[str]], dict[str, Any]] = {
            "requeue": board.requeue_failed, "delete": board.delete_many,
            "cancel": board.cancel_many}[verb]
        result = call(who, where, group)
        done += int(result.get("requeued", result.get("deleted", result.get("canceled", 0))))
        errors += result["errors"]
    text = f"{verb}: {done} job(s)"
    if errors:
        raise ApiError(409, text + "; " + "; ".join(errors[:5]))
    return text
