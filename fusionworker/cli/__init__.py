"""``python run_worker.py <command>`` / ``fusionworker <command>``.

Each command group lives in its own module and registers itself on :data:`main`.
Errors users can cause (bad flags, unknown jobs, unreachable Redis, bad config)
become one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

import click
import redis

from ..config import ConfigError
from ..embedded import RedisUnavailable
from ..exceptions import FusionWorkerError
from ..job import MalformedJob
from ..keys import InvalidQueueName
from .common import App, pass_app


class _Main(click.Group):
    def invoke(self, ctx: click.Context) -> object:
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


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_file", metavar="CONFIG_FILE",
              help="KEY=VALUE settings file (systemd EnvironmentFile format).")
@click.option("--redis-url", metavar="URL", help="Redis URL (overrides REDIS_URL).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                               case_sensitive=False), default=None)
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
              help="text: readable lines; json: one JSON object per line.")
@click.version_option(package_name="fusionworker")
@click.pass_context
def main(ctx: click.Context, config_file: str | None, redis_url: str | None,
         log_level: str | None, log_format: str | None) -> None:
    """fusionworker: fork-per-job workers on Redis priority queues."""
    try:
        ctx.obj = App(config_file=config_file, redis_url=redis_url, log_level=log_level,
                      log_format=log_format)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


from . import admin, cron, demo, jobs, observe, queues, worker_cmd  # noqa: E402,F401  (registers the commands)

__all__ = ["main", "pass_app", "App"]


def run() -> None:  # pragma: no cover - console entry
    main(prog_name="fusionworker")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
