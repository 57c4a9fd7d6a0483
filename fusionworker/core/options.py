"""Job options: the one list of what an enqueue takes besides the job's own arguments.

:class:`JobOptions` names every option once. ``Queue.enqueue`` takes them out
of its keyword arguments (:func:`split`), ``Queue.enqueue_call`` /
``prepare_call`` take them as keywords, a ``@job`` handle keeps them as its
defaults, the CLI's ``enqueue --from-file`` accepts them in a line's
``options``: all of them read :data:`NAMES`. They are validated in one place,
:meth:`JobOptions.checked`, before anything is written.

An option left unset (``None``) takes, in order: the value given to
``@job(...)`` / ``register(...)`` for that function (however it is enqueued:
handle, ``"module:name"`` string, CLI, batch callback), then the settings'
default (``FUSIONWORKER_JOB_TIMEOUT``, ``FUSIONWORKER_MAX_RETRIES``).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar, cast

from .catalog import learnt_options, lookup
from .config import ConfigError, check_value
from .job import check_priority, new_job_id
from .keys import check_addressable
from .retry import RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from .batch import Batch


class JobOptions(NamedTuple):
    """Every enqueue option; ``None`` = not given (a default applies).

    A named tuple: made per job by a bulk producer, it costs a fraction of a
    frozen dataclass."""

    #: -1023..1023, higher runs first (default 0)
    priority: int | None = None
    #: seconds a run may take before it is killed (default FUSIONWORKER_JOB_TIMEOUT); this
    #: and the three ttls below take RQ's duration strings too ("30s", "10m", "1h", "2d")
    timeout: float | str | None = None
    #: retries after the first attempt (default FUSIONWORKER_MAX_RETRIES)
    max_retries: int | None = None
    #: first retry delay in seconds (default: the worker's backoff)
    retry_delay: float | None = None
    #: the job's id (a live job with that id is not enqueued again); default: random
    job_id: str | None = None
    #: a live job with this key is not enqueued again
    unique_key: str | None = None
    #: jobs of one group run one at a time, in order
    group: str | None = None
    #: URL POSTed when the job fails for good
    on_failure_url: str | None = None
    #: job(s) to wait for (``Job``, id, ``"queue:id"``, or a list of them)
    depends_on: Any = None
    #: run even when a dependency failed (default False)
    allow_dependency_failure: bool | None = None
    #: the ``Batch`` the job joins
    batch: Batch | None = None
    #: what the job is, in words (``Job.description``; default: the call as text)
    description: str | None = None
    #: the job's first ``current_job().meta``: a dict of tagged-JSON values
    meta: dict[str, Any] | None = None
    #: seconds a finished job (its result) is kept: 0 = deleted at once, -1 = never
    #: expires (default FUSIONWORKER_RESULT_TTL)
    result_ttl: int | str | None = None
    #: seconds a failed job is kept: -1 = never expires (default FUSIONWORKER_FAILED_TTL)
    failure_ttl: int | str | None = None
    #: seconds the job may wait to be started (from enqueue, or the end of its delay);
    #: a worker that takes it later cancels it, reason ``expired`` (default: no limit)
    ttl: float | str | None = None
    #: True: the job runs before every other pending job of its priority (default False)
    at_front: bool | None = None
    #: a ``RetryPolicy(max=3, interval=[10, 30, 60])``, or RQ's spelling ``Retry(max=3,
    #: interval=[10, 30, 60])``: ``max`` is ``max_retries``,
    #: the delay before retry n is ``interval[n-1]`` (the last repeats); checked, the
    #: intervals as a tuple of seconds (default: none, the backoff)
    retry: Any = None
    #: function (allowed, ``"module:function"`` or a module-level function) enqueued on
    #: the job's queue with the job's id as its one argument once the job finished /
    #: failed for good; exactly once (the outbox of workflows.py)
    on_success: Any = None
    on_failure: Any = None
    #: the exceptions retried (classes, or ``"module.Class"`` names; subclasses match)
    #: instead of the worker's FUSIONWORKER_RETRYABLE; Celery's ``autoretry_for``.
    #: ``retry=Retry(...)`` without it retries on any exception, as RQ does. Checked:
    #: a tuple of qualified names, ``("*",)`` for any (default: the worker's list)
    retry_on: Any = None
    #: the same once the job was stopped (``job stop``, ``Job.stop()``): RQ's on_stopped
    on_stopped: Any = None

    def over(self, defaults: Mapping[str, Any]) -> JobOptions:
        """These options, each unset one taken from ``defaults`` (a name -> value map)."""
        if not defaults:
            return self
        # one way of saying the retries wins whole: retry=Retry(...) given here takes
        # no max_retries/retry_delay from the defaults, max_retries= no retry=
        skip = (("max_retries", "retry_delay") if self.retry is not None
                else ("retry",) if self.max_retries is not None else ())
        return JobOptions(*[value if value is not None or name in skip else defaults.get(name)
                            for name, value in zip(NAMES, self)])

    def given(self) -> dict[str, Any]:
        """The options that are set, as keywords."""
        return {name: value for name, value in zip(NAMES, self) if value is not None}

    def checked(self, default_timeout: float, default_retries: int) -> JobOptions:
        """Validated, with every default filled in but ``retry_delay``, ``unique_key``,
        ``group``, ``on_failure_url``, ``depends_on`` and ``batch`` (None = none).

        ``ValueError``/``TypeError`` (one line, naming the option) on a bad value.
        The messages are made only on failure (a bulk producer checks every job).
        """
        for value in self:     # by identity: no option's own __eq__ is called
            if value is not None:
                break
        else:        # none given (a plain job): the defaults, nothing to check
            return _make((0, default_timeout, default_retries, None, new_job_id(),
                          None, None, None, None, False, *_UNSET_TAIL))
        # config.check_value holds the ranges: NaN, infinity, negatives are refused here,
        # before anything is written (a NaN timeout would make every run fail obscurely)
        if any(isinstance(v, str) for v in (self.timeout, self.result_ttl, self.failure_ttl,
                                            self.ttl)):
            return self._replace(**_durations(self)).checked(default_timeout, default_retries)
        given_retries, intervals, retry_on = _retry_of(self)
        timeout, retries, delay = _numbers(self, given_retries, default_timeout, default_retries)
        job_id = _check_job_id(self.job_id)
        _check_labels(self.group, self.unique_key)
        if self.batch is not None:
            _check_batch(self.batch)
        if self.description is not None or self.meta is not None:
            _check_words(self.description, self.meta)
        if self.result_ttl is not None or self.failure_ttl is not None:
            _check_ttls(self.result_ttl, self.failure_ttl)
        ttl = self.ttl
        if ttl is not None:
            ttl = _check_wait_ttl(ttl)
        return _make((
            0 if self.priority is None else check_priority(self.priority), timeout, retries,
            delay, job_id, self.unique_key, self.group, self.on_failure_url, self.depends_on,
            bool(self.allow_dependency_failure), self.batch, self.description, self.meta,
            self.result_ttl, self.failure_ttl, ttl, _check_front(self.at_front), intervals,
            self.on_success, self.on_failure, retry_on, self.on_stopped))


def _retry_of(options: JobOptions) -> tuple[Any, Any, Any]:
    """``(max_retries, intervals, retry_on)`` as given, or as a ``retry=`` policy sets them
    (RQ's ``Retry`` without ``retry_on`` retries any exception)."""
    given_retries, intervals = options.max_retries, None
    retry_on = None if options.retry_on is None else retry_names(options.retry_on)
    if options.retry is not None:
        given_retries, intervals = _retry_policy(options.retry, given_retries)
        if retry_on is None:
            retry_on = ANY_ERROR
    return given_retries, intervals, retry_on


def _numbers(options: JobOptions, given_retries: Any, default_timeout: float,
             default_retries: int) -> tuple[float, int, float | None]:
    """``(timeout, max_retries, retry_delay)`` checked against the settings' ranges,
    defaults filled in (``retry_delay`` stays None when not given)."""
    try:
        if options.timeout is not None and float(options.timeout) == -1:
            raise ConfigError("timeout=-1 (RQ's job_timeout=-1, no limit): every job runs "
                              "under a hard time limit here; give the longest it may need "
                              "(seconds, or a duration such as '24h')")
        timeout = (default_timeout if options.timeout is None
                   else check_value("job_timeout", float(options.timeout), "timeout"))
        retries = (default_retries if given_retries is None
                   else check_value("max_retries", int(given_retries), "max_retries"))
        delay = options.retry_delay
        if delay is not None:
            delay = check_value("retry_delay", seconds_of(delay, "retry_delay"),
                                "retry_delay")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise exc.__class__(_not_a_number(options)) from None
    return timeout, retries, delay


def _check_job_id(job_id: Any) -> str:
    """``job_id``, or a new one when None; ValueError for one that cannot be shown,
    typed and logged as given."""
    if job_id is None:
        return new_job_id()
    if job_id.__class__ is not str or not job_id or len(job_id) > 200:
        raise ValueError(f"job_id must be a non-empty string of at most 200 characters, "
                         f"got {job_id!r}")
    if not job_id.isprintable() or " " in job_id:
        # a space, newline or control character: ids are shown, typed and logged
        raise ValueError(f"job_id must not contain whitespace or control characters, "
                         f"got {job_id!r}")
    check_addressable("job_id", job_id)
    return str(job_id)


def _check_labels(group: Any, unique_key: Any) -> None:
    """``group`` and ``unique_key``: None, or printable text that is not blank."""
    for what, text in (("group", group), ("unique_key", unique_key)):
        if text is not None and (text.__class__ is not str or not text.strip()
                                 or not text.isprintable()):
            raise ValueError(f"{what} must be a non-empty string without control "
                             f"characters, got {text!r} (no {what}: leave it out)")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def takes_options_of(source: Callable[_P, Any]) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """The decorated method takes ``source``'s parameters (one options signature, which
    mypy, editors and ``inspect.signature`` show for both) and returns what it says."""
    def take(method: Callable[..., _R]) -> Callable[_P, _R]:
        returns = inspect.signature(method).return_annotation
        method.__signature__ = inspect.signature(source).replace(  # type: ignore[attr-defined]
            return_annotation=returns)
        return cast("Callable[_P, _R]", method)
    return take


#: every option's name, in :class:`JobOptions`'s order: the one list
NAMES: tuple[str, ...] = JobOptions._fields
#: the same names as a set, to tell options from a job's keyword arguments
OPTIONS: frozenset[str] = frozenset(NAMES)
_make = JobOptions._make
#: what :meth:`JobOptions.checked` gives from ``batch`` on when no option is given
_UNSET_TAIL = (None,) * (len(NAMES) - 10)


#: RQ's duration strings: "30s", "10m", "1h", "2d"
_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _durations(options: JobOptions) -> dict[str, Any]:
    """``timeout``/``result_ttl``/``failure_ttl``/``ttl`` given as RQ's duration strings
    ("1h", "10m", "30s", "2d") as whole seconds; ValueError naming the option for a
    string that is neither that nor a number."""
    out: dict[str, Any] = {}
    for name in ("timeout", "result_ttl", "failure_ttl", "ttl"):
        value = getattr(options, name)
        if not isinstance(value, str):
            continue
        found = _DURATION.fullmatch(value.strip())
        if found is not None:
            out[name] = int(found.group(1)) * _UNIT[found.group(2)]
            continue
        try:
            out[name] = float(value) if name in ("timeout", "ttl") else int(value)
        except ValueError:
            raise ValueError(f"{name} must be seconds or a duration such as '30s', '10m', "
                             f"'1h', '2d', got {value!r}") from None
    return out


def seconds_of(value: Any, what: str) -> float:
    """Seconds from a number or a :class:`~datetime.timedelta` (RQ's and Celery's
    habit for a delay); TypeError naming ``what`` for anything else."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    try:
        return float(value)        # a numeric string, as before
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a number of seconds or a timedelta, "
                        f"got {value!r}") from None


def _not_a_number(options: JobOptions) -> str:
    """The message of an option that float()/int() refused (``timeout="1h"``)."""
    for name in ("timeout", "max_retries", "retry_delay"):
        value = getattr(options, name)
        try:
            if value is not None:
                float(value) if name != "max_retries" else int(value)
        except (TypeError, ValueError):
            return f"{name} must be a number of seconds (or retries), got {value!r}"
    return "timeout, max_retries and retry_delay must be numbers"


def _check_words(description: Any, meta: Any) -> None:
    if description is not None and description.__class__ is not str:
        raise TypeError(f"description must be a string of at most 2000 characters, "
                        f"got {type(description).__name__}")
    if description is not None and len(description) > 2000:   # a value too long: ValueError
        raise ValueError(f"description must be a string of at most 2000 characters, "
                         f"got {len(description)}")
    if meta is not None and (not isinstance(meta, dict)
                             or not all(isinstance(k, str) for k in meta)):
        raise TypeError(f"meta must be a dict with string keys, got {type(meta).__name__}")


def _check_ttls(result_ttl: Any, failure_ttl: Any) -> None:
    """``result_ttl``: -1 (never expires), 0 (deleted at once) or seconds; ``failure_ttl``:
    -1 or seconds (a failed job is kept to be looked at: 0 is refused)."""
    for name, value, least in (("result_ttl", result_ttl, -1), ("failure_ttl", failure_ttl, -1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number of seconds, -1 for never, "
                             f"got {value!r}")
    if failure_ttl == 0:
        raise ValueError("failure_ttl=0 would drop a failed job unseen: give seconds, "
                         "or -1 to keep it until deleted")


def _check_wait_ttl(ttl: Any) -> float:
    """``ttl``: a positive, finite number of seconds (-1, RQ's "no limit", is None)."""
    if (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl)
            or (ttl <= 0 and ttl != -1)):
        raise ValueError(f"ttl must be a positive number of seconds (or -1: no limit), "
                         f"got {ttl!r}")
    return float(ttl)


def _not_rqs(retry: Any) -> None:
    """RQ's ``Retry`` (an import left behind) is refused naming the one to use."""
    if type(retry).__module__.partition(".")[0] == "rq":
        raise TypeError(f"retry={retry!r} is RQ's Retry: use fusionworker's, with the same "
                        f"arguments (from fusionworker import Retry)")


def _retry_policy(retry: Any, max_retries: Any) -> tuple[int | None, tuple[float, ...] | None]:
    """``retry=``: a :class:`RetryPolicy`, RQ's ``Retry(max=, interval=)`` (the policy
    it carries) or its JSON form, a ``{"max", "interval"}`` object; as (max_retries,
    intervals)."""
    from ..exceptions import Retry

    if isinstance(retry, Mapping) and set(retry) <= {"max", "interval"}:
        retry = Retry(max=retry.get("max"), interval=retry.get("interval"))  # a JSON line
    policy = retry.policy if isinstance(retry, Retry) else retry
    _not_rqs(retry)
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"retry must be Retry(max=N, interval=seconds or [seconds, ...]) "
                        f"(in JSON: {{\"max\": N, \"interval\": [...]}}), got {retry!r}")
    if max_retries is not None:
        raise TypeError("give max_retries= or retry=Retry(max=...), not both")
    interval = policy.interval
    if interval is None:      # RQ: no interval, the retry is at once
        return policy.max, (0.0,)
    values = list(interval) if isinstance(interval, (list, tuple)) else [interval]
    if not 0 < len(values) <= 100 or not all(
            not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            and 0 <= v <= 31_536_000 for v in values):
        raise ValueError(f"Retry interval must be seconds (0 to a year) or a list of 1 to 100 "
                         f"of them, got {interval!r}")
    return policy.max, tuple(float(v) for v in values)


