"""fusionworker: a fork-per-job worker daemon on Redis priority queues."""

from __future__ import annotations

__version__ = "0.1.0"

from .batch import Batch  # noqa: E402
from .codec import UnsupportedType  # noqa: E402
from .exceptions import (  # noqa: E402
    FunctionNotAllowed,
    JobCanceled,
    JobFailed,
    JobTimeoutError,
    JobWaitTimeout,
    NoSuchJob,
    Retry,
)
from .job import Job  # noqa: E402
from .queue import Queue  # noqa: E402

# after ``.job`` (the module): ``fusionworker.job`` is the decorator from here on;
# ``from fusionworker.job import Job`` still finds the module
from .registry import JobFunction, job, register  # noqa: E402
from .worker import Worker  # noqa: E402

__all__ = [
    "Batch", "FunctionNotAllowed", "Job", "JobCanceled", "JobFailed", "JobFunction",
    "JobTimeoutError", "JobWaitTimeout", "NoSuchJob", "Queue", "Retry", "UnsupportedType", "Worker", "__version__",
    "job", "register",
]
