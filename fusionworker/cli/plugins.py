"""``worker --middleware MODULE:NAME`` (and ``FUSIONWORKER_MIDDLEWARE``): your own hooks
on the command line's worker, as a ``Worker(middleware=[...])`` gets them in Python.

What RQ's ``rq worker --exception-handler path.to.handler`` and Celery's signals
connected in the tasks module do there: code the operator names runs in the worker
process, after the built-in duties (``fusionworker.middleware``). Only what the command
line or the worker's own environment names is imported (configuration, never Redis);
a name that is not a ``Middleware`` stops the start in one line.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence

import click

from ..core.hooks import Middleware

#: the worker command's variable (the environment or the -c file): a comma list
ENV = "FUSIONWORKER_MIDDLEWARE"


def middleware_refs(given: Sequence[str], from_file: str | None = None) -> tuple[str, ...]:
    """The references to load: FUSIONWORKER_MIDDLEWARE (the environment, else the -c
    file's ``from_file``), then ``--middleware``; each once, in order."""
    listed = os.environ.get(ENV, from_file or "")
    refs = [r.strip() for r in listed.split(",") if r.strip()]
    return tuple(dict.fromkeys([*refs, *given]))


def load_middleware(refs: Sequence[str]) -> list[Middleware]:
    """Each ``MODULE:NAME`` (a dotted NAME too): a ``Middleware`` subclass (made with no
    arguments) or instance. ``click.BadParameter`` naming the reference otherwise."""
    out: list[Middleware] = []
    for ref in refs:
        module, sep, attr = ref.partition(":")
        if not sep or not module or not attr:
            raise click.BadParameter(f"{ref!r}: give MODULE:NAME, a Middleware class or "
                                     "instance", param_hint="--middleware")
        try:
            obj: object = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, type) and issubclass(obj, Middleware):
                obj = obj()
        except Exception as exc:  # noqa: BLE001 - any failure of the user's code: one line
            raise click.BadParameter(f"{ref!r}: {type(exc).__name__}: {exc}",
                                     param_hint="--middleware") from None
        if not isinstance(obj, Middleware):
            raise click.BadParameter(
                f"{ref!r} is not a Middleware but {type(obj).__name__!r} (give a subclass of "
                "fusionworker.core.hooks.Middleware, or an instance of one)", param_hint="--middleware")
        out.append(obj)
    return out
