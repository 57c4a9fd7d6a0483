"""Shared state of one CLI invocation: settings, connection, output helpers."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import redis

from ..core.config import (
    ConfigError,
    Settings,
    check_address,
    load_settings,
    read_config_file,
    unknown_environment,
    unknown_keys,
)
from ..core.config_file import CHECKED_BY_PARENT
from ..core.connection import connect, mask_url
from ..core.keys import check_queue_name
from ..core.logs import IN_BLOCK, setup_logging
from ..core.queue import known_queues
from ..core.redis_client import server_time
from ..ops.embedded import RedisUnavailable, connect_or_embed
from ..ops.health import live_workers
from ..ops.info import fmt_age as fmt_age  # the CLI's age format (re-exported)

if TYPE_CHECKING:  # pragma: no cover
    from ..core.connection import RedisClient


#: how to install the web extra (fusionworker is not on PyPI yet: from a checkout)
WEB_EXTRA = "pip install 'fusionworker[web]'; from a checkout: pip install -e '.[web]'"

class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` without NaN and infinity (``nan`` compares false to every
    bound: ``--restart-window nan`` passed ``FloatRange(min=1)``)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        found = super().convert(value, param, ctx)
        if isinstance(found, float) and not math.isfinite(found):
            # one line, as every value the API refuses (click's usage block would add two)
            name = param.opts[0] if param is not None and param.opts else "value"
            raise click.ClickException(
                f"Invalid value for '{name}': {value!r} is not a finite number.")
        return found


def checked_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback of a ``--bind`` option: an IP address or a host name, else one line
    before anything starts (``not an address`` reached the server's bind)."""
    if value is not None:
        try:
            check_address(value)
        except ValueError as exc:
            raise click.BadParameter(f"{value!r}: {exc}") from None
    return value


class App:
    """Lazily connects; ``embedded=True`` lets ``worker``/``demo`` start an embedded Redis."""

    def __init__(self, *, config_file: str | None = None, redis_url: str | None = None,
                 log_level: str | None = None, log_format: str | None = None,
                 prefix: str | None = None) -> None:
        #: the global flags, which win over the environment and the file on every (re)load
        self.overrides: dict[str, Any] = dict(redis_url=redis_url, log_level=log_level,
                                              log_format=log_format)
        if prefix is not None:
            self.overrides["prefix"] = prefix
        self.settings: Settings = load_settings(config_file, **self.overrides)
        self.config_file = config_file
        setup_logging(self.settings.log_level, self.settings.log_format)
        # a typo in the file is said, not silently ignored: once (a pool's supervisor
        # says it, its children, reading the same file, do not)
        if CHECKED_BY_PARENT not in os.environ:      # and so is one in the environment
            for said in unknown_environment(os.environ):
                logging.getLogger("fusionworker.config").warning("environment: %s", said)
        if config_file and os.environ.get(CHECKED_BY_PARENT) != config_file:
            for said in unknown_keys(read_config_file(config_file)):
                logging.getLogger("fusionworker.config").warning("%s: %s", config_file, said)
        self._connection: RedisClient | None = None
        self.url = self.settings.redis_url
        #: socket timeout of the client (``health --timeout``); None = redis-py's default
        self.socket_timeout: float | None = None

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)

    @property
    def url_file(self) -> str:
        return os.path.join(os.path.expanduser(self.settings.embedded_dir), "redis.url")

    def connect(self, embedded: bool = False) -> Any:
        if self._connection is not None:
            return self._connection
        if embedded:
            try:
                client, self.url = connect_or_embed(self.settings)
            except ValueError as exc:
                raise ConfigError(f"bad Redis URL {self.masked_url}: {exc}") from None
            if self.url != self.settings.redis_url:
                self.settings = self.settings.replace(redis_url=self.url)
                os.makedirs(os.path.dirname(self.url_file), exist_ok=True)
                with open(self.url_file, "w", encoding="utf-8") as fh:
                    fh.write(self.url)
            self._connection = client
            return client
        options = {"socket_timeout": self.socket_timeout} if self.socket_timeout else {}
        try:
            client = connect(self.url, **options)
        except ValueError as exc:
            raise ConfigError(f"bad Redis URL {self.masked_url}: {exc}") from None
        try:
            client.ping()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # a worker of this machine may run on the embedded Redis: use it if it answers
            if not self.settings.is_explicit("redis_url") and os.path.exists(self.url_file):
                with open(self.url_file, encoding="utf-8") as fh:
                    other = fh.read().strip()
                try:
                    client = connect(other, **options)
                    client.ping()
                    self.url = other
                    self.settings = self.settings.replace(redis_url=other)
                    self._connection = client
                    return client
                except (redis.ConnectionError, ValueError):
                    pass
            raise RedisUnavailable(f"cannot reach Redis at {self.masked_url}: {exc}") from None
        self._connection = client
        return client

    @property
    def connection(self) -> Any:
        return self.connect()


pass_app = click.make_pass_decorator(App)


def terminal_safe(text: str) -> str:
    """``text`` with every control character but newline and tab shown as ``\\xNN``, as
    the text log shows them (``core/logs.py``): text a job wrote never drives the
    operator's terminal (an OSC sequence can retitle it, or write to its clipboard)."""
    return text.translate(IN_BLOCK)


