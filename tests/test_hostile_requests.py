"""Requests built to break the HTTP front, sent over raw sockets to a real `1bit serve` (SmolLM2 on
llama-server): each gets a 4xx in the OpenAI shape `{"error":{"message","type","code"}}`, serve
logs one line for what its HTTP parser refuses and no traceback, and it keeps serving."""

from __future__ import annotations

import json
import socket

import pytest
from conftest import http

CHAT = "/v1/chat/completions"


def exchange(port: int, raw: bytes, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Send `raw` and read the reply until serve closes the connection (it does after an error),
    or until a Content-Length body is whole. A reset after the reply (serve closed while bytes it
    never read were still arriving) keeps what came."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before all was sent: the reply is already on its way
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                head, sep, body = data.partition(b"\r\n\r\n")
                length = [line.split(b":", 1)[1] for line in head.split(b"\r\n")[1:]
                          if line.lower().startswith(b"content-length:")]
                if sep and length and len(body) >= int(length[0]):
                    break
        except ConnectionResetError:
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    assert head, "no reply"
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def assert_openai_error(status: int, headers: dict, body: bytes, expected: int) -> dict:
    assert status == expected, body[:300]
    assert headers["content-type"].startswith("application/json"), headers
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "code"}, error
    assert error["message"] and error["type"].endswith("_error"), error
    return error


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


@pytest.fixture
def serve(smol_serve):
    """The shared serve, with a check after each test that what it logged meanwhile holds no
    traceback and that it still answers."""
    start = len(smol_serve.log())
    yield smol_serve
    logged = smol_serve.log()[start:]
    assert "Traceback" not in logged, logged[-3000:]
    assert http("GET", smol_serve.url + "/health")[0] == 200


def test_json_nested_100000_deep_is_400_not_a_recursion_error(serve):
    status, headers, body = exchange(serve.port, post(CHAT, b"[" * 100_000))
    error = assert_openai_error(status, headers, body, 400)
    assert "nested too deeply" in error["message"]


def test_json_nested_inside_a_valid_request_is_400(serve):
    deep = b'{"messages": [{"role": "user", "content": "hi", "x": ' + b"[" * 50_000 + b"]" * 50_000
    status, headers, body = exchange(serve.port, post(CHAT, deep + b"}]}"))
    assert_openai_error(status, headers, body, 400)


def test_a_100_kb_header_is_431(serve):
    before = serve.log().count("refused a request")
    raw = (f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {'a' * 100_000}\r\n\r\n").encode()
    status, headers, body = exchange(serve.port, raw)
    error = assert_openai_error(status, headers, body, 431)
    assert error["code"] == "header_too_large"
    assert serve.log().count("refused a request") == before + 1


def test_2000_headers_are_431(serve):
    many = "".join(f"X-H{i}: {i}\r\n" for i in range(2000))
    raw = f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}\r\n".encode()
    status, headers, body = exchange(serve.port, raw)
    error = assert_openai_error(status, headers, body, 431)
    assert error["code"] == "too_many_headers"


def test_negative_content_length_is_400(serve):
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"Content-Type: application/json\r\nContent-Length: -1\r\n\r\n{}")
    status, headers, body = exchange(serve.port, raw)
    error = assert_openai_error(status, headers, body, 400)
    assert error["code"] == "bad_http_request"
    assert "Content-Length" in error["message"]


def test_content_length_with_chunked_is_400(serve):
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"Content-Type: application/json\r\nContent-Length: 5\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    status, headers, body = exchange(serve.port, raw)
    assert_openai_error(status, headers, body, 400)


def test_a_body_that_does_not_match_its_content_encoding_is_400(serve):
    status, headers, body = exchange(
        serve.port, post(CHAT, b"this is not gzip", "Content-Encoding: gzip\r\n"))
    error = assert_openai_error(status, headers, body, 400)
    assert error["code"] == "invalid_body"


def test_a_refused_request_is_one_log_line(serve):
    before = serve.log().splitlines()
    exchange(serve.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
    new = serve.log().splitlines()[len(before):]
    refused = [line for line in new if "refused a request" in line]
    assert len(refused) == 1, new
    assert refused[0].startswith("1bit serve: refused a request from 127.0.0.1: ")
    assert refused[0].endswith("(400)")


def test_an_ordinary_request_still_works_after_the_hostile_ones(serve):
    status, raw = http("POST", serve.url + CHAT, {"messages": [{"role": "user", "content": "Hi"}],
                                                   "max_tokens": 2})
    assert status == 200 and json.loads(raw)["choices"]
