"""A read-only attribute computed on each access, typed: what ``@property`` is, for
attributes made from a table (a job's ``is_<status>``, a queue's registries).

A subclass says how the value is read (:meth:`Derived.read`); on the class itself the
attribute is the descriptor.
"""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar, overload

Owner = TypeVar("Owner")
T = TypeVar("T")


class Derived(Generic[Owner, T]):
    """The value :meth:`read` gives for the object the attribute is read on."""

    def read(self, obj: Owner) -> T:
        raise NotImplementedError

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: Owner, owner: type[Any] | None = None) -> T: ...

    def __get__(self, obj: Owner | None, owner: type[Any] | None = None) -> T | Self:
        return self if obj is None else self.read(obj)
