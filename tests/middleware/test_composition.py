"""The worker's built-in duties always run: ``middleware=`` adds hooks to them,
``add_middleware(before=, after=)`` orders one, ``defaults=False`` is the explicit
opt-out (fusionworker/middleware/__init__.py)."""

from __future__ import annotations

import pytest

from fusionworker.core.hooks import Middleware
from fusionworker.core.workflows import DependencyMiddleware
from fusionworker.events import EventsMiddleware, MemorySink
from fusionworker.middleware.callbacks import FailureCallbacks
from fusionworker.middleware.cron import CronScheduler
from fusionworker.middleware.reaper import ReaperMiddleware
from fusionworker.worker import Worker, default_middleware


class Seen(Middleware):
    def __init__(self) -> None:
        self.finished: list[str] = []

    def after_finish(self, worker, job, outcome) -> None:
        self.finished.append(job.id)


def test_a_middleware_of_ones_own_keeps_every_builtin_duty(queue, r, settings, prefix):
    q = queue("wf")
    key = f"{prefix}:order"
    a = q.enqueue("tests.jobs:record", settings.redis_url, key, "a")
    d = q.enqueue("tests.jobs:record", settings.redis_url, key, "d", depends_on=[a])
    seen = Seen()
    w = Worker("wf", r, settings=settings, burst=True, middleware=[seen])
    assert w.work() == 0
    assert r.lrange(key, 0, -1) == ["a", "d"]            # the dependent was released
    assert q.fetch_job(d.id).status == "finished"
    assert seen.finished == [a.id, d.id]                 # and the user's hook ran too
    kinds = [type(mw) for mw in w.middleware]
    assert kinds == [*(type(mw) for mw in default_middleware(settings)), Seen]
    for duty in (ReaperMiddleware, DependencyMiddleware, FailureCallbacks, CronScheduler,
                 EventsMiddleware):
        assert duty in kinds


def test_add_middleware_orders_a_hook_among_the_builtins(r, settings):
    w = Worker("default", r, settings=settings, burst=True)
    first, after_events, last = Seen(), Seen(), Seen()
    w.add_middleware(first, before=ReaperMiddleware)
    w.add_middleware(after_events, after=EventsMiddleware)
    w.add_middleware(last)
    kinds = [type(mw) for mw in w.middleware]
    assert w.middleware.index(first) == kinds.index(ReaperMiddleware) - 1
    assert w.middleware.index(after_events) == kinds.index(EventsMiddleware) + 1
    assert w.middleware[-1] is last
    assert w.hooks.middleware is w.middleware             # the hooks see every addition
    with pytest.raises(ValueError, match="not both"):
        w.add_middleware(Seen(), before=ReaperMiddleware, after=EventsMiddleware)
    with pytest.raises(ValueError, match="no Seen"):
        Worker("default", r, settings=settings, defaults=False).add_middleware(
            Seen(), before=Seen)


def test_ones_own_instance_of_a_builtin_takes_its_place(r, settings):
    mine = EventsMiddleware(MemorySink())
    w = Worker("default", r, settings=settings, middleware=[mine])
    events = [mw for mw in w.middleware if isinstance(mw, EventsMiddleware)]
    assert events == [mine]
    built = [type(mw) for mw in default_middleware(settings)]
    assert [type(mw) for mw in w.middleware] == built       # in the built-in's place


def test_the_default_list_given_again_is_not_doubled(r, settings):
    seen = Seen()
    w = Worker("default", r, settings=settings,
               middleware=[*default_middleware(settings), seen])
    assert [type(mw) for mw in w.middleware] == [
        *(type(mw) for mw in default_middleware(settings)), Seen]


def test_defaults_false_runs_only_the_given_hooks(queue, r, settings):
    q = queue("wf")
    a = q.enqueue("tests.jobs:noop")
    d = q.enqueue("tests.jobs:noop", depends_on=[a])
    seen = Seen()
    w = Worker("wf", r, settings=settings, burst=True, defaults=False, middleware=[seen])
    assert w.middleware == [seen]
    assert w.work() == 0
    assert q.fetch_job(d.id).status == "deferred"     # no dependency release: opted out


def test_hooks_call_only_the_middleware_that_act_in_order_and_see_an_addition():
    """A middleware whose hook is the base class's no-op is not called for it (a job's
    hooks cost only what acts); one that overrides it, on its class or on the instance,
    is, in list order, and a middleware added to the worker's list later is seen."""
    from fusionworker.runtime.hookcalls import HookCalls

    calls: list[str] = []

    class Quiet(Middleware):
        pass

    class Loud(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        def before_claim(self, worker) -> str | None:
            calls.append(self.name)
            return self.name

    quiet, patched = Quiet(), Quiet()
    patched.before_claim = lambda worker: calls.append("patched")   # type: ignore[method-assign]
    chain: list[Middleware] = [quiet, Loud("a"), patched, Loud("b")]
    hooks = HookCalls(object(), chain)   # type: ignore[arg-type]
    assert hooks("before_claim") == "a"                  # the first answer, every one called
    assert calls == ["a", "patched", "b"]
    assert hooks._acting_on("before_claim") == chain[1:]
    assert hooks._acting_on("after_claim") == []          # nobody acts: nothing called
    chain.append(Loud("c"))                               # Worker.add_middleware's list
    calls.clear()
    hooks("before_claim")
    assert calls == ["a", "patched", "b", "c"]
