"""OpenAI-shaped error bodies."""

from __future__ import annotations

import json

from aiohttp import web

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    502: "server_error",
    503: "unavailable_error",
}


def error_body(status: int, message: str, code: str | int | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"),
                      "code": code if code is not None else status}}


def error_response(status: int, message: str, code: str | int | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(error_body(status, message, code)).encode(),
        content_type="application/json",
    )


def not_supported(message: str) -> web.Response:
    """A 501 in llama-server's own shape (numeric code, `not_supported_error`, compact), which
    Lemonade and llama.cpp clients already handle."""
    body = {"error": {"code": 501, "message": message, "type": "not_supported_error"}}
    return web.Response(status=501, body=json.dumps(body, separators=(",", ":")).encode(),
                        content_type="application/json")


def error_event(message: str) -> bytes:
    """One SSE event carrying an error, for a stream that cannot finish."""
    return b"data: " + json.dumps(error_body(502, message)).encode() + b"\n\n"
