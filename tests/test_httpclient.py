"""The one synchronous HTTP client: redirects keep credentials to the first host, errors carry the
server's message, and no answer is one exception type."""

from __future__ import annotations

import json
import socket
import threading
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lemonade_onebit import httpclient
from lemonade_onebit.errors import RunError


class Handler(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._route("GET", b"")

    def do_POST(self) -> None:
        self._route("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _route(self, method: str, body: bytes) -> None:
        other = self.server.other  # type: ignore[attr-defined]
        Handler.seen.append((self.server.server_port, method, self.path,
                             self.headers.get("Authorization"), body))
        if self.path == "/to-other":
            self._answer(302, b"", {"Location": f"http://127.0.0.1:{other}/json"})
        elif self.path == "/see-other":
            self._answer(303, b"", {"Location": "/json"})
        elif self.path == "/loop":
            self._answer(307, b"", {"Location": "/loop"})
        elif self.path == "/json":
            self._answer(200, json.dumps({"ok": True}).encode())
        elif self.path == "/openai-error":
            self._answer(400, b'{"error": {"message": "bad model", "type": "invalid"}}')
        elif self.path == "/bare-error":
            self._answer(500, b'{"error": "boom"}')
        elif self.path == "/html":
            self._answer(200, b"<html>no</html>")
        else:
            self._answer(404, b"not here\n")


@pytest.fixture
def servers():
    a = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    b = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    a.other, b.other = b.server_port, a.server_port  # type: ignore[attr-defined]
    for s in (a, b):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    Handler.seen = []
    yield f"http://127.0.0.1:{a.server_port}", a.server_port, b.server_port
    for s in (a, b):
        s.shutdown()
        s.server_close()


def test_a_redirect_to_another_host_does_not_carry_the_credentials(servers):
    url, a, b = servers
    conn, resp = httpclient.open_response("GET", url + "/to-other",
                                          auth={"Authorization": "Bearer secret"})
    with closing(conn):
        assert resp.status == 200 and json.loads(resp.read()) == {"ok": True}
    assert [(port, auth) for port, _, _, auth, _ in Handler.seen] == [(a, "Bearer secret"),
                                                                      (b, None)]


def test_303_turns_a_post_into_a_get_and_json_round_trips(servers):
    url, *_ = servers
    assert httpclient.post_json(url + "/see-other", {"x": 1}) == {"ok": True}
    assert [(m, p, body) for _, m, p, _, body in Handler.seen] == [
        ("POST", "/see-other", b'{"x": 1}'), ("GET", "/json", b"")]


def test_errors_carry_the_servers_message(servers):
    url, *_ = servers
    for path, status, message in (("/openai-error", 400, "bad model"), ("/bare-error", 500, "boom"),
                                  ("/nothing", 404, "not here")):
        with pytest.raises(httpclient.HTTPError) as caught:
            httpclient.get_json(url + path)
        assert caught.value.status == status and caught.value.message() == message
    with pytest.raises(RunError, match="answer is not JSON: <html>"):
        httpclient.get_json(url + "/html")


def test_no_answer_is_unreachable(servers):
    url, *_ = servers
    with pytest.raises(httpclient.Unreachable, match="too many redirects"):
        httpclient.get_json(url + "/loop")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(httpclient.Unreachable, match=f"127.0.0.1:{closed}"):
        httpclient.get_json(f"http://127.0.0.1:{closed}/json", timeout=2)
    with pytest.raises(httpclient.Unreachable, match="not an http"):
        httpclient.get_json("file:///etc/passwd")
    # An answer that is not HTTP at all.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def garbage() -> None:
            conn, _ = listener.accept()
            conn.recv(1024)
            conn.sendall(b"SSH-2.0-OpenSSH\r\n")
            conn.close()

        threading.Thread(target=garbage, daemon=True).start()
        with pytest.raises(httpclient.Unreachable):
            httpclient.get_json(f"http://127.0.0.1:{port}/", timeout=5)
