"""A stand-in for an ML model module (issue 34, models loaded once): importing it builds
``FW_TEST_MODEL_MIB`` MiB of weights (written, so resident) and appends the importing
process's pid to the file ``FW_TEST_MODEL_LOG``; ``infer`` reads the weights in a horse."""

from __future__ import annotations

import os
import time

import redis

SIZE_MIB = int(os.environ.get("FW_TEST_MODEL_MIB", "64"))
WEIGHTS = bytearray(b"\x01") * (SIZE_MIB << 20)

_LOG = os.environ.get("FW_TEST_MODEL_LOG")
if _LOG:
    with open(_LOG, "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")


def infer(url: str, key: str, timeout: float = 60.0) -> list[int]:
    """Arrive at ``key``, then wait until ``key:go`` is set (the test measured): the
    horse's pid and one weight (the model is used, not just held)."""
    r = redis.Redis.from_url(url)
    r.rpush(key, os.getpid())
    deadline = time.monotonic() + timeout
    while not r.exists(f"{key}:go") and time.monotonic() < deadline:
        time.sleep(0.05)
    return [os.getpid(), WEIGHTS[len(WEIGHTS) // 2]]
