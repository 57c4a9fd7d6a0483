"""``python run_worker.py <command>`` / ``fusionworker <command>``.

Each command group lives in its own module; :data:`COMMANDS` lists them all and
registers them on :data:`main` (``add_command``).
Errors users can cause (bad flags, unknown jobs, unreachable Redis, bad config)
become one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import os
import sys

import click
import redis

from ..core.config import ConfigError
from ..core.job import MalformedJob
from ..core.keys import InvalidQueueName
from ..exceptions import FusionWorkerError
from ..ops.embedded import RedisUnavailable
from . import admin, cron, demo, jobs, observe, queues, web, worker_cmd
from .common import App, pass_app, same_metavars, terminal_safe

#: Global options that take a value; also accepted after the subcommand.
_GLOBAL_WITH_VALUE = ("-c", "--config", "--redis-url", "-u", "--url", "--prefix", "--log-level",
                      "--log-format")


def _option_names(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    for sub in getattr(command, "commands", {}).values():
        names |= _option_names(sub)
    return names


#: RQ's (and Celery's) command names that are spelled otherwise here: a hint, not
#: click's "No such command"
_ELSEWHERE = {
    "empty": "`queue empty QUEUE` (RQ's `rq empty QUEUE`)",
    "worker-pool": "`worker --processes N` (RQ's `rq worker-pool -n N`)",
    "purge": "`queue empty QUEUE` (Celery's `celery purge`)",
    "inspect": "`info` (workers and their jobs) or `job show ID`",
    "status": "`info` (queues and workers)",
}


class _Main(click.Group):
    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in _ELSEWHERE and args[0] not in self.commands:
            raise click.UsageError(f"No such command {args[0]!r}: it is "
                                   f"{_ELSEWHERE[args[0]]} here.", ctx)
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._globals_first(list(args)))

    def _globals_first(self, args: list[str]) -> list[str]:
        """``worker --redis-url U`` == ``--redis-url U worker``: a global option given
        after the subcommand (and not one of its own options) moves before it."""
        i = 0
        while i < len(args):                     # find the subcommand
            arg = args[i]
            if arg in _GLOBAL_WITH_VALUE:
                i += 2
                continue
            if arg == "--" or not arg.startswith("-"):
                break
            i += 1
        if i >= len(args) or args[i] == "--" or args[i] not in self.commands:
            return args
        own = _option_names(self.commands[args[i]])
        head, rest, moved = args[:i + 1], args[i + 1:], []
        kept: list[str] = []
        j = 0
        while j < len(rest):
            arg = rest[j]
            if arg == "--":
                kept.extend(rest[j:])
                break
            name = arg.split("=", 1)[0]
            if name in _GLOBAL_WITH_VALUE and name not in own:
                if "=" in arg:
                    moved.append(arg)
                    j += 1
                    continue
                if j + 1 < len(rest):
                    moved.extend(rest[j:j + 2])
                    j += 2
                    continue
            kept.append(arg)
            j += 1
        return head[:-1] + moved + head[-1:] + kept

    def invoke(self, ctx: click.Context) -> object:
        try:
            return self._invoke(ctx)
        except click.ClickException as exc:  # its text may quote what Redis holds
            exc.message = terminal_safe(exc.message)
            raise

    def _invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (RedisUnavailable, ConfigError, FusionWorkerError, InvalidQueueName,
                MalformedJob) as exc:
            raise click.ClickException(str(exc)) from None
        except redis.ConnectionError as exc:
            app = ctx.find_object(App)
            where = app.masked_url if app else "Redis"
            raise click.ClickException(f"cannot reach Redis at {where}: {exc}") from None
        except redis.ResponseError as exc:
            raise click.ClickException(f"Redis refused the command: {exc}") from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except (ValueError, TypeError) as exc:
            # a value the user typed that the API refused (its message names it): no
            # "unexpected error" wording for it (issue 30)
            if os.environ.get("FUSIONWORKER_DEBUG"):
                raise
            if not str(exc).strip():
                raise click.ClickException(_one_line(ctx, exc)) from None
            raise click.ClickException(_masked(ctx, str(exc).splitlines()[0])) from None
        except Exception as exc:  # no traceback may reach a user (issue 18.8)
            if os.environ.get("FUSIONWORKER_DEBUG"):
                raise
            raise click.ClickException(_one_line(ctx, exc)) from None


def _one_line(ctx: click.Context, exc: Exception) -> str:
    """An unexpected error as one line, secrets masked (FUSIONWORKER_DEBUG=1: traceback)."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return f"unexpected error: {_masked(ctx, text)} (set FUSIONWORKER_DEBUG=1 for the traceback)"


def _masked(ctx: click.Context, text: str) -> str:
    app = ctx.find_object(App)
    if app is not None:
        for secret in _secrets(app.url):
            text = text.replace(secret, "***")
    return text


def _secrets(url: str) -> list[str]:
    """The password(s) of a Redis URL, to mask wherever they appear."""
    from urllib.parse import parse_qsl, urlsplit

    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found.append(parts.password)
        found += [v for k, v in parse_qsl(parts.query) if "password" in k.lower() and v]
    except ValueError:
        pass
    return [f for f in found if len(f) >= 3]


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_file", metavar="CONFIG_FILE",
              help="KEY=VALUE settings file (systemd EnvironmentFile format).")
@click.option("--redis-url", "-u", "--url", "redis_url", metavar="URL",
              help="Redis URL (overrides REDIS_URL; -u/--url as in `rq`).")
@click.option("--prefix", metavar="PREFIX",
              help="Key prefix of the deployment (overrides FUSIONWORKER_PREFIX).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                                               case_sensitive=False), default=None)
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
              help="text: readable lines; json: one JSON object per line.")
@click.version_option(package_name="fusionworker")
@click.pass_context
def main(ctx: click.Context, config_file: str | None, redis_url: str | None,
         prefix: str | None, log_level: str | None, log_format: str | None) -> None:
    """fusionworker: fork-per-job workers on Redis priority queues.

    The global options (-c, -u/--redis-url, --prefix, --log-level,
    --log-format) may also follow the command: `worker -u URL` works.
    A short flag means one thing in every command (-q queue, -n how many
    to show, -u Redis URL, -b burst, -y no confirmation, -f follow, -s status).
    """
    try:
        ctx.obj = App(config_file=config_file, redis_url=redis_url, log_level=log_level,
                      log_format=log_format, prefix=prefix)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


#: Every command, registered explicitly (the command modules do not import this one).
COMMANDS: tuple[click.Command, ...] = (
    admin.info,
    admin.suspend,
    admin.resume,
    admin.shutdown,
    admin.pause,
    admin.unpause,
    admin.set_max_active,
    admin.set_rate_limit,
    admin.requeue,
    admin.health,
    cron.cron,
    demo.demo,
    jobs.enqueue,
    jobs.job,
    observe.events,
    observe.exporter,
    queues.queue_group,
    web.web,
    worker_cmd.worker,
)
for _command in COMMANDS:
    main.add_command(_command)
same_metavars(main)

__all__ = ["main", "pass_app", "App"]


def run() -> None:  # pragma: no cover - console entry
    main(prog_name="fusionworker")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
