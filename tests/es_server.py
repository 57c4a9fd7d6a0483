"""A loopback stand-in for Elasticsearch, enough for the official 8.x/9.x client.

It answers ``HEAD/GET /``, ``PUT /_index_template/<name>`` and
``POST [/<index>]/_bulk`` with the ``X-Elastic-Product: Elasticsearch`` header
the client checks on every 2xx answer, in the compatibility media type the
client asks for (``application/vnd.elasticsearch+json; compatible-with=9``).

Failure switches:

* ``set_mode("503")``  every request gets ``503 Service Unavailable``;
* ``set_mode("down")`` the listening socket and every open connection are
  closed, so the client sees "connection refused";
* ``set_mode("hold")`` every request is read, counted in ``held``, and left
  unanswered until the mode changes (then answered as the new mode says): a
  server that hangs;
* ``set_mode("ok")``   serve again, on the same port;
* ``item_status = 429`` (or 400, ...) every bulk item fails with that status;
* ``template_status = 403`` the template PUT fails with that status.

Recorded: ``bulks`` (one list of ``(action, doc)`` pairs per bulk body),
``indexed`` (``(index, _id, doc)`` of every item answered with success) and
``templates`` (name -> body).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_VERSION = {
    "name": "es-fixture",
    "cluster_name": "fixture",
    "cluster_uuid": "fixture-uuid",
    "version": {"number": "9.0.0", "build_flavor": "default", "lucene_version": "10.1.0"},
    "tagline": "You Know, for Search",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], fixture: EsServer) -> None:
        self.fixture = fixture
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # connections cut by set_mode("down") end up here

    def cut_connections(self) -> None:
        with self.connections_lock:
            sockets = list(self.connections)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        return raw

    def _reply(self, status: int, body: Any = None) -> None:
        accept = self.headers.get("Accept", "")
        content_type = ("application/vnd.elasticsearch+json; compatible-with=9"
                        if "vnd.elasticsearch" in accept else "application/json")
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _dispatch(self) -> None:
        fixture = self.server.fixture
        body = self._body()
        fixture.requests.append((self.command, self.path, dict(self.headers)))
        if fixture.mode == "hold":
            with fixture._lock:
                fixture.held += 1
            fixture._released.wait(60)
        if fixture.mode == "503":
            self._reply(503, {"error": {"type": "unavailable", "reason": "fixture 503"},
                              "status": 503})
            return
        path = self.path.split("?", 1)[0]
        if path == "/" and self.command in ("GET", "HEAD"):
            self._reply(200, _VERSION)
        elif path.startswith("/_index_template/") and self.command in ("PUT", "POST"):
            name = path[len("/_index_template/"):]
            if fixture.template_status >= 300:
                self._reply(fixture.template_status,
                            {"error": {"type": "security_exception", "reason": "fixture"},
                             "status": fixture.template_status})
                return
            fixture.templates[name] = json.loads(body)
            self._reply(200, {"acknowledged": True})
        elif path.endswith("/_bulk") and self.command in ("POST", "PUT"):
            default_index = path[1:-len("/_bulk")] or None
            self._reply(200, fixture.record_bulk(body, default_index))
        else:
            self._reply(404, {"error": {"type": "not_found", "reason": path}, "status": 404})

    do_GET = do_HEAD = do_PUT = do_POST = _dispatch  # noqa: N815 - http.server's names


class EsServer:
    """``server = EsServer().start()``; ``server.url``; ``server.stop()``."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.item_status: int | None = None
        self.template_status = 200
        self.requests: list[tuple[str, str, dict]] = []
        self.bulks: list[list[tuple[dict, dict]]] = []
        self.indexed: list[tuple[str, str, dict]] = []
        self.templates: dict[str, dict] = {}
        #: requests that arrived while the mode was "hold"
        self.held = 0
        self._released = threading.Event()
        self._released.set()
        self.port = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EsServer:
        self._server = _Server(("127.0.0.1", self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.cut_connections()
            self._server.server_close()
            self._server = None

    def set_mode(self, mode: str) -> None:
        if mode not in ("ok", "503", "down", "hold"):
            raise ValueError(mode)
        if mode == "hold":
            self._released.clear()
        if mode == "down":
            self.stop()
        elif self._server is None:
            self.start()
        self.mode = mode
        if mode != "hold":
            self._released.set()

    def record_bulk(self, body: bytes, default_index: str | None) -> dict:
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        pairs = list(zip(lines[0::2], lines[1::2], strict=True))
        items = []
        with self._lock:
            self.bulks.append(pairs)
            for action, doc in pairs:
                op, meta = next(iter(action.items()))
                index = meta.get("_index", default_index)
                doc_id = meta.get("_id") or f"auto-{len(self.indexed)}"
                status = self.item_status or 201
                result: dict[str, Any] = {"_index": index, "_id": doc_id, "status": status}
                if status >= 300:
                    result["error"] = {"type": "fixture_error", "reason": f"fixture {status}"}
                else:
                    self.indexed.append((index, doc_id, doc))
                    result["result"] = "created"
                items.append({op: result})
        return {"took": 1, "errors": any(next(iter(i.values()))["status"] >= 300 for i in items),
                "items": items}
