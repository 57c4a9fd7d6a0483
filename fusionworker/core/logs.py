"""Log set-up: the seed's readable lines on a terminal, JSON lines for machines."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        job_id = getattr(record, "job_id", None)   # a job's own line (runtime/horse/joblog.py)
        if job_id:
            doc["job_id"] = job_id
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc)


#: in a text log line, every control character but tab as ``\xNN``: text a job wrote
#: (its error message) neither drives the terminal that shows the log nor forges a line
_IN_LINE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0)) if c != 0x09}
#: in lines of their own (a traceback, the CLI's output: cli/common.py), newlines stay
IN_BLOCK = {c: text for c, text in _IN_LINE.items() if c != 0x0A}


class TextFormatter(logging.Formatter):
    """The readable line: ``12:00:01 WARNING message``; the message on one line, its
    traceback below it, control characters of either shown, not obeyed."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)-7s %(message)s",
                 defaults: dict[str, Any] | None = None) -> None:
        super().__init__(fmt, datefmt="%H:%M:%S", defaults=defaults)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        # a printable message (nearly all: a job's lines, at INFO) holds none of _IN_LINE's
        # characters; one C pass says so, where translate() looks up each character (two
        # lines a job at INFO: about a fifth of the cost of formatting each)
        if not record.message.isprintable():
            record.message = record.message.translate(_IN_LINE)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return super().formatException(ei).translate(IN_BLOCK)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Configure the ``fusionworker`` loggers (idempotent)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger("fusionworker")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    root.propagate = False


def has_handler(logger: logging.Logger) -> bool:
    """A handler of ``logger`` or of an ancestor it propagates to would take its
    records (``logging.lastResort`` does not count: it shows warnings only)."""
    current: logging.Logger | None = logger
    while current is not None:
        if current.handlers:
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def setup_default_logging(level: str = "INFO", fmt: str = "text") -> bool:
    """:func:`setup_logging`, only when nothing is configured: no handler on the
    ``fusionworker`` logger or its ancestors (what ``rq``'s worker does when it
    starts). A program that configured logging keeps its own. True: configured."""
    if has_handler(logging.getLogger("fusionworker")):
        return False
    setup_logging(level, fmt)
    return True
