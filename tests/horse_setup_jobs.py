"""A boot module (``--import``) that sets up each horse with ``os.register_at_fork``:
Celery's ``worker_process_init``, for state a process must not share (a database
engine's pool, a gRPC channel, a random seed). The fork server imports it once; every
horse it forks runs ``_in_horse`` once, before its first job."""

from __future__ import annotations

import os

#: what the fork server holds (``None``: not a horse) and a copy of it in each horse
STATE: dict[str, int | None] = {"horse": None, "setups": 0}


def _in_horse() -> None:
    STATE["horse"] = os.getpid()
    STATE["setups"] = (STATE["setups"] or 0) + 1


os.register_at_fork(after_in_child=_in_horse)


def whoami() -> list[int | None]:
    """[this process, the horse its setup ran in, how many setups this process saw]"""
    return [os.getpid(), STATE["horse"], STATE["setups"]]