#: ``retry_on`` meaning every exception (and the job's timeout): RQ's ``Retry`` policy
ANY_ERROR: tuple[str, ...] = ("*",)


def retry_names(retry_on: Any) -> tuple[str, ...]:
    """``retry_on=`` as qualified class names: an exception class, a ``"module.Class"``
    name (a bare name is a builtin's: ``"ValueError"``), ``"*"`` for any, or a list or
    tuple of them. TypeError (one line) on anything else."""
    items = list(retry_on) if isinstance(retry_on, (list, tuple, set, frozenset)) else [retry_on]
    names: list[str] = []
    for item in items:
        if isinstance(item, type) and issubclass(item, BaseException):
            names.append(f"{item.__module__}.{item.__qualname__}")
        elif isinstance(item, str) and item == "*":
            names.append(item)
        elif (isinstance(item, str) and 0 < len(item) <= 200
              and all(part.isidentifier() for part in item.split("."))):
            names.append(item if "." in item else f"builtins.{item}")
        else:
            raise TypeError(f"retry_on must be exception classes or \"module.Class\" names "
                            f"(or \"*\" for any), got {item!r}")
    if not names:
        raise TypeError("retry_on must name at least one exception class (or \"*\")")
    return tuple(dict.fromkeys(names))


def _check_front(at_front: Any) -> bool | None:
    if at_front is None or at_front is False:
        return None
    if at_front is not True:
        raise TypeError(f"at_front must be True or False, got {at_front!r}")
    return True


