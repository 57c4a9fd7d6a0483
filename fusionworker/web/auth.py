"""Authentication of the web dashboard: bearer token, basic auth, login sessions, CSRF.

* ``Authorization: Bearer <FUSIONWORKER_WEB_TOKEN>`` (scripts, the API);
* ``Authorization: Basic`` with ``FUSIONWORKER_WEB_USER`` and a password checked
  against ``FUSIONWORKER_WEB_PASSWORD_HASH`` (``pbkdf2_sha256$<iterations>$<salt>$<hash>``,
  made by :func:`hash_password` / ``fusionworker web --hash-password``);
* a browser session made by ``/login`` (token, or user and password): a random id
  in an HttpOnly, SameSite=Strict cookie, kept in this process only.

CSRF: a request authenticated by anything but a bearer token (basic auth and
session cookies are sent by the browser by itself) that changes state must
carry the token of its credential in the form field ``csrf`` or the
``X-CSRF-Token`` header: an HMAC, under a random secret of this process, of the
session id (or of the basic-auth header), written into the pages only (never
into a cookie another port of the same host could read or set), compared in
constant time. ``guard.py`` also checks ``Origin`` (else ``Referer``) on every
state change, the login and logout included.

Wrong credentials are counted per client (:class:`FailureLimiter`): past the
limit in a minute the client gets 429 and nothing is hashed for it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

ALGORITHM = "pbkdf2_sha256"
ITERATIONS = 200_000
SESSION_COOKIE = "fw_session"
CSRF_COOKIE = "fw_csrf"
SESSION_TTL = 12 * 3600.0

#: the worker threads password hashes may take at once (off the event loop: guard.py)
HASHERS = 2


def ephemeral_token() -> str:
    """A random token for one run of a dashboard started with no credentials configured
    (printed once on the terminal that started it, as Jupyter does)."""
    return secrets.token_urlsafe(18)


def hash_password(password: str, *, iterations: int = ITERATIONS, salt: str | None = None) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<base64 hash>``."""
    salt = salt or secrets.token_urlsafe(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"{ALGORITHM}${iterations}${salt}${base64.b64encode(digest).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    """True when ``password`` matches ``encoded``; False on any malformed hash."""
    try:
        algorithm, iterations, salt, expected = encoded.split("$", 3)
        rounds = int(iterations)
    except ValueError:
        return False
    if algorithm != ALGORITHM or rounds < 1:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), rounds)
    return hmac.compare_digest(base64.b64encode(digest).decode(), expected)


@dataclass(frozen=True)
class Identity:
    user: str
    method: str   # bearer | basic | session
    #: what the CSRF token is bound to: the session id, or a digest of the basic-auth
    #: header (empty for a bearer token, which a browser never sends by itself)
    binding: str = field(default="", repr=False)


class Authenticator:
    """Checks credentials against the settings; holds the login sessions."""

    def __init__(self, token: str = "", user: str = "", password_hash: str = "") -> None:
        self.token = token
        self.user = user
        self.password_hash = password_hash
        self._sessions: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        #: the key of this process's CSRF tokens (sessions live in this process too)
        self._csrf_key = secrets.token_bytes(32)
        #: checked basic credentials (header value digest -> user): pbkdf2 once per browser
        self._basic_ok: dict[str, str] = {}

    @property
    def configured(self) -> bool:
        return bool(self.token or (self.user and self.password_hash))

    def check_token(self, token: str) -> bool:
        return bool(self.token) and hmac.compare_digest(token.encode(), self.token.encode())

    def check_password(self, user: str, password: str) -> bool:
        if not (self.user and self.password_hash):
            return False
        same_user = hmac.compare_digest(user.encode(), self.user.encode())
        return verify_password(password, self.password_hash) and same_user

    def identify(self, authorization: str | None, session: str | None) -> Identity | None:
        """Who sent the request, or None when it is not authenticated."""
        if not self.configured:   # create_app refuses this; never anonymous access
            return None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            scheme = scheme.lower()
            if scheme == "bearer":
                return Identity("token", "bearer") if self.check_token(value.strip()) else None
            if scheme == "basic":
                return self._basic(value.strip())
            return None
        if session:
            with self._lock:
                found = self._sessions.get(session)
                if found and found[1] > time.monotonic():
                    return Identity(found[0], "session", session)
                self._sessions.pop(session, None)
        return None

    def basic_known(self, authorization: str) -> bool:
        """True when these basic credentials were checked good before (no hash to run)."""
        key = hashlib.sha256(authorization.partition(" ")[2].strip().encode()).hexdigest()
        with self._lock:
            return key in self._basic_ok

    def _basic(self, value: str) -> Identity | None:
        key = hashlib.sha256(value.encode()).hexdigest()
        with self._lock:
            known = self._basic_ok.get(key)
        if known:
            return Identity(known, "basic", key)
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if not self.check_password(user, password):
            return None
        with self._lock:
            if len(self._basic_ok) > 1000:
                self._basic_ok.clear()
            self._basic_ok[key] = user
        return Identity(user, "basic", key)

    def login(self, *, token: str = "", user: str = "", password: str = "") -> str | None:
        """A new session id for good credentials, else None."""
        if token and self.check_token(token):
            who = "token"
        elif user and password and self.check_password(user, password):
            who = user
        else:
            return None
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for key in [k for k, (_, until) in self._sessions.items() if until <= now]:
                del self._sessions[key]
            self._sessions[sid] = (who, now + SESSION_TTL)
        return sid

    def logout(self, session: str | None) -> None:
        if session:
            with self._lock:
                self._sessions.pop(session, None)


    def csrf_token(self, who: Identity | None) -> str:
        """The CSRF token of ``who``'s credential ("" for none or a bearer token)."""
        if who is None or not who.binding:
            return ""
        mac = hmac.new(self._csrf_key, f"{who.method}:{who.binding}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:24]).decode()

    def csrf_valid(self, who: Identity, given: object) -> bool:
        """The token sent with a state change is the one of ``who``'s credential."""
        expected = self.csrf_token(who)
        if not expected or not isinstance(given, str) or not given:
            return False
        return hmac.compare_digest(expected.encode(), given.encode())

    def login_token(self) -> str:
        """The token of the login form: a time and its HMAC (the form is good 1 h)."""
        stamp = str(int(time.time()))
        mac = hmac.new(self._csrf_key, f"login:{stamp}".encode(), hashlib.sha256)
        return f"{stamp}.{base64.urlsafe_b64encode(mac.digest()[:18]).decode()}"

    def login_token_valid(self, given: object) -> bool:
        if not isinstance(given, str) or "." not in given:
            return False
        stamp, _, _ = given.partition(".")
        if not stamp.isdigit() or not 0 <= time.time() - int(stamp) <= 3600:
            return False
        mac = hmac.new(self._csrf_key, f"login:{stamp}".encode(), hashlib.sha256)
        expected = f"{stamp}.{base64.urlsafe_b64encode(mac.digest()[:18]).decode()}"
        return hmac.compare_digest(expected.encode(), given.encode())


class FailureLimiter:
    """Wrong credentials per client: at most ``limit`` in ``window`` seconds; past it,
    :meth:`retry_after` says how long the client must wait (nothing is checked for it
    meanwhile). Keeps the ``clients`` most recent clients."""

    def __init__(self, limit: int, window: float = 60.0, clients: int = 10_000) -> None:
        self.limit, self.window, self.clients = limit, window, clients
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> int:
        """0 when ``client`` may try; else the seconds until it may."""
        now = time.monotonic()
        with self._lock:
            times = self._seen.get(client)
            if not times:
                return 0
            while times and times[0] <= now - self.window:
                times.popleft()
            if len(times) < self.limit:
                return 0
            return max(1, int(times[0] + self.window - now + 0.999))

    def failed(self, client: str) -> None:
        with self._lock:
            times = self._seen.pop(client, None) or deque(maxlen=self.limit)
            times.append(time.monotonic())
            self._seen[client] = times
            while len(self._seen) > self.clients:
                self._seen.popitem(last=False)


def csrf_ok(cookie: str | None, given: object) -> bool:
    """The submitted token (form field or header) equals the browser's cookie."""
    if not cookie or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(cookie.encode(), given.encode())


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def safe_next(target: str) -> str:
    """Where to go after a login or an action: only paths of this site (no ``//host``,
    no scheme)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