def say(message: Any = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of a line that may hold what Redis holds (a job's own text, a
    worker's name, a cron entry's fields): every command's output but JSON goes here."""
    click.echo(terminal_safe(str(message)), err=err, nl=nl)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def is_tty() -> bool:
    return sys.stdout.isatty()


def parse_kwargs(text: str | None) -> dict[str, Any]:
    """``--kwargs JSON``: a JSON object, or a clear usage error."""
    try:
        kwargs = json.loads(text) if text else {}
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--kwargs") from None
    except RecursionError:
        raise click.BadParameter(_TOO_DEEP, param_hint="--kwargs") from None
    if not isinstance(kwargs, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--kwargs")
    return kwargs


def parse_arg(text: str) -> Any:
    """CLI job argument: JSON where it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text
    except RecursionError:
        raise click.BadParameter(_TOO_DEEP, param_hint="ARGS") from None


#: a JSON argument nested past what the parser can read (a job's arguments may nest
#: 100 levels: they would be refused at enqueue anyway)
_TOO_DEEP = "JSON nested too deeply (a job's arguments may nest 100 levels at most)"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
          right: Iterable[int] = ()) -> list[str]:
    """Plain-text columns, two spaces apart; columns in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row]
                                           for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    align = set(right)
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in align else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return lines


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal (and there is work); quiet otherwise.

    Yields ``advance(n)``.
    """
    if total <= 0 or not sys.stderr.isatty():
        yield lambda n: None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield bar.update


def unknown_queues(r: Any, prefix: str, queues: Sequence[str]) -> list[str]:
    """The queues of ``queues`` never enqueued to and served by no live worker (a typo)."""
    if not queues:
        return []
    known = set(known_queues(r, prefix))
    missing = [q for q in queues if q not in known]
    if not missing:
        return []
    served = {q for w in live_workers(r, prefix, server_time(r)) for q in w["queues"]}
    return [q for q in missing if q not in served]


def require_queue(app: App, name: str) -> str:
    """``name`` if a job was ever enqueued to it; else a one-line error naming the known ones."""
    check_queue_name(name)
    known = known_queues(app.connection, app.settings.prefix)
    if name not in known:
        raise click.ClickException(f"no queue {name!r} (known: {', '.join(known) or 'none'})")
    return name


def search_queue_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--queue Q`` of commands that find a job or cron entry in every queue by default."""
    return click.option("--queue", "-q",
                        help=f"Queue of the {what} (default: search every queue).")


def on_one(group: click.Group, name: str, argument: str,
           what: str) -> Callable[[Callable[..., Any]], click.Command]:
    """``GROUP NAME ARGUMENT [--queue Q]``: a command of ``group`` on one job or cron
    entry (``what``), looked for in every queue unless ``--queue`` names one."""
    def make(command: Callable[..., Any]) -> click.Command:
        return group.command(name)(
            click.argument(argument)(search_queue_option(what)(pass_app(command))))
    return make


def on_queue(command: Callable[[Callable[..., Any]], click.Command], *, asks: bool = False
             ) -> Callable[[Callable[..., Any]], click.Command]:
    """A command (``command``: ``click.command(name)``, ``group.command(name)``) on QUEUE,
    its first argument, given the ``App``; ``asks``: it asks first unless ``--yes``."""
    def make(func: Callable[..., Any]) -> click.Command:
        func = pass_app(func)
        if asks:
            func = click.option("--yes", "-y", is_flag=True,
                                help="Do not ask for confirmation.")(func)
        return command(click.argument("queue")(func))
    return make


#: ``--path``'s help where the command says nothing more about it
PATH_HELP = ("Put DIR at the front of sys.path (repeatable; adds to FUSIONWORKER_PATH). "
             "The current directory is always searched first, as by `worker`.")


def import_options(import_help: str, path_help: str = PATH_HELP,
                   ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--import MODULE`` and ``--path DIR`` (both repeatable: ``imports``, ``paths``),
    with the command's own help texts."""
    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--path", "paths", multiple=True, metavar="DIR",
                               type=click.Path(exists=True, file_okay=False, dir_okay=True),
                               help=path_help)(command)
        return click.option("--import", "imports", multiple=True, metavar="MODULE",
                            help=import_help)(command)
    return add


#: the metavar of an option, by its long name, in every command that has it
METAVARS = {
    "--queue": "QUEUE", "--timeout": "SECONDS", "--priority": "PRIORITY",
    "--max-retries": "N", "--retry-delay": "SECONDS", "--limit": "N", "--job-id": "JOB_ID",
    "--job": "JOB_ID", "--group": "GROUP", "--unique-key": "KEY", "--in": "SECONDS",
    "--kwargs": "JSON", "--port": "PORT", "--web-port": "PORT", "--metrics-port": "PORT",
    "--bind": "ADDR", "--metrics-bind": "ADDR", "--name": "NAME", "--worker-ttl": "SECONDS",
    "--processes": "N", "--concurrency": "N", "--max-restarts": "N",
    "--restart-window": "SECONDS", "--workers": "N", "--jobs": "N", "--duration": "SECONDS",
    "--interval": "SECONDS", "--timezone": "TZ", "--import": "MODULE",
    "--path": "DIR",
}
#: options whose value is a comma list of queues (``worker -q``, ``exporter -q``)
_QUEUE_LISTS = frozenset({"worker", "exporter"})


def same_metavars(command: click.Command, name: str = "") -> None:
    """Give every option of :data:`METAVARS` its one metavar, in ``command`` and its
    subcommands: ``--timeout SECONDS`` reads the same in every ``--help``."""
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        long = next((o for o in param.opts if o in METAVARS), None)
        if long is None:
            continue
        param.metavar = ("QUEUES" if long == "--queue" and name in _QUEUE_LISTS
                         else METAVARS[long])
    for sub_name, sub in getattr(command, "commands", {}).items():
        same_metavars(sub, sub_name)