def _check_batch(batch: Any) -> None:
    from .batch import Batch

    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be a Batch, got {type(batch).__name__}")
    if batch.sealed:
        raise RuntimeError(f"batch {batch.id} is sealed: no job can be added")


#: keywords of RQ's or Celery's enqueue calls that mean the same here: name -> option
ALIASES: dict[str, str] = {
    "job_timeout": "timeout",     # RQ: seconds before the run is killed
    "time_limit": "timeout",      # Celery: the hard limit, the run is killed
    "autoretry_for": "retry_on",  # Celery: the exceptions retried
    "default_retry_delay": "retry_delay",  # Celery: seconds before a retry
}

#: Celery's task options that say what always happens here: taken when True (a no-op),
#: refused otherwise with the reason
ALWAYS: dict[str, str] = {
    "acks_late": "a started job is always under a lease its worker renews; when the "
                 "worker dies the reaper requeues it",
    "reject_on_worker_lost": "a job whose worker died is always requeued by the reaper "
                             "(its attempt counted) or failed as abandoned",
}

#: keywords of RQ's or Celery's enqueue calls that are no option here: name -> what to
#: use instead. ``Queue.enqueue`` refuses them (they would become the job's arguments).
FOREIGN: dict[str, str] = {
    "expires": "use ttl= (seconds the job may wait to be started)",
    "retry_policy": "use retry=Retry(max=, interval=[...]), or max_retries= and retry_delay=",
    "link": "use on_success= (a function enqueued as func(job_id) once the job "
            "finished), depends_on= on the next job, or a Batch(on_success=...)",
    "link_error": "use on_failure= (a function enqueued as func(job_id) after a final "
                  "failure), on_failure_url= (a webhook) or a Batch(on_failure=...)",
    "countdown": "use q.enqueue_in(seconds, func, ...)",
    "eta": "use q.enqueue_at(datetime, func, ...)",
    "task_id": "use job_id= (a live job with that id is not enqueued again)",
    "queue": "the queue is the Queue's: Queue(name).enqueue(...), or @job(queue=...)",
    "routing_key": "the queue is the Queue's: Queue(name).enqueue(...)",
    "exchange": "the queue is the Queue's: Queue(name).enqueue(...)",
    "soft_time_limit": "timeout= raises JobTimeoutError in the job first, and kills it "
                       "FUSIONWORKER_KILL_GRACE seconds later: give timeout=<soft limit>",
    "bind": "a job reads itself with fusionworker.current_job() (.id, .attempt, .meta): "
            "drop bind=True and the self parameter",
    "rate_limit": "rate limits are per queue: fusionworker set-rate-limit QUEUE 10/s",
    "ignore_result": "use result_ttl=0 (the finished job is not kept)",
    "serializer": "arguments are always tagged JSON (no pickle)",
    "compression": "arguments are always tagged JSON (no pickle)",
    "headers": "no headers; pass the data as arguments",
    "shadow": "the job is named by its function",
    "pipeline": "use q.prepare(...) per job, then q.enqueue_many(prepared)",
    "connection": "the connection is the Queue's: Queue(name, connection)",
    "group_id": "use a Batch (batch=) to follow a set of jobs",
    "repeat": "use a cron entry (fusionworker cron add)",
    "unique": "use job_id= or unique_key=: a live job with it is returned, not enqueued "
              "again (job.deduplicated)",
    "args": "use q.enqueue_call(func, args=[...], kwargs={...}); for enqueue_many, "
            "q.prepare_call(func, args=[...], kwargs={...})",
    "kwargs": "use q.enqueue_call(func, args=[...], kwargs={...}); for enqueue_many, "
              "q.prepare_call(func, args=[...], kwargs={...})",
}

