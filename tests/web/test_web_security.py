"""What defends the dashboard's browser and its sign-in (issue #30, item 3), through
Starlette's TestClient and a real uvicorn server, on the real Redis: security headers,
CSRF tokens bound to the credential, the site named on every state change, Secure
cookies behind TLS, password hashing off the event loop, the failure limit."""

from __future__ import annotations

import base64
import re
import threading
from typing import Any

import pytest

pytest.importorskip("starlette")

import httpx
from starlette.testclient import TestClient

from fusionworker.web import create_app
from fusionworker.web.auth import hash_password
from tests.waiting import wait_for
from tests.web_support import SAME_SITE, form_login, serve

TOKEN = "sec-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(r, settings):
    with TestClient(create_app(settings.replace(web_token=TOKEN), r), headers=SAME_SITE) as c:
        yield c


def test_every_answer_has_the_security_headers(client):
    csrf = form_login(client, TOKEN)
    answers = [client.get("/"), client.get("/login"), client.get("/api/v1/queues"),
               client.get("/static/app.js"), client.get("/api/v1/nothing"),
               client.get("/queues/nothing"),
               client.post("/action", data={"action": "nothing", "csrf": "wrong"}),
               client.post("/action", data={"action": "pause", "csrf": csrf},
                           headers={"Origin": "http://elsewhere"})]
    for answer in answers:
        h = answer.headers
        csp = h["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, answer.url
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"
        # no page or answer is kept for Back after a log out; a static file may be
        static = answer.url.path.startswith("/static/")
        assert h.get("cache-control") == (None if static else "no-store"), answer.url


def test_no_inline_script_or_handler_in_any_page(client, queue, burst):
    q = queue("default")
    job = q.enqueue("tests.jobs:boom")
    queue("other").enqueue("tests.jobs:add", 1, 2)
    burst("default")
    form_login(client, TOKEN)
    for path in ("/", "/login", "/failed", "/failed?queue=default", "/queues/default",
                 "/queues/default?status=failed", f"/jobs/{job.id}", "/scheduled", "/retries",
                 "/batches", "/workers", "/charts", "/search?q=boom"):
        html = client.get(path).text
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        for attrs, text in scripts:   # a script is a file, or a JSON data block
            assert 'src="/static/' in attrs or 'type="application/json"' in attrs, (path, attrs)
            assert 'src="' in attrs or text.strip().startswith(("{", "[")), path
        assert not re.search(r"\son[a-z]+=", html), path
        assert "javascript:" not in html and ' style="' not in html, path


def test_csrf_token_is_bound_to_the_session(r, settings, queue):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    app = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(app, headers=SAME_SITE) as one, TestClient(app, headers=SAME_SITE) as two:
        mine = form_login(one, TOKEN)
        theirs = form_login(two, TOKEN)
        assert mine != theirs and "fw_csrf" not in one.cookies   # nothing readable to steal
        refused = two.post("/action", data={"action": "pause", "queue": "default",
                                            "csrf": mine})
        assert refused.status_code == 403 and "CSRF" in refused.text and not q.is_paused
        # a token a browser sets itself (the former double-submit cookie) counts for nothing
        two.cookies.set("fw_csrf", "chosen")
        forged = two.post("/action", data={"action": "pause", "queue": "default",
                                           "csrf": "chosen"})
        assert forged.status_code == 403 and not q.is_paused
        done = two.post("/action", data={"action": "pause", "queue": "default",
                                         "csrf": theirs}, follow_redirects=False)
        assert done.status_code == 303 and q.is_paused


def test_a_state_change_must_come_from_this_site(client, queue):
    q = queue("default")
    q.enqueue("tests.jobs:add", 1, 2)
    csrf = form_login(client, TOKEN)
    form = {"action": "pause", "queue": "default", "csrf": csrf}
    for headers in ({"Origin": "http://testserver:8080"}, {"Origin": "null"},
                    {"Origin": "https://testserver"},
                    {"Origin": "", "Referer": "http://127.0.0.1:9999/attack"}):
        answer = client.post("/action", data=form, headers=headers)
        assert answer.status_code == 403 and "cross-site" in answer.text, headers
    # with the session cookie, a post naming no site at all is refused too
    bare = TestClient(client.app, cookies=dict(client.cookies))
    assert bare.post("/action", data=form).status_code == 403
    assert bare.post("/api/v1/queues/default/pause", headers={"X-CSRF-Token": csrf}
                     ).status_code == 403
    assert not q.is_paused
    # the Referer of one of its own pages names the site when there is no Origin
    by_referer = bare.post("/action", data=form, follow_redirects=False,
                           headers={"Referer": "http://testserver/queues/default"})
    assert by_referer.status_code == 303 and q.is_paused
    # a bearer token (never added by a browser) needs no site named
    assert bare.post("/api/v1/queues/default/unpause", headers=BEARER).status_code == 200


def test_login_and_logout_need_their_token_and_this_site(client):
    login_page = client.get("/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', login_page).group(1)
    for headers, data in (({"Origin": "http://evil.test"}, {"token": TOKEN, "csrf": token}),
                          ({}, {"token": TOKEN}), ({}, {"token": TOKEN, "csrf": "1.x"})):
        answer = client.post("/login", data=data, headers=headers, follow_redirects=False)
        assert answer.status_code == 403 and "fw_session" not in answer.headers.get(
            "set-cookie", ""), headers
    bare = TestClient(client.app)
    assert bare.post("/login", data={"token": TOKEN, "csrf": token}).status_code == 403
    csrf = form_login(client, TOKEN)
    assert client.post("/logout", data={}).status_code == 403
    assert client.post("/logout", data={"csrf": csrf},
                       headers={"Origin": "http://evil.test"}).status_code == 403
    assert client.post("/logout", headers={"X-CSRF-Token": "1.x"}).status_code == 403
    assert client.get("/api/v1/queues").status_code == 200   # still logged in
    client.post("/logout", data={"csrf": csrf})
    assert client.get("/api/v1/queues").status_code == 401
    csrf = form_login(client, TOKEN)               # a script's logout: the header, as the API's
    client.post("/logout", headers={"X-CSRF-Token": csrf})
    assert client.get("/api/v1/queues").status_code == 401


def session_cookie(answer: Any) -> str:
    return next(v for k, v in answer.headers.multi_items()
                if k == "set-cookie" and v.startswith("fw_session="))


def login_answer(c: TestClient, headers: dict[str, str] | None = None) -> Any:
    token = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text).group(1)
    return c.post("/login", data={"token": TOKEN, "csrf": token}, follow_redirects=False,
                  headers=headers or {})


def test_cookies_are_secure_behind_tls(r, settings):
    plain = create_app(settings.replace(web_token=TOKEN), r)
    with TestClient(plain, headers=SAME_SITE) as c:
        assert "secure" not in session_cookie(login_answer(c)).lower()
        # X-Forwarded-Proto from a client that is no trusted proxy changes nothing
        forged = login_answer(c, {"X-Forwarded-Proto": "https", "Origin": "https://testserver"})
        assert forged.status_code == 403
    told = create_app(settings.replace(web_token=TOKEN, web_secure_cookies=True), r)
    with TestClient(told, headers=SAME_SITE) as c:
        assert "secure" in session_cookie(login_answer(c)).lower()
    proxied = create_app(settings.replace(web_token=TOKEN,
                                          web_trusted_proxies=("10.1.0.0/16",)), r)
    with TestClient(proxied, client=("10.1.2.3", 4000),
                    headers={"Origin": "https://dash.example", "Host": "dash.example",
                             "X-Forwarded-Proto": "https"}) as c:
        cookie = session_cookie(login_answer(c))
        assert "secure" in cookie.lower() and "samesite=strict" in cookie.lower()
    # a proxy that rewrites Host says the original one: that is the site named
    with TestClient(proxied, client=("10.1.2.3", 4000), base_url="http://10.1.0.1:9181",
                    headers={"Origin": "https://dash.example", "X-Forwarded-Host": "dash.example",
                             "X-Forwarded-Proto": "https"}) as c:
        assert login_answer(c).status_code == 303
    with TestClient(proxied, client=("192.0.2.9", 4000), base_url="http://10.1.0.1:9181",
                    headers={"Origin": "https://dash.example", "X-Forwarded-Host": "dash.example",
                             "X-Forwarded-Proto": "https"}) as c:
        assert login_answer(c).status_code == 403   # not from a trusted proxy


def test_wrong_credentials_are_limited_per_client(r, settings, caplog):
    encoded = hash_password("right", iterations=1000)
    app = create_app(settings.replace(web_token=TOKEN, web_user="ops",
                                      web_password_hash=encoded, web_auth_failures=3), r)
    bad = {"Authorization": "Basic " + base64.b64encode(b"ops:wrong").decode()}
    good = {"Authorization": "Basic " + base64.b64encode(b"ops:right").decode()}
    with TestClient(app, client=("10.0.0.1", 1)) as attacker, \
            TestClient(app, client=("10.0.0.2", 1)) as other:
        with caplog.at_level("WARNING", logger="fusionworker.web"):
            assert [attacker.get("/api/v1/queues", headers=bad).status_code
                    for _ in range(3)] == [401, 401, 401]
        said = [m for m in caplog.messages if "refused" in m]   # said, never the secret
        assert said == ["web: refused basic credentials from 10.0.0.1"] * 3
        assert "wrong" not in caplog.text and bad["Authorization"][6:] not in caplog.text
        limited = attacker.get("/api/v1/queues", headers=good)
        assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
        assert "too many" in limited.json()["error"]
        token = re.search(r'name="csrf" value="([^"]+)"', attacker.get("/login").text).group(1)
        form = attacker.post("/login", data={"user": "ops", "password": "right",
                                             "csrf": token}, headers=SAME_SITE)
        assert form.status_code == 429 and "retry-after" in form.headers
        # another client is not held back
        assert other.get("/api/v1/queues", headers=good).status_code == 200
        assert other.get("/api/v1/queues", headers=BEARER).status_code == 200


def test_password_hashing_does_not_hold_other_requests(r, settings):
    """Wrong passwords whose hash takes long (many rounds) sent to a route served on the
    event loop (the OpenAPI document) are being checked while a bearer call comes: it
    is answered before them (the hash runs in a worker thread)."""
    encoded = hash_password("right", iterations=4_000_000)
    app = create_app(settings.replace(web_token=TOKEN, web_user="ops",
                                      web_password_hash=encoded), r)
    bad = {"Authorization": "Basic " + base64.b64encode(b"ops:wrong").decode()}
    finished: list[str] = []
    with serve(app) as url:
        def wrong(n: int) -> None:
            httpx.get(f"{url}/api/v1/openapi.json", headers={**bad, "X-N": str(n)},
                      timeout=60)
            finished.append("basic")
        senders = [threading.Thread(target=wrong, args=(n,)) for n in range(2)]
        for t in senders:
            t.start()
        wait_for(lambda: threading.active_count() > 2 and not finished, timeout=5,
                 what="the wrong passwords to be sent")
        answer = httpx.get(f"{url}/api/v1/queues", headers=BEARER, timeout=60)
        finished.append("bearer")
        for t in senders:
            t.join(60)
    assert answer.status_code == 200
    assert finished[0] == "bearer", finished


def test_body_size_is_limited(client):
    big = b"{" + b" " * 2_000_000 + b"}"
    answer = client.put("/api/v1/queues/default/max-active", content=big,
                        headers={**BEARER, "Content-Type": "application/json"})
    assert answer.status_code == 413 and "body is over" in answer.json()["error"]

    def chunks() -> Any:   # no Content-Length: counted as it comes
        for _ in range(40):
            yield b" " * 50_000
    answer = client.put("/api/v1/queues/default/max-active", content=chunks(), headers=BEARER)
    assert answer.status_code == 413


def test_the_failure_limit_counts_the_client_a_trusted_proxy_names(r, settings):
    app = create_app(settings.replace(web_token=TOKEN, web_auth_failures=2,
                                      web_trusted_proxies=("10.9.0.1",)), r)
    wrong = {"Authorization": "Bearer wrong"}
    with TestClient(app, client=("10.9.0.1", 1)) as proxy:
        for _ in range(2):
            assert proxy.get("/api/v1/queues", headers={
                **wrong, "X-Forwarded-For": "198.51.100.7, 10.9.0.1"}).status_code == 401
        held = proxy.get("/api/v1/queues", headers={**BEARER,
                                                    "X-Forwarded-For": "198.51.100.7"})
        assert held.status_code == 429
        other = proxy.get("/api/v1/queues", headers={**BEARER,
                                                     "X-Forwarded-For": "198.51.100.8"})
        assert other.status_code == 200
    # from an untrusted sender the header is ignored: its own address is counted
    with TestClient(app, client=("203.0.113.5", 1)) as sender:
        for n in range(2):
            sender.get("/api/v1/queues", headers={**wrong, "X-Forwarded-For": f"192.0.2.{n}"})
        assert sender.get("/api/v1/queues", headers={
            **BEARER, "X-Forwarded-For": "192.0.2.99"}).status_code == 429
