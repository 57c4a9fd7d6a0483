"""Middleware: the worker's built-in duties and plugins on the loop's hooks.

The hook points are the :class:`Middleware` base (``core/hooks.py``: the core
layer, so that the events layer and the core's own middleware — dependencies,
Sentinel — implement it without depending on this package). This package holds
the built-ins, :func:`default_middleware` (the list every worker runs, whatever
``Worker(middleware=...)`` adds) and :func:`compose` (how the user's hooks join it).

The worker calls each hook on every middleware *in list order* (one that keeps
the base class's no-op for a hook is skipped for it: nothing to call). Order matters
in three places: for the hooks that answer (``before_claim``, ``on_horse_tick``)
the first non-None answer wins; ``on_start`` of a later middleware sees what an
earlier one set up; ``describe()`` fields are merged in order. Hence the order
of :func:`default_middleware`:

 1. governors (``governor.py``): RAM/swap/GPU throttle and the horse RSS
    ceiling, first, so that their throttle or kill reason is the one acted on;
 2. systemd notify (``notify.py``);
 3. reaper (``reaper.py``): takes back the jobs of dead workers;
 4. failure callbacks (``callbacks.py``);
 5. cron: the schedules declared in code written at start (``schedules.py``), then
    the entries' runs (``cron.py``);
 6. dependencies (``core/workflows.py``);
 7. Sentinel master following (``core/connection.py``), with a
    ``redis+sentinel://`` URL only;
 8. events (``events/``), unless ``FUSIONWORKER_EVENTS=0`` (an
    ``EventsMiddleware(sink)`` given to the worker still writes to its sink): before
    metrics, whose ``on_start`` takes the events middleware's sink;
 9. vitals (``vitals.py``): the worker's memory in its heartbeat hash
    (``describe`` only);
10. Prometheus metrics (``metrics.py``), with a metrics port only;
11. OpenTelemetry (``otel.py``), with ``FUSIONWORKER_OTEL=on`` only.

Between 2 and 7 the order is the order the features were added in; none of them
answers a hook or reads another's state.

These run in every worker: ``Worker(middleware=[mine])`` adds ``mine`` after them
(:func:`compose`), and ``worker.add_middleware(mw, before=Cls)`` (or ``after=``)
puts one elsewhere (:func:`place`). Only ``Worker(defaults=False)`` runs without
them (the suite's tests of the bare loop, benchmarks).

Importing this package imports none of the plugins (they are imported when the
list is built).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.hooks import Middleware

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings

__all__ = ["Middleware", "compose", "default_middleware", "place"]


def default_middleware(settings: Settings) -> list[Middleware]:
    """The built-in middleware every worker runs, in the order documented above."""
    from ..core.connection import FollowSentinelMaster
    from ..core.workflows import DependencyMiddleware
    from ..events.middleware import EventsMiddleware
    from .callbacks import FailureCallbacks
    from .cron import CronScheduler
    from .governor import build_governors
    from .notify import NotifyMiddleware
    from .reaper import ReaperMiddleware
    from .schedules import DeclaredSchedules
    from .vitals import WorkerVitals

    chain: list[Middleware] = [*build_governors(settings), NotifyMiddleware(),
                               ReaperMiddleware(settings), FailureCallbacks(settings),
                               DeclaredSchedules(), CronScheduler(), DependencyMiddleware()]
    if settings.redis_url.startswith("redis+sentinel"):
        chain.append(FollowSentinelMaster())
    if settings.events:      # FUSIONWORKER_EVENTS=0: no event log (one given its sink writes)
        chain.append(EventsMiddleware())
    chain.append(WorkerVitals())
    if settings.metrics_port:   # (prometheus_client, ~10 MiB, only for a worker that serves it)
        from .metrics import MetricsMiddleware

        chain.append(MetricsMiddleware(settings.metrics_port, addr=settings.metrics_bind))
    if settings.otel:
        from .otel import OtelMiddleware

        chain.append(OtelMiddleware(settings))
    return chain


def compose(builtins: Iterable[Middleware], given: Iterable[Middleware]) -> list[Middleware]:
    """The chain a worker runs: ``builtins`` in their order, then ``given`` in its order.

    A given instance of a built-in's class takes that built-in's place (it configures
    the duty, e.g. an ``EventsMiddleware`` with your own sink): so
    ``[*default_middleware(s), mine]`` means what it always meant."""
    given = list(given)
    classes = {type(mw) for mw in given}
    chain: list[Middleware] = []
    for mw in builtins:
        if type(mw) not in classes:
            chain.append(mw)
            continue
        chain += [g for g in given if type(g) is type(mw) and g not in chain]
    return chain + [g for g in given if g not in chain]


def place(chain: list[Middleware], mw: Middleware, *, before: type | None = None,
          after: type | None = None) -> None:
    """Insert ``mw`` into ``chain`` in place: before the first instance of ``before``,
    after the last instance of ``after``, or at the end. ValueError when both are given
    or the class named is not in the chain."""
    if before is not None and after is not None:
        raise ValueError("add_middleware: give before= or after=, not both")
    anchor = before or after
    if anchor is None:
        chain.append(mw)
        return
    at = [i for i, m in enumerate(chain) if isinstance(m, anchor)]
    if not at:
        raise ValueError(f"add_middleware: no {anchor.__name__} in this worker's middleware")
    chain.insert(at[0] if before is not None else at[-1] + 1, mw)
