"""Registered job functions: ``@job`` / ``register()`` and their typed handles.

The registry is process-wide and filled by code only (importing the module
that defines the function runs the decorator): data in Redis can never add to
it. It is keyed by ``module:qualname``, the reference a job record names.

How a worker knows the registered names: the modules listed in
``FUSIONWORKER_IMPORTS`` (``worker --import app.tasks``) are imported when it
starts, and every function they register may run (plus whatever
``FUSIONWORKER_ALLOWED_MODULES`` admits). A worker for which both are empty refuses
to start (:func:`worker_allowed`). The worker process itself does not import them
(models loaded once, ``runtime/imports.py``): a child imports them and the worker
learns (:func:`learn`) the references they registered there, with their ``@job`` options.
The worker hands the exact references to its horses; a horse imports the
module again (the fork server preloads it after its first job) and checks
that the reference still leads to the registered function
(:func:`fusionworker.functions.resolve`).

Example::

    # app/tasks.py
    from fusionworker import job

    @job(queue="sms", max_retries=3)
    def send(number: str, body: str) -> str:
        ...

    send.enqueue("+1555", body="hi")             # -> Job[str]
    send.options(priority=10).enqueue("+1555", body="urgent")
    send.enqueue_in(60, "+1555", body="later")
    send("+1555", body="now, in this process")   # a plain call
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast, overload

# the table of registered functions lives below the options and the enqueue, which
# read it; these names stay importable from here
from . import catalog
from .catalog import add
from .catalog import learn as learn
from .catalog import learnt as learnt
from .catalog import learnt_options as learnt_options
from .catalog import producer_allowed as producer_allowed
from .catalog import registered as registered
from .config import ConfigError, Settings
from .functions import HOW_TO_ALLOW, func_ref, parse_func_ref
from .queue_port import queue_class

if TYPE_CHECKING:
    from .job import Job
    from .queue import Queue
    from .redis_client import RedisClient


def lookup(ref: str) -> JobFunction[Any, Any] | None:
    """The handle registered under ``ref`` in this process (None: not registered here)."""
    return cast("JobFunction[Any, Any] | None", catalog.lookup(ref))   # add() is given one


P = ParamSpec("P")
R = TypeVar("R")

class JobFunction(Generic[P, R]):
    """A registered job function: call it, or enqueue it with its own arguments.

    ``enqueue``/``enqueue_in``/``enqueue_at`` take exactly the function's
    arguments (none is taken as an option, unlike ``Queue.enqueue``); job
    options go through :meth:`options`.
    """

    def __init__(self, func: Callable[P, R], *, queue: str | Queue = "default",
                 connection: RedisClient | None = None, settings: Settings | None = None,
                 horse_jobs: int | None = None, **options: Any) -> None:
        from .options import decorator_options

        options = decorator_options(options)
        if options.get("priority") is not None:     # at the decorator, not at each enqueue
            from .job import check_priority
            check_priority(options["priority"])
        if horse_jobs is not None and (isinstance(horse_jobs, bool)
                                       or not isinstance(horse_jobs, int) or horse_jobs < 1):
            raise ValueError(f"horse_jobs={horse_jobs!r}: must be a whole number >= 1")
        #: at most this many jobs run in the horse a job of this function runs in (its
        #: first included); the worker's --horse-jobs caps it (design.md, warm horses)
        self.horse_jobs = horse_jobs
        functools.update_wrapper(self, func)  # __module__/__qualname__ are the function's
        self.func = func
        self.ref = func_ref(func)
        parse_func_ref(self.ref)     # private names (_helper) cannot be job functions
        self.queue = queue
        self.connection = connection
        self.settings = settings
        self.default_options = options

    def __repr__(self) -> str:
        return f"<job {self.ref} queue={getattr(self.queue, 'name', self.queue)!r}>"

    #: what the allow-list's walk recognises as a job function (functions.py)
    is_job_handle = True

    # ``self, /``: a job's own keyword argument may be named ``self``
    def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def options(self, *, queue: str | Queue | None = None, connection: RedisClient | None = None,
                settings: Settings | None = None, **options: Any) -> JobFunction[P, R]:
        """A copy with other defaults: ``queue`` and any enqueue option
        (:data:`fusionworker.core.options.NAMES`), RQ's and Celery's names taken as at
        the decorator. Each overrides the decorator's same option, whichever name either
        gave it (``@job(timeout=10)``, then ``.options(time_limit=5)``: 5)."""
        from .options import decorator_options

        return JobFunction(self.func, queue=self.queue if queue is None else queue,
                           connection=connection or self.connection,
                           settings=settings or self.settings, horse_jobs=self.horse_jobs,
                           **{**self.default_options, **decorator_options(options)})

    def _check_kwargs(self, kwargs: dict[str, Any]) -> None:
        """TypeError when a keyword that is an enqueue option (or RQ's, Celery's) is not a
        parameter of the function: an option given to the wrong call would become an
        argument and fail in the worker."""
        from .options import option_like

        names = option_like(kwargs)
        if not names:
            return
        params = inspect.signature(self.func).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        for name in names:
            if name not in params:
                # a keyword that is no option here names its replacement at once
                # (countdown=: enqueue_in), not the options() call that refuses it next
                hint = {"countdown": f"use {self.func.__name__}.enqueue_in(seconds, ...)",
                        "eta": f"use {self.func.__name__}.enqueue_at(when, ...)"}.get(
                    name, f"job options go through "
                          f"{self.func.__name__}.options({name}=...).enqueue(...)")
                raise TypeError(f"{self.ref} has no parameter {name!r}: {hint}")

    def _queue(self) -> Queue:
        queue_type: type[Queue] = queue_class()
        if isinstance(self.queue, queue_type):
            return self.queue
        return queue_type(cast("str", self.queue), self.connection, settings=self.settings)

    def enqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> Job[R]:
        """Enqueue a run with these arguments now."""
        self._check_kwargs(kwargs)
        return self._queue().enqueue_call(self.ref, args=args, kwargs=kwargs,
                                          **self.default_options)

    def delay(self, /, *args: P.args, **kwargs: P.kwargs) -> Job[R]:
        """:meth:`enqueue` under RQ's and Celery's name."""
        return self.enqueue(*args, **kwargs)

    def enqueue_in(self, /, seconds: float | timedelta, *args: P.args,
                   **kwargs: P.kwargs) -> Job[R]:
        """Enqueue a run ``seconds`` (or a ``timedelta``) from now (Redis server clock)."""
        self._check_kwargs(kwargs)
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        return self._queue().enqueue_call(self.ref, args=args, kwargs=kwargs,
                                          _when=("in", seconds), **self.default_options)

    def enqueue_at(self, /, when: datetime, *args: P.args, **kwargs: P.kwargs) -> Job[R]:
        """Enqueue a run at ``when`` (a naive datetime is local time, as RQ's)."""
        self._check_kwargs(kwargs)
        from .enqueue import at

        return self._queue().enqueue_call(self.ref, args=args, kwargs=kwargs,
                                          _when=at(when), **self.default_options)

    def apply_async(self, /, args: Sequence[Any] | None = None,
                    kwargs: dict[str, Any] | None = None, *, countdown: float | None = None,
                    eta: datetime | None = None, **options: Any) -> Job[R]:
        """Celery's call: ``args`` and ``kwargs`` of the run, ``countdown`` seconds or an
        ``eta`` datetime, other keywords as :meth:`options` takes them (Celery's names
        taken or refused there, naming the way); ``task_id=`` is ``job_id=``."""
        _check_apply_async(args, kwargs, countdown, eta)
        if "task_id" in options:             # Celery's name of the job's id, in its call
            if "job_id" in options:
                raise TypeError("apply_async: give task_id= or job_id=, not both")
            options["job_id"] = options.pop("task_id")
        handle = self.options(**options) if options else self
        call_args, call_kwargs = tuple(args or ()), dict(kwargs or {})
        if countdown is not None:
            return handle.enqueue_in(countdown, *call_args, **call_kwargs)
        if eta is not None:
            return handle.enqueue_at(eta, *call_args, **call_kwargs)
        return handle.enqueue(*call_args, **call_kwargs)


def _check_apply_async(args: Any, kwargs: Any, countdown: Any, eta: Any) -> None:
    """``apply_async``'s arguments, each of the one type it takes (a string would be
    its characters as arguments, a bool a countdown): TypeError in one line."""
    if countdown is not None and eta is not None:
        raise TypeError("apply_async: give countdown= or eta=, not both")
    if args is not None and not isinstance(args, (list, tuple)):
        raise TypeError(f"apply_async: args= is a list or tuple, not a {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"apply_async: kwargs= is a dict, not a {type(kwargs).__name__}")
    if countdown is not None and (isinstance(countdown, bool)
                                  or not isinstance(countdown, (int, float))):
        raise TypeError(f"apply_async: countdown= is a number of seconds, not {countdown!r}")
    if eta is not None and not isinstance(eta, datetime):
        raise TypeError(f"apply_async: eta= is a datetime, not {eta!r}")


def register(func: Callable[P, R], *, queue: str | Queue = "default", connection: RedisClient | None = None,
             settings: Settings | None = None, horse_jobs: int | None = None,
             **options: Any) -> JobFunction[P, R]:
    """Register ``func`` (a module-level function) and return its handle.

    Registering is per process: call it at module level of a module the worker
    imports (``--import`` / ``FUSIONWORKER_IMPORTS``); a call made only in a
    producer never reaches the worker.

    ``horse_jobs``: at most this many jobs run in a horse that runs one of this
    function (1: each of its jobs gets a fresh process); ``worker --horse-jobs``
    is the upper bound."""
    handle = JobFunction(func, queue=queue, connection=connection, settings=settings,
                         horse_jobs=horse_jobs, **options)
    add(handle)
    return handle


@overload
def job(func: Callable[P, R], /) -> JobFunction[P, R]: ...
@overload
def job(queue: str | Queue, /, *, connection: RedisClient | None = None,
        settings: Settings | None = None, horse_jobs: int | None = None,
        **options: Any) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...
@overload
def job(*, queue: str | Queue = "default", connection: RedisClient | None = None,
        settings: Settings | None = None, horse_jobs: int | None = None,
        **options: Any) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...


def job(func: Any = None, /, **kwargs: Any) -> Any:
    """Decorator: ``@job`` or ``@job(queue="sms", priority=5, timeout=30, max_retries=3)``;
    ``@job("sms", ...)`` names the queue as RQ's decorator does; ``horse_jobs=N``: see
    :func:`register`."""
    if func is not None and not callable(func):   # RQ's @job("low"): a queue name or Queue
        if "queue" in kwargs:
            raise TypeError("job() got the queue twice: positional and queue=")
        kwargs["queue"] = func
        func = None
    if func is not None:
        return register(func, **kwargs)
    return lambda f: register(f, **kwargs)


def import_configured(settings: Settings) -> None:
    """Import the modules of ``FUSIONWORKER_IMPORTS`` (their ``@job`` functions register).

    Raises :class:`ConfigError` (one line) when one cannot be imported.
    """
    for module in settings.imports:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import error is a configuration error
            raise ConfigError(f"FUSIONWORKER_IMPORTS: cannot import {module!r}: "
                              f"{type(exc).__name__}: {exc}") from None


def worker_allowed(settings: Settings, *, imported: bool = True) -> tuple[str, ...]:
    """Import ``FUSIONWORKER_IMPORTS``; what the worker's jobs may run. ``imported``
    False: they are not imported here (what they register was learnt: :func:`learn`).

    Raises :class:`ConfigError` (one line) when an import fails or nothing may run.
    """
    if imported:
        import_configured(settings)
    allowed = producer_allowed(settings)
    if not allowed:
        raise ConfigError("no job may run (default deny): set FUSIONWORKER_ALLOWED_MODULES to "
                          "your jobs' modules, or FUSIONWORKER_IMPORTS (--import) to modules "
                          "with @fusionworker.job functions")
    return allowed


__all__ = ["HOW_TO_ALLOW", "JobFunction", "job", "register", "registered", "worker_allowed"]
