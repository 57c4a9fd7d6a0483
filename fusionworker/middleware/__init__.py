"""Middleware: the plugins that hang off the worker loop's hooks.

The hook points are the :class:`Middleware` base (``core/hooks.py``: the core
layer, so that the events layer and the core's own middleware — dependencies,
Sentinel — implement it without depending on this package). This package holds
the plugins and :func:`default_middleware`, the one list every worker runs.

The worker calls each hook on every middleware *in list order*. Order matters
in three places: for the hooks that answer (``before_claim``, ``on_horse_tick``)
the first non-None answer wins; ``on_start`` of a later middleware sees what an
earlier one set up; ``describe()`` fields are merged in order. Hence the order
of :func:`default_middleware`:

 1. governors (``governor.py``): RAM/swap/GPU throttle and the horse RSS
    ceiling, first, so that their throttle or kill reason is the one acted on;
 2. systemd notify (``notify.py``);
 3. reaper (``reaper.py``): takes back the jobs of dead workers;
 4. failure callbacks (``callbacks.py``);
 5. cron (``cron.py``);
 6. dependencies (``core/workflows.py``);
 7. Sentinel master following (``core/connection.py``), with a
    ``redis+sentinel://`` URL only;
 8. events (``events/``): before metrics, whose ``on_start`` takes the events
    middleware's sink;
 9. vitals (``vitals.py``): the worker's memory in its heartbeat hash
    (``describe`` only);
10. Prometheus metrics (``metrics.py``), with a metrics port only;
11. OpenTelemetry (``otel.py``), with ``FUSIONWORKER_OTEL=on`` only.

Between 2 and 7 the order is the order the features were added in; none of them
answers a hook or reads another's state.

Importing this package imports none of the plugins (they are imported when the
list is built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.hooks import Middleware

if TYPE_CHECKING:  # pragma: no cover
    from ..core.config import Settings

__all__ = ["Middleware", "default_middleware"]


def default_middleware(settings: Settings) -> list[Middleware]:
    """The middleware every worker runs, in the order documented above."""
    from ..core.connection import FollowSentinelMaster
    from ..core.workflows import DependencyMiddleware
    from ..events.middleware import EventsMiddleware
    from .callbacks import FailureCallbacks
    from .cron import CronScheduler
    from .governor import build_governors
    from .metrics import MetricsMiddleware
    from .notify import NotifyMiddleware
    from .reaper import ReaperMiddleware
    from .vitals import WorkerVitals

    chain: list[Middleware] = [*build_governors(settings), NotifyMiddleware(),
                               ReaperMiddleware(settings), FailureCallbacks(settings),
                               CronScheduler(), DependencyMiddleware()]
    if settings.redis_url.startswith("redis+sentinel"):
        chain.append(FollowSentinelMaster())
    chain.append(EventsMiddleware())
    chain.append(WorkerVitals())
    if settings.metrics_port:
        chain.append(MetricsMiddleware(settings.metrics_port, addr=settings.metrics_bind))
    if settings.otel:
        from .otel import OtelMiddleware

        chain.append(OtelMiddleware(settings))
    return chain
