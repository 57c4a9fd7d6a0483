"""``web``: the dashboard and JSON admin API (optional extra ``fusionworker[web]``)."""

from __future__ import annotations

import ipaddress
import socket
import sys

import click

from .common import WEB_EXTRA, App, checked_address, pass_app, say


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and names that resolve only to them (``localhost``)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


@click.command()
@click.option("--bind", default="127.0.0.1", show_default=True, callback=checked_address,
              help="Address to listen on. A non-loopback address needs authentication "
                   "(FUSIONWORKER_WEB_TOKEN, or FUSIONWORKER_WEB_USER + "
                   "FUSIONWORKER_WEB_PASSWORD_HASH).")
@click.option("--port", type=click.IntRange(1, 65535), default=9181, show_default=True)
@click.option("--read-only", is_flag=True, help="Hide and refuse every action (403).")
@click.option("--hash-password", is_flag=True,
              help="Ask for a password, print its FUSIONWORKER_WEB_PASSWORD_HASH and exit.")
@pass_app
def web(app: App, bind: str, port: int, read_only: bool, hash_password: bool) -> None:
    """Serve the web dashboard and the JSON admin API (/api/v1, OpenAPI at
    /api/v1/openapi.json) on http://BIND:PORT/.

    Pages and API calls need the bearer token FUSIONWORKER_WEB_TOKEN, or basic
    auth / a login with FUSIONWORKER_WEB_USER and its password hash. Without any
    of them, only a loopback bind is allowed, and a token made for this run (printed
    at start) is required.
    It speaks plain HTTP: beyond loopback, put it behind a TLS proxy named in
    FUSIONWORKER_WEB_TRUSTED_PROXIES (docs/operations.md, "Security").
    """
    try:   # the web package imports Starlette: all of it needs the extra
        import uvicorn

        from ..web import create_app
        from ..web.auth import hash_password as make_hash
    except ImportError as exc:
        raise click.ClickException(f"the dashboard needs the web extra ({WEB_EXTRA}): "
                                   f"{exc}") from None
    if hash_password:
        if sys.stdin.isatty():
            password = click.prompt("Password", hide_input=True, confirmation_prompt=True,
                                    err=True)
        else:       # piped from a script or a secret store: its first line, no prompt
            password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise click.ClickException("empty password")
        say(make_hash(password))
        return
    settings = app.settings
    configured = bool(settings.web_token or (settings.web_user and settings.web_password_hash))
    if not configured and not is_loopback(bind):
        raise click.ClickException(
            f"refusing to listen on {bind} without authentication: set FUSIONWORKER_WEB_TOKEN "
            "(or FUSIONWORKER_WEB_USER and FUSIONWORKER_WEB_PASSWORD_HASH), or bind 127.0.0.1")
    if settings.web_user and not settings.web_password_hash:
        raise click.ClickException("FUSIONWORKER_WEB_USER needs FUSIONWORKER_WEB_PASSWORD_HASH "
                                   "(fusionworker web --hash-password)")
    if not configured:   # loopback only (refused above otherwise): a token for this run
        from ..web.auth import ephemeral_token

        settings = settings.replace(web_token=ephemeral_token())
        say("No FUSIONWORKER_WEB_TOKEN set: this run's token (log in with it) is "
                   f"{settings.web_token}", err=True)
    connection = app.connection
    connection.ping()
    application = create_app(settings, connection, read_only=read_only)
    host = f"[{bind}]" if ":" in bind else bind
    say(f"Dashboard on http://{host}:{port}/ (Redis {app.masked_url}"
               f"{', read-only' if read_only else ''}"
               f"{'' if configured else ', one-run token: loopback only'}); Ctrl-C to stop",
               err=True)
    # forwarded headers are believed from FUSIONWORKER_WEB_TRUSTED_PROXIES only (web/guard.py)
    uvicorn.run(application, host=bind, port=port, log_level="warning", access_log=False,
                proxy_headers=False)
