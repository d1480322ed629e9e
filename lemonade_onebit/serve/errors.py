"""OpenAI-shaped error bodies, also for the errors aiohttp answers itself before a handler runs."""

from __future__ import annotations

import json
from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from lemonade_onebit.serve.plan import log

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    431: "invalid_request_error",
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


def protocol_error(exc: HttpProcessingError, max_headers: int) -> tuple[int, str, str]:
    """Status, message and code for a request aiohttp's parser refused: 431 for a line or header
    over its size limit or too many headers, else 400 with the parser's reason (its first line;
    the rest quotes the client's bytes)."""
    if isinstance(exc, LineTooLong):
        return (431, f"a request line or header is longer than {exc.args[1]} bytes",
                "header_too_large")
    reason = (exc.message or "").strip().splitlines()
    text = reason[0].rstrip(":").strip() if reason else ""
    if text.startswith("Too many headers"):
        return 431, f"the request has more than {max_headers} headers", "too_many_headers"
    return 400, f"malformed HTTP request: {text or type(exc).__name__}", "bad_http_request"


class OpenAIErrorHandler(web.RequestHandler):
    """A connection of serve's: the replies aiohttp makes itself (a request its parser refuses,
    a handler that raised) come in the OpenAI shape, and a refused request is one log line, where
    aiohttp sends text/plain and logs a traceback. A handler's own failure (a bug) keeps its
    traceback."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        code: str | int
        if isinstance(exc, HttpProcessingError):
            status, text, code = protocol_error(exc, self.max_headers)
            log(f"refused a request from {request.remote}: {text} ({status})")
        elif status == 500:
            text, code = "internal error", "internal_error"
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        else:
            text, code = HTTPStatus(status).phrase.lower(), status
            log(f"{request.method} {request.path}: {text} ({status})")
        if request.writer.output_size > 0:  # a reply has begun: no other can follow
            raise ConnectionError("the response is sent already, cannot send an error reply")
        resp = error_response(status, text, code)
        resp.force_close()
        return resp

    def log_exception(self, *args, **kw) -> None:
        """A body that cannot be decoded was answered 400 by its handler already; aiohttp meets
        the error again when it reads the rest of the body after the reply: one line, then."""
        exc = kw.get("exc_info")
        if isinstance(exc, web.RequestPayloadError):
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()
            log(f"dropped the rest of a request body: {why}")
            return
        super().log_exception(*args, **kw)
