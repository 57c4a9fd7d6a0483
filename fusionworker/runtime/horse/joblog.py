"""Where a job's own log lines go when nothing configured logging: the worker's log.

A job writes ``logging.getLogger(__name__).info(...)``. When neither the job's modules
nor anything else gave the root logger a handler, Python sends such a record to
``logging.lastResort``: warnings and errors only, bare, without a time, a level or
the job, in the middle of the worker's JSON lines under ``--log-format json``; the
INFO lines are dropped by the root logger's WARNING level. Celery's worker sets the
root logger up for its tasks; here the fork server does it for its horses, at its
start (before any job module is imported), and only as the last resort:

* ``logging.lastResort`` becomes a handler on stderr in the worker's format, which
  names the job (``job_id``) and the logger; a module that configures logging
  (``basicConfig``, ``dictConfig``, a handler on the root) takes over from it, as it
  would from Python's own last resort;
* the root logger's level becomes the worker's (``--log-level``) while it is still
  Python's default (WARNING, no handler): a level set by the job code wins.
"""

from __future__ import annotations

import logging
import sys

from ...core.logs import JsonFormatter, TextFormatter

#: a job's own line in text: ``12:00:01 INFO    app.tasks [job 3f2a...]: sent``
_TEXT = "%(asctime)s %(levelname)-7s %(name)s [job %(job_id)s]: %(message)s"


class _JobId(logging.Filter):
    """Names the running job in each record (``-`` outside a job)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from ..progress import current_job  # the horse's (its task's, in an async horse)

        ctx = current_job()
        record.job_id = ctx.id if ctx is not None else "-"
        return True


def send_unconfigured_to_worker_log(level: str, fmt: str) -> None:
    """Make the worker's log the last resort of job code's log records (module
    docstring). ``level``, ``fmt``: the worker's ``--log-level`` and ``--log-format``."""
    handler = logging.StreamHandler(sys.stderr)
    # (a job that clears the handler's filters leaves records without job_id: "-")
    handler.setFormatter(JsonFormatter() if fmt == "json"
                         else TextFormatter(_TEXT, defaults={"job_id": "-"}))
    handler.addFilter(_JobId())
    logging.lastResort = handler
    root = logging.getLogger()
    if not root.handlers and root.level == logging.WARNING and level:
        root.setLevel(level.upper())