#: every keyword ``Queue.enqueue`` takes for itself or refuses
_OTHERS: frozenset[str] = frozenset(ALIASES) | frozenset(FOREIGN) | frozenset(ALWAYS)
_TAKEN: frozenset[str] = OPTIONS | _OTHERS


def refusal(name: str) -> str:
    """The one-line refusal of foreign keyword ``name``."""
    return (f"{name}= is not a fusionworker enqueue option ({FOREIGN[name]}); "
            f"a job argument named {name!r} goes through "
            f"enqueue_call(func, args=[...], kwargs={{{name!r}: ...}})")


def split(kwargs: dict[str, Any]) -> JobOptions:
    """Take the options out of ``enqueue()``'s keyword arguments (the rest stay: they
    are the job's own). An alias (:data:`ALIASES`) is taken as its option; a keyword
    of :data:`FOREIGN` is refused (TypeError, one line): it would otherwise become an
    argument of the job and fail there, or worse, be ignored by it."""
    if not kwargs or _TAKEN.isdisjoint(kwargs):
        return EMPTY
    found = {name: kwargs.pop(name) for name in OPTIONS.intersection(kwargs)}
    if _OTHERS.isdisjoint(kwargs):
        return JobOptions(**found)
    for name in list(kwargs):
        if name in _OTHERS:
            _translate(name, kwargs.pop(name), found, kwargs, refusal)
    return JobOptions(**found)


