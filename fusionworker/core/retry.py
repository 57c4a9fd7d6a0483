"""The retry policy a job is given at enqueue: ``retry=RetryPolicy(max=3, interval=[10, 30])``.

RQ spells it ``Retry(max=3, interval=[10, 30])`` with its exception class; that
spelling carries one of these (``Retry(...).policy``). The exception a job raises
to ask for a retry is ``fusionworker.Retry`` (exceptions.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Retry the job up to ``max`` times (at least 1) on any exception it raises and on
    its timeout, as RQ does (``retry_on=`` narrows it). The delay before retry n is
    ``interval[n-1]`` (the last repeats; a number: the same delay each time; None: at
    once), without backoff or jitter; the intervals are checked at enqueue."""

    max: int
    interval: float | list[float] | tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max, bool) or not isinstance(self.max, int) or self.max < 1:
            # RQ refuses Retry(max=0) too: a policy of no retry is no policy
            raise ValueError(f"Retry(max=...) must be a whole number of retries, at least 1, "
                             f"got {self.max!r}")
