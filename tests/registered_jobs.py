"""Job functions registered with ``@job``, in a module that is NOT on the tests' allow-list
when a test runs the worker with ``FUSIONWORKER_ALLOWED_MODULES=""`` and
``FUSIONWORKER_IMPORTS=tests.registered_jobs``."""

from __future__ import annotations

import os

from fusionworker import job, register


@job(queue="reg", max_retries=0, timeout=20)
def shout(text: str) -> str:
    return text.upper()


def plain(text: str) -> str:
    return text


def not_registered(text: str) -> str:
    return text


plain_handle = register(plain, queue="reg")


def touch(path: str) -> str:   # not registered: a worker must refuse it here
    open(path, "w").close()
    return path


class Greeter:
    """``tests.registered_jobs:Greeter.hello`` is defined here: allowed by the allow-list."""

    @staticmethod
    def hello(name: str) -> str:
        return f"hello {name}"


_ = os  # imported module: ``tests.registered_jobs:os.system`` must not escape
