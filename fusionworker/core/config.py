"""Every setting of fusionworker in one table.

Resolution order for each setting (highest first):

1. an explicit value passed in code or by a CLI flag (``overrides``),
2. the process environment,
3. the config file given with ``-c CONFIG_FILE`` (``KEY=VALUE`` lines, the
   same format as a systemd ``EnvironmentFile``; ``#`` starts a comment),
4. the default in :data:`SETTINGS`.

The README's configuration table is generated from :data:`SETTINGS`
(``python -m fusionworker.config`` prints it), so it cannot drift.
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# absolute: ``python -m fusionworker.config`` runs this module as ``fusionworker.config``
from fusionworker.core import config_file
from fusionworker.core.config_file import ConfigError as ConfigError
from fusionworker.core.config_file import read_config_file as read_config_file

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: Exceptions retried by default, by qualified class name (subclasses match).
DEFAULT_RETRYABLE = (
    "builtins.ConnectionError",
    "builtins.TimeoutError",
    "requests.exceptions.ConnectionError",
    "requests.exceptions.Timeout",
    "redis.exceptions.ConnectionError",
    "redis.exceptions.TimeoutError",
    "fusionworker.exceptions.Retry",
)


def async_problem(settings: Settings) -> str:
    """Why the settings' async horses cannot be (empty: they can, or are not asked for)."""
    if settings.async_per_horse > 1 and settings.horse_jobs <= 1:
        return (f"--async-per-horse {settings.async_per_horse} (FUSIONWORKER_ASYNC_PER_HORSE) "
                "needs --horse-jobs N > 1 (FUSIONWORKER_HORSE_JOBS): an async horse is a warm "
                "horse that runs several jobs")
    return ""


def async_hint(settings: Settings) -> str | None:
    """The start's warning for async horses each retired after one wave (or None)."""
    k, n = settings.async_per_horse, settings.horse_jobs
    if k > 1 and 1 < n <= k:
        return (f"--horse-jobs {n} <= --async-per-horse {k}: each async horse is retired "
                f"after one wave of jobs, a new one forked for every {n}; give --horse-jobs "
                f"several times K (e.g. {10 * k}) to keep them")
    return None


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _paths(value: str) -> tuple[str, ...]:
    return tuple(part for part in value.split(os.pathsep) if part.strip())


def parse_gpus(value: str) -> tuple[str, ...]:
    """``"0,1"`` -> ``("0", "1")``, ``"auto"`` -> ``("auto",)``, ``""`` -> ``()``; a
    device is a non-negative index, each named once (ValueError otherwise)."""
    parts = tuple(p.strip() for p in value.split(",") if p.strip())
    if parts == ("auto",):
        return parts
    for part in parts:
        if not part.isdigit():
            raise ValueError(f"not a GPU index: {part!r} (give indexes like 0,1, or auto)")
    if len(set(parts)) != len(parts):
        raise ValueError("a GPU is named twice")
    return parts


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


@dataclass(frozen=True)
class Setting:
    name: str          # attribute on Settings
    env: str           # environment variable / config-file key
    default: Any
    parse: Callable[[str], Any]
    help: str
    flag: str = ""     # CLI flag, where one exists
    #: the one place numbers are range-checked: every value from the API,
    #: the CLI, the environment or a config file passes :func:`check_value`
    min: float | None = None
    max: float | None = None
    #: the minimum itself is refused (e.g. a poll interval of 0 would spin)
    exclusive_min: bool = False
    choices: tuple[str, ...] = ()
    #: a text value's own check: raises ValueError (one line) for a value it cannot use
    check: Callable[[str], None] | None = None


def check_value(setting: Setting | str, value: Any, name: str | None = None) -> Any:
    """``value`` if ``setting`` (or the setting of that name) may take it; ConfigError
    (one clear line, naming ``name`` or the env var) otherwise.

    Numbers must be finite (no NaN, no infinity) and within the setting's range.
    """
    if isinstance(setting, str):
        setting = _BY_NAME[setting]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _check_text(setting, value, name)
        return value
    # the message is formatted only on failure (a producer checks values per job)
    if not math.isfinite(value):
        raise ConfigError(f"{name or setting.env}={value!r}: must be a finite number")
    if setting.min is not None:
        if value < setting.min or (setting.exclusive_min and value == setting.min):
            op = ">" if setting.exclusive_min else ">="
            raise ConfigError(f"{name or setting.env}={value!r}: must be {op} {setting.min:g}")
    if setting.max is not None and value > setting.max:
        raise ConfigError(f"{name or setting.env}={value!r}: must be <= {setting.max:g}")
    return value


