"""A job module that imports only ``current_job`` from the package (see test_progress.py)."""

from __future__ import annotations

import sys

from fusionworker import current_job


def lean():
    current_job().set_progress(1.0)
    return {"package_loaded": "fusionworker.core.queue" in sys.modules,
            "redis_loaded": "redis" in sys.modules}
