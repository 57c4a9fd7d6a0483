"""Shared state of one CLI invocation: settings, connection, output helpers."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
import redis

from ..config import Settings, load_settings
from ..connection import connect, mask_url
from ..embedded import RedisUnavailable, connect_or_embed
from ..logs import setup_logging


class App:
    """Lazily connects; ``embedded=True`` lets ``worker``/``demo`` start an embedded Redis."""

    def __init__(self, *, config_file: str | None = None, redis_url: str | None = None,
                 log_level: str | None = None, log_format: str | None = None) -> None:
        self.settings: Settings = load_settings(config_file, redis_url=redis_url,
                                                log_level=log_level, log_format=log_format)
        self.config_file = config_file
        setup_logging(self.settings.log_level, self.settings.log_format)
        self._connection: Any = None
        self.url = self.settings.redis_url

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
            client, self.url = connect_or_embed(self.settings)
            if self.url != self.settings.redis_url:
                self.settings = self.settings.replace(redis_url=self.url)
                os.makedirs(os.path.dirname(self.url_file), exist_ok=True)
                with open(self.url_file, "w", encoding="utf-8") as fh:
                    fh.write(self.url)
            self._connection = client
            return client
        client = connect(self.url)
        try:
            client.ping()
        except redis.ConnectionError as exc:
            # a worker of this machine may run on the embedded Redis: use it if it answers
            if not self.settings.is_explicit("redis_url") and os.path.exists(self.url_file):
                with open(self.url_file, encoding="utf-8") as fh:
                    other = fh.read().strip()
                try:
                    client = connect(other)
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


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def is_tty() -> bool:
    return sys.stdout.isatty()


def parse_arg(text: str) -> Any:
    """CLI job argument: JSON where it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text
