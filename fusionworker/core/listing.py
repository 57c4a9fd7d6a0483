"""``q.job_ids`` and ``q.jobs``: a method here, a property in RQ, and both work.

Called, a :class:`Listing` is the queue's method: ``q.job_ids("failed", 50)``,
``q.jobs("scheduled")`` (a registry and a limit, default the best 100 queued). Read as
a sequence, without a call, it is RQ's property: every queued job of the queue in the
order they will run (``len(q.jobs)``, ``for job_id in q.job_ids``, ``job.id in
q.job_ids``, ``q.job_ids == [a.id, b.id]``), read from Redis once, at its first use,
so a listing kept in a variable is a snapshot, as RQ's list is. A call reads Redis
again each time and never reads the whole queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, overload

from .job import JobStatus

T = TypeVar("T")


class Listing(Sequence[T]):
    """A queue's method that reads as RQ's list property (module docstring)."""

    __slots__ = ("_call", "_every", "_items")

    def __init__(self, call: Callable[[JobStatus | str, int], list[T]],
                 every: Callable[[], list[T]]) -> None:
        self._call = call
        self._every = every
        self._items: list[T] | None = None

    def __call__(self, status: JobStatus | str = JobStatus.QUEUED, limit: int = 100) -> list[T]:
        """Those of registry ``status``: queued (best first), scheduled (soonest first),
        started, deferred, held (oldest first), finished/failed/canceled/stopped (newest
        first), at most ``limit``."""
        return self._call(status, limit)

    def _list(self) -> list[T]:
        if self._items is None:
            self._items = self._every()
        return self._items

    def __len__(self) -> int:
        return len(self._list())

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        return self._list()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._list())

    def __contains__(self, item: object) -> bool:
        return item in self._list()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Listing):
            other = list(other)
        return self._list() == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a list's: unhashable

    def __repr__(self) -> str:
        return repr(self._list())


__all__ = ["Listing"]
