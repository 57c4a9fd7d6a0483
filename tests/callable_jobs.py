"""Callables that are not functions, in a module on the tests' allow-list (``tests``):
issue 30 item 5. Only the functions (and the staticmethod) may run by default."""

from __future__ import annotations

import subprocess

from fusionworker import job


class Shell(subprocess.Popen):   # type: ignore[type-arg]
    """Constructed with the job's arguments, it would run them as a command."""


class Maker:
    @staticmethod
    def plain(x: int) -> int:
        return x + 1

    @classmethod
    def create(cls, x: int) -> int:
        return x * 2

    def method(self, x: int) -> int:
        return x * 3


maker = Maker()


class Callable:
    def __call__(self, x: int) -> int:
        return x * 4


callable_object = Callable()


@job(queue="default")
def takes_self(self: str, other: int = 0) -> dict[str, object]:
    """A job whose own parameter is named ``self``."""
    return {"self": self, "other": other}


def plain_self(self: str) -> str:
    return f"got {self}"