def _check_text(setting: Setting, value: Any, name: str | None) -> None:
    """:func:`check_value` for a value that is not a number: one of the setting's
    choices, not given for a numeric setting, accepted by the setting's own check."""
    where = f"{name or setting.env}={value!r}"
    if setting.choices and str(value).lower() not in {c.lower() for c in setting.choices}:
        raise ConfigError(f"{where}: must be one of {', '.join(setting.choices)}")
    if isinstance(setting.default, (int, float)) and not isinstance(setting.default, bool):
        raise ConfigError(f"{where}: must be a number")
    if setting.check is not None and isinstance(value, str) and value:
        try:
            setting.check(value)
        except ValueError as exc:
            raise ConfigError(f"{name or setting.env}={_shown(setting.name, value)}: {exc}"
                              ) from None


def _shown(name: str, value: str) -> str:
    """A setting's value as an error may show it: secrets and a webhook's URL as
    ``***``, a URL with its password masked."""
    if name in SECRETS or name == "failure_webhook_url":
        return "***"
    if name.endswith("_url"):
        from .redis_url import mask_url

        return repr(mask_url(value))
    return repr(value)


_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def check_address(value: str) -> None:
    """An address to listen on: an IPv4 or IPv6 literal or a host name; ValueError (one
    line) otherwise."""
    try:   # as the metrics server binds it: no [brackets] around an IPv6 address
        ipaddress.ip_address(value)
        return
    except ValueError:
        pass
    if not _HOSTNAME.match(value):
        raise ValueError("not an IP address nor a host name (e.g. 127.0.0.1, ::1, 0.0.0.0)")


_KEY_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def _key_prefix(value: str) -> None:
    """A prefix of Redis keys: no space (an inline ``# comment`` of a settings file
    would become part of it) and no brace (the queues' hash tags follow it)."""
    if not _KEY_PREFIX.fullmatch(value):
        raise ValueError("use 1-64 characters of letters, digits, '_', '.', ':', '-'")


