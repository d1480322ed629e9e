"""The package's one synchronous HTTP client, for commands and benchmarks: `http.client`, a
connection per request, redirects followed (credentials only to the first host), JSON in and out.

Serve itself speaks aiohttp on its event loop and relays streams over raw sockets (measured:
`docs/start.md`); pull opens its transfer here and then moves the bytes itself (`splice`).
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from lemonade_onebit.errors import RunError

REDIRECTS = (301, 302, 303, 307, 308)


class Unreachable(OSError):
    """No HTTP answer: refused, reset, timed out, or not HTTP."""


class HTTPError(Exception):
    """An answer of status 400 or above, with its body."""

    def __init__(self, method: str, url: str, status: int, body: bytes) -> None:
        super().__init__(f"{method} {url}: answered {status}")
        self.status = status
        self.body = body

    def message(self) -> str:
        """The error's text as the server gave it: OpenAI's `{"error": {"message"}}`, a bare
        `{"error": "..."}`, or the start of the body."""
        try:
            error = json.loads(self.body)["error"]
            return str(error.get("message", error) if isinstance(error, dict) else error)
        except (ValueError, KeyError, TypeError):
            return self.body[:200].decode(errors="replace").strip()


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self):
        try:
            return json.loads(self.body) if self.body.strip() else {}
        except ValueError:
            raise RunError(f"answer is not JSON: "
                           f"{self.body[:120].decode(errors='replace')}") from None


def open_response(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
                  auth: dict | None = None, timeout: float = 60
                  ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Send one request and return the connection and its answer unread (the caller reads it
    and closes the connection). Redirects are followed; `auth` headers go only to `url`'s host.
    Raises Unreachable when no HTTP answer comes."""
    first_host = urlsplit(url).netloc
    for _ in range(6):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise Unreachable(f"{url}: not an http(s) URL")
        conn_cls = (http.client.HTTPSConnection if parts.scheme == "https"
                    else http.client.HTTPConnection)
        conn = conn_cls(parts.netloc, timeout=timeout)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sent = {**(headers or {}), **(auth or {} if parts.netloc == first_host else {})}
        try:
            conn.request(method, target, body=body, headers=sent)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise Unreachable(f"{url}: {exc or type(exc).__name__}") from None
        location = resp.getheader("Location")
        if resp.status in REDIRECTS and location:
            resp.read()
            conn.close()
            url = urljoin(url, location)
            if resp.status == 303:
                method, body = "GET", None
            continue
        return conn, resp
    raise Unreachable(f"too many redirects for {url}")


def request(method: str, url: str, payload=None, headers: dict | None = None,
            timeout: float = 60) -> Response:
    """One whole request: `payload` (if not None) sent as JSON, the answer read whole. Raises
    HTTPError for a status of 400 or above, Unreachable when no answer comes."""
    sent = dict(headers or {})
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        sent.setdefault("Content-Type", "application/json")
    conn, resp = open_response(method, url, body, sent, timeout=timeout)
    try:
        data = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"{url}: the answer was cut ({exc or type(exc).__name__})") from None
    finally:
        conn.close()
    if resp.status >= 400:
        raise HTTPError(method, url, resp.status, data)
    return Response(resp.status, resp.headers, data)


def get_json(url: str, timeout: float = 60, headers: dict | None = None):
    return request("GET", url, headers=headers, timeout=timeout).json()


def post_json(url: str, payload, timeout: float = 600, headers: dict | None = None):
    return request("POST", url, payload, headers=headers, timeout=timeout).json()
