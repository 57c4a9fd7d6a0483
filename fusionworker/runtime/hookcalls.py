"""Running the middleware's hooks: each one guarded, the worker as their context."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..core.hooks import Middleware, WorkerContext
from ..core.job import Job

log = logging.getLogger(__name__)


class Once:
    """Run ``fn`` the first time this is called, never again (the after_claim hooks of
    a launch: while it forks, or after it)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn: Callable[[], Any] | None = fn

    def __call__(self) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn()


class HookCalls:
    """Calls a hook on every middleware in order, with ``ctx`` (the worker) first; the
    first non-None answer wins. A hook that raises is logged and skipped: it never
    ends the worker loop (invariant 5).

    A middleware whose hook is :class:`Middleware`'s own (a no-op that answers None),
    on its class and not set on the instance, is not called: a job's hooks cost the
    middleware that do something only. Which those are is found per hook at its first
    call, and again once ``middleware`` (the worker's list, which may grow) changed."""

    def __init__(self, ctx: WorkerContext, middleware: Sequence[Middleware]) -> None:
        self.ctx = ctx
        self.middleware = middleware
        self._seen: list[Middleware] = []
        self._acting: dict[str, list[Middleware]] = {}

    def _acting_on(self, hook: str) -> list[Middleware]:
        """The middleware whose ``hook`` may do something, in order."""
        if self._seen != self.middleware:
            self._seen, self._acting = list(self.middleware), {}
        acting = self._acting.get(hook)
        if acting is None:
            noop = getattr(Middleware, hook, None)
            acting = self._acting[hook] = [
                mw for mw in self._seen
                if noop is None or getattr(type(mw), hook, None) is not noop
                or hook in getattr(mw, "__dict__", ())]
        return acting

    def __call__(self, hook: str, *args: Any) -> Any:
        answer = None
        for mw in self._acting_on(hook):
            try:
                value = getattr(mw, hook)(self.ctx, *args)
            except Exception:
                log.exception("middleware %s.%s failed", type(mw).__name__, hook)
                continue
            if answer is None and value is not None:
                answer = value
        return answer

    def describe(self) -> dict[str, Any]:
        """Every middleware's fields for the heartbeat hash (guarded like every hook)."""
        fields: dict[str, Any] = {}
        for mw in self.middleware:
            try:
                fields.update(mw.describe())
            except Exception:
                log.exception("middleware %s.describe failed", type(mw).__name__)
        return fields


class StopAtLastClaim(Middleware):
    """``work(max_jobs=N)``: once the claimer has claimed its N (``claimer.left``, the
    jobs it may still claim, down to 0), the worker stops warm."""

    def __init__(self, claimer: Any) -> None:
        self.claimer = claimer

    def after_claim(self, worker: WorkerContext, job: Job[Any]) -> None:
        if self.claimer.left is not None and self.claimer.left <= 0:
            worker.request_stop("warm")
