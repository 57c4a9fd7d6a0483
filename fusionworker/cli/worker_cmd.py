"""``worker``: run a worker (or, with ``--processes N``, a supervised pool)."""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Any

import click
import redis

from ..core.config import (
    ConfigError,
    Settings,
    async_problem,
    check_value,
    load_settings,
    parse_gpus,
    read_config_file,
)
from ..core.config_file import CHECKED_BY_PARENT
from ..core.connection import RedisClient, connect
from ..core.keys import check_worker_name
from ..ops.embedded import RedisUnavailable
from ..runtime.imports import worker_allowed
from ..runtime.supervisor import Supervisor, child_command
from ..worker import Worker, parse_queue_spec
from .common import App, FiniteFloat, import_options, pass_app, say
from .plugins import ENV as PLUGINS_ENV
from .plugins import load_middleware, middleware_refs


def _short_n(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """RQ's ``rq worker -n NAME``: the worker's name. A number (``rq worker-pool -n 3``,
    or the --limit of the other commands) is refused, naming --processes."""
    if value is not None and value.strip().isdigit():
        raise click.BadParameter("-n means how many to show (--limit) in every command; the "
                                 "number of worker processes is --processes N (-n NAME, as "
                                 "with rq worker, is the worker's --name)", ctx=ctx,
                                 param_hint="-n")
    return value


#: RQ's --logging_level values (a name or a number of logging's) as --log-level's
_RQ_LEVELS = {"verbose": "DEBUG", "quiet": "WARNING", "10": "DEBUG", "20": "INFO",
              "30": "WARNING", "WARN": "WARNING", "40": "ERROR", "50": "CRITICAL",
              "FATAL": "CRITICAL", **{n: n for n in ("DEBUG", "INFO", "WARNING", "ERROR",
                                                    "CRITICAL")}}


def _rq_logging(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """RQ's --verbose, --quiet and --logging_level: refused, naming --log-level."""
    if value is not None and value is not False:
        key = param.name if isinstance(value, bool) else str(value).strip().upper()
        level = _RQ_LEVELS.get(key or "", "LEVEL")
        raise click.BadParameter(f"RQ's logging flags are one here: --log-level {level} "
                                 "(DEBUG, INFO, WARNING, ERROR, CRITICAL; or "
                                 "FUSIONWORKER_LOG_LEVEL)", ctx=ctx,
                                 param_hint=(param.opts or ["--log-level"])[0])


def _with_scheduler(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        say("note: --with-scheduler is not needed: every worker runs due scheduled "
                   "jobs and retries", err=True)


def _checked_flags(ordered: tuple[str, ...], queues: str | None, metrics_bind: str | None,
                   name: str | None, processes: int) -> str:
    """The queue spec, once the flags that can be wrong without a connection are checked
    (each refused in one line naming the flag as typed)."""
    spec = queue_spec(ordered, queues)
    try:
        parse_queue_spec(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--queue") from None
    if metrics_bind is not None:   # named as typed (the setting's check names its variable)
        check_value("metrics_bind", metrics_bind, "--metrics-bind")
    if name is not None:   # before a --processes supervisor starts NAME.SLOT children
        try:
            check_worker_name(name if processes < 2 else f"{name}.{processes}")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--name") from None
    return spec


@click.command()
@click.argument("ordered", nargs=-1, metavar="[QUEUE]...")
@click.option("--queue", "--queues", "--customq", "-q", "queues", default=None,
              metavar="QUEUES",
              help="Comma list of queues served ROUND-ROBIN, optionally weighted "
                   "(sms:3,email:1 takes 3 jobs of sms per job of email); 'all' = every "
                   "known queue (the default when no queue is given). Queues given as "
                   "arguments instead are served in STRICT order.")
@click.option("-n", "short_n", hidden=True, callback=_short_n)
@click.option("--with-scheduler", is_flag=True, hidden=True, expose_value=False,
              callback=_with_scheduler)
@click.option("--verbose", "-v", "verbose", is_flag=True, hidden=True, expose_value=False,
              callback=_rq_logging)
@click.option("--quiet", "quiet", is_flag=True, hidden=True, expose_value=False,
              callback=_rq_logging)
@click.option("--logging_level", "--logging-level", "logging_level", hidden=True,
              expose_value=False, callback=_rq_logging)
@click.option("--burst", "-b", is_flag=True, help="Exit 0 once the queues are empty (or at once, "
              "jobs left queued, while workers are suspended, as RQ's).")
@click.option("--gpus", default=None, metavar="0,1|auto",
              help="A GPU per slot: slot i owns the i-th device (auto: every device NVML "
                   "counts); its jobs see only it (CUDA_VISIBLE_DEVICES); --concurrency "
                   "defaults to their number. FUSIONWORKER_GPUS.")
@click.option("--fair", is_flag=True, default=False,
              help="Fair share by use: the next job comes from the queue (of -q) that used "
                   "the least worker time lately, weighted (sms:3,email:1 = 3:1 shares of "
                   "the time), across every worker; FUSIONWORKER_QUEUE_ORDER=fair. "
                   "Default: round-robin.")
@import_options("Import MODULE at start so that its @fusionworker.job functions may run "
                "(repeatable; adds to FUSIONWORKER_IMPORTS).",
                "Put DIR at the front of sys.path so that job modules are found there "
                "(repeatable; adds to FUSIONWORKER_PATH). The current directory is always "
                "searched first, as with `rq worker`.")
@click.option("--name", help="Worker name (default HOST.PID; with --processes: NAME.SLOT).")
@click.option("--worker-ttl", type=click.IntRange(min=10), help="Heartbeat TTL, seconds.")
@click.option("--max-horse-memory", type=click.IntRange(min=0), metavar="MIB",
              help="Kill and fail a job whose horse holds more memory of its own "
                   "(not the pages it shares with the fork server) "
                   "(FUSIONWORKER_MAX_HORSE_MEMORY; 0 = off).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), metavar="PORT",
              help="Serve Prometheus /metrics of this worker on PORT (0 = off); with "
                   "--processes N the processes use PORT, PORT+1, ... PORT+N-1.")
@click.option("--metrics-bind", metavar="ADDR",
              help="Address /metrics listens on (default 127.0.0.1; 0.0.0.0 = every "
                   "interface).")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              envvar="FUSIONWORKER_PROCESSES",
              help="Worker processes to run under a supervisor that restarts them; "
                   "1 = run the worker in this process.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None, metavar="N",
              help="Jobs each worker process runs at once, each in its own horse "
                   "(FUSIONWORKER_CONCURRENCY, default 1); with --processes P: P x N slots.")
@click.option("--horse-jobs", type=click.IntRange(min=1, max=1000000), default=None, metavar="N",
              help="Jobs one horse runs one after another (FUSIONWORKER_HORSE_JOBS, default "
                   "1: a fresh process per job). N > 1 saves the fork per job, but state one "
                   "job leaves (module globals, open files, threads, leaked memory) is seen by "
                   "the next, as with Celery's max_tasks_per_child. A horse is retired after N "
                   "jobs, after a failure, timeout or kill, past --max-horse-memory (checked "
                   "after each job, like max_memory_per_child) and on SIGHUP; "
                   "@job(horse_jobs=M) lowers N for a function (M=1: always fresh).")
@click.option("--async-per-horse", type=click.IntRange(min=1, max=10000), default=None,
              metavar="K",
              help="async def jobs one warm horse runs at once on its event loop "
                   "(FUSIONWORKER_ASYNC_PER_HORSE, default 1), as arq's max_jobs or Celery's "
                   "gevent pool: --concurrency C async jobs need C/K horses. Needs "
                   "--horse-jobs > 1 (refused otherwise); sync jobs keep a horse each. The "
                   "jobs of one horse share its process: a job that blocks the loop past its "
                   "timeout gets the horse killed, its mates go back to their queue uncharged.")
@click.option("--middleware", "middleware", multiple=True, metavar="MODULE:NAME",
              help="Run this Middleware (class or instance) in the worker after the "
                   "built-in ones, as Worker(middleware=[...]) does: RQ's "
                   "--exception-handler, Celery's signals (repeatable; adds to "
                   "FUSIONWORKER_MIDDLEWARE).")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Claim N jobs at most, then stop warm once they ended (RQ's --max-jobs; "
                   "not with --processes, whose supervisor would start the process again).")
@click.option("--max-restarts", type=click.IntRange(min=1), default=5, show_default=True,
              help="With --processes: restarts of one process allowed per --restart-window.")
@click.option("--restart-window", type=FiniteFloat(min=1), default=60.0, show_default=True,
              help="With --processes: seconds over which --max-restarts is counted.")
@pass_app
def worker(app: App, ordered: tuple[str, ...], queues: str | None, burst: bool, name: str | None, worker_ttl: int | None,
           max_horse_memory: int | None, processes: int, max_restarts: int,
           restart_window: float, metrics_port: int | None = None,
           imports: tuple[str, ...] = (), paths: tuple[str, ...] = (),
           metrics_bind: str | None = None, concurrency: int | None = None,
           horse_jobs: int | None = None, async_per_horse: int | None = None,
           fair: bool = False,
           gpus: str | None = None, short_n: str | None = None,
           middleware: tuple[str, ...] = (), max_jobs: int | None = None) -> None:
    """Run a worker until SIGTERM (twice: cold shutdown).

    `worker high default low` (queues as arguments, as with RQ) serves them in
    STRICT order: a job of `default` only when `high` has none ready, a job of
    `low` only when both have none. `-q high,default,low` serves them
    ROUND-ROBIN (weights: `-q high:5,default:2,low:1`); no queue: every known
    queue, round-robin. `--fair`: by FAIR SHARE of worker time instead (the weights
    are shares of the time).

    SIGHUP re-reads the -c CONFIG_FILE and applies the resource-governor
    thresholds, --max-horse-memory, --horse-jobs and the log level without a
    restart; it also starts a new fork server, so the next jobs import their code
    afresh (a deploy: new code, then SIGHUP).
    """
    name = _name(name, short_n)
    processes = _processes(app, processes)
    if max_jobs is not None and processes > 1:
        raise click.UsageError("--max-jobs stops one worker process; with --processes the "
                               "supervisor would start it again: run one process")
    queues = _checked_flags(ordered, queues, metrics_bind, name, processes)
    strict = bool(ordered)
    searched = extend_sys_path((*paths, *app.settings.path))
    if len(searched) > 1:   # --processes children find them too
        os.environ["FUSIONWORKER_PATH"] = os.pathsep.join(searched[1:])
    if imports:
        os.environ["FUSIONWORKER_IMPORTS"] = ",".join((*app.settings.imports, *imports))
    refs = middleware_refs(middleware, read_config_file(app.config_file).get(
        PLUGINS_ENV) if app.config_file else None)
    if refs:                # --processes children load them (the supervisor runs no code)
        os.environ[PLUGINS_ENV] = ",".join(refs)
    app.settings = app.settings.replace(worker_ttl=worker_ttl, max_horse_memory=max_horse_memory,
                                        metrics_port=metrics_port, metrics_bind=metrics_bind,
                                        imports=(*app.settings.imports, *imports) or None,
                                        concurrency=concurrency, horse_jobs=horse_jobs,
                                        async_per_horse=async_per_horse)
    _warm_flags(app.settings, horse_jobs, async_per_horse)
    _gpus_and_order(app, gpus, fair, strict)
    try:   # default deny: nothing registered or allowed -> one line, before connecting
        worker_allowed(app.settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    connection = _connect(app, burst)
    _export_connection(app)
    if processes > 1:
        sys.exit(_supervise(app, connection, queues, burst, name, worker_ttl, max_horse_memory,
                            processes, max_restarts, restart_window, concurrency, strict))
    flags = dict(worker_ttl=worker_ttl, max_horse_memory=max_horse_memory,
                 metrics_port=metrics_port, metrics_bind=metrics_bind, concurrency=concurrency,
                 horse_jobs=horse_jobs, async_per_horse=async_per_horse,
                 queue_order="fair" if fair else None,
                 gpus=parse_gpus(gpus) if gpus is not None else None)

    def reload_settings() -> Settings:
        """SIGHUP: the -c file is read again and wins over the environment the process
        started with (which cannot change; under systemd it came from the same file).
        Flags still win over both."""
        environ = dict(os.environ)
        if app.config_file:
            environ.update(read_config_file(app.config_file))
        return load_settings(None, environ=environ, **app.overrides, **flags)

    w = Worker(queues, connection, settings=app.settings, name=name, burst=burst,
               reload_settings=reload_settings, strict=strict,
               middleware=load_middleware(refs))
    try:
        code = w.work(max_jobs=max_jobs)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except redis.ResponseError as exc:   # refused the registration (burst, or not passing)
        raise click.ClickException(f"Redis refused the worker's registration: {exc}") from None
    sys.exit(code)


def _warm_flags(settings: Settings, horse_jobs: int | None,
                async_per_horse: int | None) -> None:
    """--horse-jobs and --async-per-horse into the environment (for --processes children);
    K > 1 without warm horses is refused in one line (an async horse is a warm horse)."""
    problem = async_problem(settings)
    if problem:          # before anything is exported: a refused start changes nothing
        raise click.UsageError(problem)
    if horse_jobs is not None:
        os.environ["FUSIONWORKER_HORSE_JOBS"] = str(horse_jobs)
    if async_per_horse is not None:
        os.environ["FUSIONWORKER_ASYNC_PER_HORSE"] = str(async_per_horse)


def _processes(app: App, processes: int) -> int:
    """``--processes``, else FUSIONWORKER_PROCESSES of the environment (click read it),
    else of the ``-c`` file (systemd's EnvironmentFile gives it as the environment)."""
    source = click.get_current_context().get_parameter_source("processes")
    if source != click.core.ParameterSource.DEFAULT or not app.config_file:
        return processes
    raw = read_config_file(app.config_file).get("FUSIONWORKER_PROCESSES")
    if raw is None:
        return processes
    if not raw.isdigit() or int(raw) < 1:
        raise click.BadParameter(f"FUSIONWORKER_PROCESSES={raw!r} in {app.config_file}: "
                                 "give a whole number of at least 1", param_hint="--processes")
    return int(raw)


def _name(name: str | None, short_n: str | None) -> str | None:
    """``--name``, or RQ's ``-n NAME`` (the same; both, differing: one line)."""
    if short_n is None:
        return name
    if name is not None and name != short_n:
        raise click.BadParameter("give --name or -n (the same), not both", param_hint="-n")
    return short_n


def _connect(app: App, burst: bool) -> RedisClient:
    """The worker's connection (an embedded Redis when none answers and no URL was
    given). A URL that does not answer yet: a one-shot run (burst) or a refused password
    exits 1; a long-running worker waits for it (a deploy racing a Redis restart)."""
    try:
        client: RedisClient = app.connect(embedded=True)
        return client
    except RedisUnavailable as exc:
        if burst or exc.refused:
            raise
        # a log line (JSON with --log-format json: a log shipper reads every line)
        logging.getLogger("fusionworker.worker").warning(
            "%s; the worker waits for it", str(exc).rstrip("."))
        return connect(app.url)


def _export_connection(app: App) -> None:
    """A job's (or callback's) ``Queue()`` / ``Job.fetch()`` without settings reads the
    environment: it is made the worker's own (its --redis-url, --prefix, config file),
    for its horses and --processes children too; so is an event log turned off there
    (the jobs a job enqueues write no event either)."""
    os.environ["REDIS_URL"] = app.settings.redis_url
    os.environ["FUSIONWORKER_PREFIX"] = app.settings.prefix
    if not app.settings.events:
        os.environ["FUSIONWORKER_EVENTS"] = "0"


def _gpus_and_order(app: App, gpus: str | None, fair: bool, strict: bool) -> None:
    """--gpus and --fair into the settings and, for --processes children, the
    environment; one line on a bad value or on --fair with strict order."""
    if gpus is not None:
        try:
            app.settings = app.settings.replace(gpus=parse_gpus(gpus))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--gpus") from None
        os.environ["FUSIONWORKER_GPUS"] = gpus
    if fair:
        app.settings = app.settings.replace(queue_order="fair")
        os.environ["FUSIONWORKER_QUEUE_ORDER"] = "fair"
    if strict and app.settings.queue_order == "fair":
        raise click.UsageError("fair share picks queues by their use, strict order by their "
                               "place: give the queues with -q to serve them fairly")


def queue_spec(ordered: tuple[str, ...], queues: str | None) -> str:
    """The queue spec of the command line: positional queues (strict order, served
    with ``strict=True``) or ``-q`` (round-robin), not both; neither: ``all``."""
    if ordered and queues is not None:
        raise click.UsageError("give the queues as arguments (strict order) or with -q "
                               "(round-robin), not both")
    if not ordered:
        return queues if queues is not None else "all"
    for name in ordered:
        if "," in name or ":" in name:
            raise click.BadParameter(f"{name!r}: weights and comma lists go with -q "
                                     "(round-robin); arguments are plain queue names",
                                     param_hint="QUEUE")
    return ",".join(ordered)


def _supervise(app: App, connection: RedisClient, queues: str, burst: bool, name: str | None,
               worker_ttl: int | None, max_horse_memory: int | None, processes: int,
               max_restarts: int, restart_window: float, concurrency: int | None = None,
               strict: bool = False) -> int:
    """Run ``processes`` children of the same ``worker`` command under a :class:`Supervisor`."""
    # Children resolve settings like we did (same env, same config file). The URL goes
    # in their environment (not argv: `ps` would show a password) so that they use an
    # embedded Redis this process started, too.
    env = {**os.environ, "REDIS_URL": app.url, "FUSIONWORKER_PREFIX": app.settings.prefix}
    common: list[str] = []
    env[CHECKED_BY_PARENT] = app.config_file or ""   # its typos were said here, once
    if app.config_file:
        common += ["-c", app.config_file]
    # a flag given here goes on; else the children read the file (and SIGHUP reads it again)
    for flag, given in (("--log-level", app.overrides.get("log_level")),
                        ("--log-format", app.overrides.get("log_format"))):
        if given is not None:
            common += [flag, given]
    # strict order: the queues as arguments, as they were given to us
    served = queues.split(",") if strict else ["--queue", queues]
    args: list[str] = ["worker", *served, "--processes", "1",
                       "--metrics-bind", app.settings.metrics_bind]
    if burst:
        args.append("--burst")
    if worker_ttl is not None:
        args += ["--worker-ttl", str(worker_ttl)]
    if max_horse_memory is not None:
        args += ["--max-horse-memory", str(max_horse_memory)]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]

    port = app.settings.metrics_port

    def command(slot: int) -> list[str]:
        extra = ["--name", f"{name}.{slot}"] if name else []
        if port:  # one /metrics endpoint per process: PORT, PORT+1, ...
            extra += ["--metrics-port", str(port + slot)]
        return child_command(common + args + extra)

    def names(slot: int, pid: int) -> str:
        return f"{name}.{slot}" if name else f"{socket.gethostname()}.{pid}"

    supervisor = Supervisor(command, processes, names=names, env=env, burst=burst,
                            connection=connection, prefix=app.settings.prefix,
                            max_restarts=max_restarts,
                            restart_window=restart_window,
                            heartbeat_interval=app.settings.heartbeat_interval,
                            # its children's heartbeats read with a short timeout: a frozen
                            # Redis must not hold the loop that pings systemd's watchdog
                            watch=connect(app.url, socket_timeout=1.0,
                                          socket_connect_timeout=1.0),
                            description=f"queues {queues}{' (strict order)' if strict else ''}")
    return supervisor.run()


def extend_sys_path(dirs: tuple[str, ...]) -> list[str]:
    """Put the current directory, then ``dirs``, at the front of ``sys.path``.

    What ``rq worker`` does for the current directory (a console script's
    ``sys.path[0]`` is its own bin directory, not where it was started): a
    worker started in a project folder imports that project's job modules.
    The fork server is started with this ``sys.path``, so horses see it too.
    Returns the directories, absolute, in search order.
    """
    searched = [os.getcwd(), *(os.path.abspath(d) for d in dirs)]
    for directory in searched[1:]:   # a typo must not start a worker that fails every job
        if not os.path.isdir(directory):
            raise ConfigError(f"FUSIONWORKER_PATH: {directory!r} is not a directory")
    for directory in reversed(searched):
        if directory in sys.path:
            sys.path.remove(directory)
        sys.path.insert(0, directory)
    return searched