def _translate(name: str, value: Any, found: dict[str, Any], rest: Mapping[str, Any],
               refuse: Callable[[str], str]) -> None:
    """Foreign keyword ``name`` into ``found`` (the options): an alias as its option,
    ``ignore_result=True`` as ``result_ttl=0``, an :data:`ALWAYS` one given True as
    nothing; TypeError(``refuse(name)``) for the rest. ``rest``: what is still to come."""
    real = ALIASES.get(name) or ("result_ttl" if name == "ignore_result" and value is True
                                 else None)
    if real is not None:
        if real in rest or real in found:
            raise TypeError(f"give {real}= or {name}= (the same option), not both")
        found[real] = 0 if name == "ignore_result" else value
    elif name in ALWAYS:
        if value is not True:
            raise TypeError(f"{name}={value!r} cannot be had here: {ALWAYS[name]}")
    else:
        raise TypeError(refuse(name))


def decorator_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options given to ``@job(...)`` / ``.options(...)``, RQ's and Celery's names
    taken as in ``Queue.enqueue`` (:func:`split`); TypeError (one line) naming the way
    here for a foreign one, or listing the known ones for an unknown one."""
    found = {name: value for name, value in options.items() if name in OPTIONS}
    if len(found) == len(options):
        return found
    for name, value in options.items():
        if name in _OTHERS:
            _translate(name, value, found, options, _decorator_refusal)
    check_names({name: 1 for name in options if name not in _OTHERS})
    return found


def _decorator_refusal(name: str) -> str:
    hint = {"countdown": "use f.enqueue_in(seconds, ...)", "eta": "use f.enqueue_at(when, ...)",
            }.get(name, FOREIGN[name])
    return f"{name}= is not a fusionworker job option ({hint})"


def option_like(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that are options, aliases or foreign options."""
    return sorted(_TAKEN.intersection(names))


def registered_defaults(ref: str) -> Mapping[str, Any]:
    """The options given to ``@job(...)``/``register(...)`` for function ``ref`` in this
    process (empty when it is not registered here)."""
    handle = lookup(ref)
    if handle is not None:
        return handle.default_options
    return learnt_options(ref) or _NONE


def check_names(options: Mapping[str, Any], where: str = "job options") -> None:
    """TypeError naming the unknown ones when ``options`` has a name not in :data:`NAMES`."""
    unknown = set(options) - OPTIONS
    if unknown:
        raise TypeError(f"unknown {where}: {', '.join(sorted(unknown))} "
                        f"(known: {', '.join(NAMES)})")


#: no option given
EMPTY = JobOptions()
_NONE: Mapping[str, Any] = {}