def _http_url(value: str) -> None:
    """An ``http://`` or ``https://`` URL with a host, and a port in range when given:
    what the HTTP clients take (refused here, once, in one line, not by each event or
    callback later, with the URL and its password in the error)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port     # noqa: B018 - raises for a port out of range or no number
    except ValueError:
        raise ValueError("not a URL an HTTP client can use (its port or host)") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")


def _password_hash(value: str) -> None:
    """``pbkdf2_sha256$<iterations>$<salt>$<base64 hash>`` (``web --hash-password``)."""
    algorithm, _, rest = value.partition("$")
    iterations, _, rest = rest.partition("$")
    salt, _, digest = rest.partition("$")
    try:
        ok = (algorithm == "pbkdf2_sha256" and iterations.isdigit() and int(iterations) >= 1
              and bool(salt) and len(base64.b64decode(digest, validate=True)) == 32)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError("not a password hash of `fusionworker web --hash-password` "
                         "(pbkdf2_sha256$<iterations>$<salt>$<hash>)")


def _positive(**kw: Any) -> dict[str, Any]:
    return {"min": 0, "exclusive_min": True, **kw}


def _percent() -> dict[str, Any]:
    return {"min": 0, "max": 100}


def _setting(env: str, default: Any, parse: Callable[[str], Any], help: str,
             flag: str = "", **limits: Any) -> Any:
    """A field of :class:`Settings`: its default, and its row of the table (the name is
    the field's)."""
    return field(default=default,
                 metadata={"setting": Setting("", env, default, parse, help, flag, **limits)})


def _throttle(resource: str, default: float, use: str, note: str = "") -> Any:
    """The resource governor's ``<RESOURCE>_THROTTLE_THRESHOLD``, a percentage: workers
    stop claiming at it."""
    return _setting(f"{resource}_throttle_threshold".upper(), default, float,
                    f"{use} at which workers stop claiming{note}.", **_percent())


def _resume(resource: str, default: float, use: str) -> Any:
    """The resource governor's ``<RESOURCE>_RESUME_THRESHOLD``, a percentage: throttled
    workers resume under it."""
    return _setting(f"{resource}_resume_threshold".upper(), default, float,
                    f"{use} under which throttled workers resume.", **_percent())


#: settings whose value never appears in a repr (nor, through it, in a log or an error)
SECRETS = frozenset({"elasticsearch_api_key", "elasticsearch_password", "web_token",
                     "web_password_hash"})


@dataclass(frozen=True, init=False, repr=False)
class Settings:
    """Resolved settings: one typed field per setting, declared with its default and its
    row of the table (a :class:`Setting`: environment variable, parser, help, CLI flag,
    range), which :data:`SETTINGS` lists in this order.

    Build with :func:`load_settings`, or ``Settings(values={name: value, ...})``
    (the rest default; ``Settings()`` is every default); never mutate
    (:meth:`replace` makes a changed copy).
    """

    redis_url: str = _setting("REDIS_URL", DEFAULT_REDIS_URL, str,
            "Redis to use: redis://, rediss://, unix://, redis+sentinel://h:26379,h2:26379/master/db, "
            "redis+cluster://h:7000", "--redis-url")
    prefix: str = _setting("FUSIONWORKER_PREFIX", "fw", str, "Prefix of every Redis key (1-64 letters, digits, _ . : -).",
                           "--prefix",
                           check=_key_prefix)
    job_timeout: float = _setting("FUSIONWORKER_JOB_TIMEOUT", 180.0, float,
            "Default hard time limit of a job, seconds (at most 315360000: ten years).",
            **_positive(max=315_360_000))
    kill_grace: float = _setting("FUSIONWORKER_KILL_GRACE", 10.0, float,
            "After timeout + this many seconds the parent SIGKILLs a horse that ignored SIGALRM.", min=0)
    result_ttl: int = _setting("FUSIONWORKER_RESULT_TTL", 500, int,
            "Seconds a finished job and its result are kept.", min=-1)
    max_result_bytes: int = _setting("FUSIONWORKER_MAX_RESULT_BYTES", 16 * 1024 * 1024, int,
            "Largest return value a job may store, in bytes of its encoded JSON (0 = no "
            "limit); over it the job fails as ResultTooLarge and nothing is stored.", min=0)
    worker_ttl: int = _setting("FUSIONWORKER_WORKER_TTL", 420, int,
            "Seconds a worker's heartbeat key lives without renewal.", "--worker-ttl", min=1)
    heartbeat_interval: float = _setting("FUSIONWORKER_HEARTBEAT_INTERVAL", 5.0, float,
            "Seconds between heartbeats (and job-deadline extensions) of a worker.", **_positive())
    lease: float = _setting("FUSIONWORKER_LEASE", 30.0, float,
            "Seconds a started job's lease lasts unless its live worker renews it (every "
            "heartbeat); once it ran out and the worker is gone, the reaper re-queues the job. "
            "At least 3 x the heartbeat interval.", **_positive())
    kill_job_children: bool = _setting("FUSIONWORKER_KILL_JOB_CHILDREN", True, _bool,
            "After a job's horse exits, SIGKILL the processes the job left in the horse's "
            "process group (its subprocesses). A child that called setsid() escapes. Set to 0 "
            "if jobs start daemons that must outlive them.")
    concurrency: int = _setting("FUSIONWORKER_CONCURRENCY", 1, int,
            "Jobs one worker runs at once, each in a fresh horse with its own timeout and "
            "memory ceiling (one parent and one fork server for all of them).",
            "--concurrency", min=1, max=10000)
    horse_jobs: int = _setting("FUSIONWORKER_HORSE_JOBS", 1, int,
            "Jobs one horse runs one after another (1 = a fresh process per job). A warm "
            "horse is retired after N jobs, a failure, a timeout or kill, past "
            "--max-horse-memory, and on SIGHUP; state one job leaves is seen by the next. "
            "@job(horse_jobs=M) lowers it for a function.",
            "--horse-jobs", min=1, max=1000000)
    async_per_horse: int = _setting("FUSIONWORKER_ASYNC_PER_HORSE", 1, int,
            "async def jobs one warm horse runs at once on its event loop (1 = one job at a "
            "time). Needs --horse-jobs > 1; sync jobs keep one horse each; the jobs of one "
            "horse share its process (a job that blocks the loop stalls its mates).",
            "--async-per-horse", min=1, max=10000)
    queue_order: str = _setting("FUSIONWORKER_QUEUE_ORDER", "round-robin", str,
            "How a worker given -q picks the queue of its next job: round-robin (weighted by "
            "turns) or fair (the queue that used the least worker time lately, weighted: "
            "sms:3,email:1 = 3:1 shares of the time, across every worker).", "--fair",
            choices=("round-robin", "fair"))
    fair_window: float = _setting("FUSIONWORKER_FAIR_WINDOW", 60.0, float,
            "Half-life in seconds of the worker time fair share remembers (--fair): time "
            "used this long ago counts half.", **_positive())
    gpus: tuple[str, ...] = _setting("FUSIONWORKER_GPUS", (), parse_gpus,
            "GPUs the worker's slots own, one each (slot i: the i-th, round): 0,1 or auto "
            "(every device NVML counts). A job sees only its slot's device "
            "(CUDA_VISIBLE_DEVICES); --concurrency defaults to their number; the GPU "
            "governor judges these devices only, each for its own slots.", "--gpus")
    allowed_modules: tuple[str, ...] = _setting("FUSIONWORKER_ALLOWED_MODULES", (), _csv,
            "Comma-separated module prefixes whose own functions jobs may run (whole dotted "
            "components). Unset: only functions registered with @fusionworker.job (default "
            "deny; a worker with neither refuses to start).")
    allow_callables: bool = _setting("FUSIONWORKER_ALLOW_CALLABLES", False, _bool,
            "Also run classes, bound methods (instance or class) and callable objects that "
            "the allowed modules define, not only their functions (off: a class, e.g. a "
            "subprocess.Popen subclass, is refused).")
    imports: tuple[str, ...] = _setting("FUSIONWORKER_IMPORTS", (), _csv,
            "Comma-separated modules the worker imports at start, so that the functions they "
            "register with @fusionworker.job may run.", "--import")
    path: tuple[str, ...] = _setting("FUSIONWORKER_PATH", (), _paths,
            "Directories (separated by ':') the worker puts at the front of sys.path before it "
            "imports job modules; the current directory is always put there too, as with "
            "`rq worker`.", "--path")
    log_level: str = _setting("FUSIONWORKER_LOG_LEVEL", "INFO", str,
            "Log level (also of `Worker(...).work()` in a program that configured no logging).",
            "--log-level",
            choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
    log_format: str = _setting("FUSIONWORKER_LOG_FORMAT", "text", str,
            "Log format: text (readable lines) or json.", "--log-format", choices=("text", "json"))
    max_retries: int = _setting("FUSIONWORKER_MAX_RETRIES", 10, int,
            "Retries of a job that fails with a retryable error.", min=0)
    retry_delay: float = _setting("FUSIONWORKER_RETRY_DELAY", 5.0, float,
            "First retry delay, seconds.", min=0)
    retry_backoff: float = _setting("FUSIONWORKER_RETRY_BACKOFF", 2.0, float,
            "Multiplier of the retry delay per attempt.", min=1)
    retry_max_delay: float = _setting("FUSIONWORKER_RETRY_MAX_DELAY", 3600.0, float,
            "Cap of the retry delay, seconds.", min=0)
    retry_jitter: float = _setting("FUSIONWORKER_RETRY_JITTER", 0.1, float,
            "Random jitter added to a retry delay, as a fraction of it.", min=0, max=10)
    retryable: tuple[str, ...] = _setting("FUSIONWORKER_RETRYABLE", DEFAULT_RETRYABLE, _csv,
            "Exception classes (module.Class, subclasses too) that are retried.")
    reaper_interval: float = _setting("FUSIONWORKER_REAPER_INTERVAL", 30.0, float,
            "Seconds between passes of the stuck-job reaper.", **_positive())
    failed_ttl: int = _setting("FUSIONWORKER_FAILED_TTL", 604800, int,
            "Seconds a failed job stays in the failed registry (dead-letter).", min=0)
    dedup_window: int = _setting("FUSIONWORKER_DEDUP_WINDOW", 30, int,
            "Seconds after finishing during which a job with the same job_id/unique_key is skipped.", min=0)
    max_args_bytes: int = _setting("FUSIONWORKER_MAX_ARGS_BYTES", 10 * 1024 * 1024, int,
            "Largest JSON text of a job's arguments (args and kwargs together, in bytes): enqueue "
            "refuses more, and a worker fails a larger record as malformed (0 = no limit).",
            min=0)
    failure_webhook_url: str = _setting("FAILURE_WEBHOOK_URL", "", str,
            "URL POSTed (JSON) after a job's final failure (not for a job stopped on request).", check=_http_url)
    poll_interval: float = _setting("FUSIONWORKER_POLL_INTERVAL", 1.0, float,
            "Fallback poll of an idle worker, seconds (wake-ups arrive by pub/sub sooner).", min=0.01)
    progress_interval: float = _setting("FUSIONWORKER_PROGRESS_INTERVAL", 1.0, float,
            "At most one write per this many seconds of a running job's progress and meta "
            "(current_job().set_progress / .meta); the last values are always written with "
            "the job's outcome.", **_positive())
    memory_check_interval: float = _setting("MEMORY_CHECK_INTERVAL", 5.0, float,
            "Seconds between resource-governor samples.", **_positive())
    memory_throttle_threshold: float = _throttle("memory", 90.0, "RAM use (%)")
    memory_resume_threshold: float = _resume("memory", 80.0, "RAM use (%)")
    swap_throttle_threshold: float = _throttle("swap", 70.0, "Swap use (%)")
    cpu_throttle_threshold: float = _throttle(
            "cpu", 100.0, "CPU use (% of all cores, averaged since the last sample)",
            note="; 100 = never (a worker's own CPU-bound jobs would otherwise hold back its free "
             "slots)")
    cpu_resume_threshold: float = _resume("cpu", 80.0, "CPU use (% of all cores)")
    gpu_throttle_threshold: float = _throttle("gpu", 85.0, "GPU memory use (%) of any device")
    gpu_resume_threshold: float = _resume("gpu", 75.0, "GPU memory use (%)")
    max_horse_memory: int = _setting("FUSIONWORKER_MAX_HORSE_MEMORY", 0, int,
            "Ceiling of a horse's own memory in MiB (0 = none), its children's included and not the "
            "pages it shares with the fork server (a model loaded once); over it the job fails "
            "with reason memory.",
            "--max-horse-memory", min=0)
    events: bool = _setting("FUSIONWORKER_EVENTS", True, _bool,
            "The job event log (queued, processing, progress, the outcomes; the dashboard's live "
            "events and each job's history). 0 = producers and workers write none, as Celery "
            "without -E: a job then costs Redis about a third less.")
    elasticsearch_url: str = _setting("ELASTICSEARCH_URL", "", str,
            "Elasticsearch for the event log; unset: events go to a capped Redis stream.",
            check=_http_url)
    elasticsearch_index: str = _setting("ELASTICSEARCH_INDEX", "active-fusion-logs", str,
            "Elasticsearch index of the event log.")
    elasticsearch_api_key: str = _setting("ELASTICSEARCH_API_KEY", "", str, "Elasticsearch API key.")
    elasticsearch_username: str = _setting("ELASTICSEARCH_USERNAME", "", str, "Elasticsearch basic-auth user.")
    elasticsearch_password: str = _setting("ELASTICSEARCH_PASSWORD", "", str,
            "Elasticsearch basic-auth password.")
    event_buffer: int = _setting("FUSIONWORKER_EVENT_BUFFER", 10000, int,
            "Events buffered while the event sink is unreachable; beyond it they are dropped and counted.", min=0)
    event_stream_maxlen: int = _setting("FUSIONWORKER_EVENT_STREAM_MAXLEN", 100000, int,
            "Approximate length cap of the Redis event stream.", min=0)
    metrics_port: int = _setting("FUSIONWORKER_METRICS_PORT", 0, int,
            "Port of the worker's Prometheus /metrics endpoint (0 = off).", "--metrics-port",
            min=0, max=65535)
    otel: bool = _setting("FUSIONWORKER_OTEL", False, _bool,
            "OpenTelemetry (extra [otel]): on = producers trace enqueue and count it through the "
            "application's providers; the worker sets up SDK providers with the exporters the "
            "standard OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER name (otlp by default, over "
            "HTTP; console; none) and the other OTEL_* variables, records the queue.* metrics "
            "and a consumer span per job in its horses.")
    otel_setup: str = _setting("FUSIONWORKER_OTEL_SETUP", "", str,
            "module:function called (no arguments) in the worker and its fork server instead of "
            "the built-in OTLP set-up; it installs the global tracer and meter providers.")
    otel_flush_timeout: float = _setting("FUSIONWORKER_OTEL_FLUSH_TIMEOUT", 2.0, float,
            "Seconds a horse may spend exporting its spans after it reported the job's outcome "
            "(and the worker its metrics at shutdown); an unreachable collector costs at most "
            "this.", min=0)
    metrics_bind: str = _setting("FUSIONWORKER_METRICS_BIND", "127.0.0.1", str,
            "Address the worker's /metrics endpoint listens on (0.0.0.0 = every interface).",
            "--metrics-bind", check=check_address)
    embedded_dir: str = _setting("FUSIONWORKER_EMBEDDED_DIR", "~/.local/share/fusionworker", str,
            "Folder of the embedded Redis (started only when REDIS_URL is unset and nothing answers at the default URL).")
    web_token: str = _setting("FUSIONWORKER_WEB_TOKEN", "", str,
            "Bearer token of the web dashboard and its /api/v1 (`fusionworker web`).")
    web_user: str = _setting("FUSIONWORKER_WEB_USER", "", str,
            "User name of the web dashboard's basic auth / login (with the password hash).")
    web_password_hash: str = _setting("FUSIONWORKER_WEB_PASSWORD_HASH", "", str,
            "pbkdf2_sha256 hash of the web user's password (`fusionworker web --hash-password`).",
            check=_password_hash)
    web_trusted_proxies: tuple[str, ...] = _setting("FUSIONWORKER_WEB_TRUSTED_PROXIES", (), _csv,
            "Addresses (IPs or CIDR networks, comma-separated) of the reverse proxies whose "
            "X-Forwarded-Proto, X-Forwarded-Host and X-Forwarded-For the dashboard believes; "
            "from anyone else they are ignored.")
    web_secure_cookies: bool = _setting("FUSIONWORKER_WEB_SECURE_COOKIES", False, _bool,
            "Mark the dashboard's cookies Secure even when the request did not arrive over "
            "TLS (set it when TLS ends at a proxy that sends no X-Forwarded-Proto).")
    web_max_body: int = _setting("FUSIONWORKER_WEB_MAX_BODY", 1_048_576, int,
            "Largest request body (bytes) the dashboard reads; a bigger one gets 413.",
            min=1024)
    web_auth_failures: int = _setting("FUSIONWORKER_WEB_AUTH_FAILURES", 10, int,
            "Wrong credentials one client may send per minute; then 429 with Retry-After.",
            min=1)
    #: the values set (by name), as given; the others are the defaults
    values: Mapping[str, Any] = field(default_factory=dict)
    #: names whose value came from an override, the environment or the file
    explicit: frozenset[str] = frozenset()

    def __init__(self, values: Mapping[str, Any] | None = None,
                 explicit: Iterable[str] = frozenset()) -> None:
        given = dict(values or {})
        unknown = set(given) - set(_BY_NAME)
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        for setting in SETTINGS:
            object.__setattr__(self, setting.name, given.get(setting.name, setting.default))
        object.__setattr__(self, "values", given)
        object.__setattr__(self, "explicit", frozenset(explicit))

    def replace(self, **overrides: Any) -> Settings:
        """A copy with some values replaced (``None`` values are ignored)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(given) - set(_BY_NAME)
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        for name, value in given.items():
            check_value(_BY_NAME[name], value)
        return Settings({**self.values, **given}, self.explicit | frozenset(given))

    def is_explicit(self, name: str) -> bool:
        return name in self.explicit

    def __repr__(self) -> str:
        """The values set only, secrets and the URLs' passwords masked (a webhook's URL
        whole: its path or query may be its secret)."""
        from .redis_url import mask_url

        shown = {name: "***" if (name in SECRETS or name == "failure_webhook_url") and value
                 else mask_url(value) if name in ("redis_url", "elasticsearch_url") and value
                 else value
                 for name, value in self.values.items()}
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in sorted(shown.items()))})"


#: every setting, in the order of :class:`Settings`' fields
SETTINGS: tuple[Setting, ...] = tuple(
    dataclasses.replace(f.metadata["setting"], name=f.name)
    for f in dataclasses.fields(Settings) if "setting" in f.metadata)

_BY_NAME = {s.name: s for s in SETTINGS}


def _default(name: str) -> Any:
    """The default of setting ``name``."""
    return _BY_NAME[name].default


#: keys of a settings file read by a command, not by :func:`load_settings`
COMMAND_KEYS = ("FUSIONWORKER_PROCESSES", "FUSIONWORKER_MIDDLEWARE")


#: variables read from the environment only, never from a settings file, each by its
#: own reader (FUSIONWORKER_DEBUG: the CLI's tracebacks; the others a worker's pool and
#: its fork server set for their children)
ENV_ONLY_KEYS = ("FUSIONWORKER_DEBUG", "FUSIONWORKER_CONFIG_CHECKED",
                 "FUSIONWORKER_SLOT_DEVICES")


def unknown_keys(values: Mapping[str, str]) -> list[str]:
    """What a settings file's keys look like but are not (config_file.py says how)."""
    said = config_file.unknown_keys({k: v for k, v in values.items() if k not in ENV_ONLY_KEYS},
                                    (*_ENV_NAMES, *COMMAND_KEYS))
    return said + [f"{k} is read from the environment only, not from a settings file: "
                   "ignored" for k in values if k in ENV_ONLY_KEYS]


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """The ``FUSIONWORKER_`` variables of ``environ`` that no setting has (a typo such
    as ``FUSIONWORKER_CONCURENCY``), each with the nearest name; other variables are
    not ours to judge."""
    ours = {k: v for k, v in environ.items()
            if k.startswith("FUSIONWORKER_") and k not in ENV_ONLY_KEYS}
    return config_file.unknown_keys(ours, (*_ENV_NAMES, *COMMAND_KEYS))


def load_settings(
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Resolve every setting: overrides > environment > config file > default."""
    env = os.environ if environ is None else environ
    file_values = read_config_file(config_file) if config_file else {}
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        # "KEY=" (a compose file, an EnvironmentFile line) is unset: the file's value,
        # else the default. An empty on/off setting read as off (an empty
        # FUSIONWORKER_KILL_JOB_CHILDREN left a job's children running), an empty prefix
        # was the prefix '' (workers and producers split), a number was an error
        raw = env.get(setting.env)
        if raw is None or not raw.strip():
            raw = file_values.get(setting.env)
        if raw is None or not raw.strip():
            continue
        try:
            values[setting.name] = check_value(setting, setting.parse(raw))
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"{setting.env}={raw!r}: {exc}") from None
    return Settings(values, explicit=frozenset(values)).replace(**overrides)


def settings_table() -> str:
    """The Markdown table of every setting (for the README)."""
    rows = ["| env / config key | CLI flag | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = ",".join(s.default) if isinstance(s.default, tuple) else s.default
        rows.append(f"| `{s.env}` | {f'`{s.flag}`' if s.flag else ''} | `{default}` | {s.help} |")
    return "\n".join(rows)


_env_settings: dict[tuple[str | None, ...], Settings] = {}


_ENV_NAMES = tuple(s.env for s in SETTINGS)
_ENV_KEYS = tuple(os.environ.encodekey(n) for n in _ENV_NAMES) if hasattr(
    os.environ, "encodekey") else ()


def settings_from_env() -> Settings:
    """``load_settings()``, memoized on the environment's values (a per-call ``Queue``).

    The key is read from ``os.environ``'s own dict where CPython has one (50
    lookups through the mapping cost ~50 us, more than the rest of a Queue).
    """
    data = getattr(os.environ, "_data", None)
    if _ENV_KEYS and isinstance(data, dict):
        key = tuple(data.get(k) for k in _ENV_KEYS)
    else:
        key = tuple(os.environ.get(n) for n in _ENV_NAMES)
    found = _env_settings.get(key)
    if found is None:
        found = load_settings()
        if len(_env_settings) < 32:
            _env_settings[key] = found
    return found


if __name__ == "__main__":  # pragma: no cover
    print(settings_table())
