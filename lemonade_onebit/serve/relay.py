"""The streamed relay: executor socket → client socket with no parsing of the events themselves.

A streamed reply is the hot path of serve (one write per token, 32 streams at once), so it skips the
HTTP client library: a raw connection to the executor, whose chunked body framing is passed straight
to the client's connection. Only the chunk sizes are read, to find the end of the body and to know
that an error event can be inserted at a chunk boundary.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import socket
import time
from typing import cast

# Backpressure: above this many bytes waiting for a client that reads slowly (or not at all), stop
# reading from the executor, and go on once the client has taken it down to the low mark. Serve's
# memory stays bounded and the executor's own send blocks, as if it served that client itself.
HIGH_WATER = 1 << 20
LOW_WATER = 1 << 18
DRAIN_POLL_S = 0.02
TAIL_READS = 4  # the final event, `[DONE]` and the last chunk can each come in a read of their own


class UpstreamError(Exception):
    """The executor's connection failed or broke its HTTP framing."""


class StreamRelay(asyncio.Protocol):
    """One streamed POST to the executor.

    Phase 1: the response head arrives (`head` resolves). Phase 2: with a `sink` (the client's
    transport) the body is forwarded as it arrives; without one it is collected. `done` resolves
    True at the body's end, False when the executor closed the connection first.
    """

    def __init__(self, request: bytes) -> None:
        loop = asyncio.get_running_loop()
        self._request = request  # what connection_made still has to write
        self.head: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[bool] = loop.create_future()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.last_data = time.monotonic()
        # For the metrics, O(1) per read: when the body's first and last bytes came, and the last
        # reads, where the executor's final event (its `usage` or `timings`) is.
        self.first_body = 0.0
        self.last_body = 0.0
        self._tail: collections.deque[bytes] = collections.deque(maxlen=TAIL_READS)
        self.transport: asyncio.Transport | None = None
        self._head_buf = b""
        self._pending = bytearray()  # body bytes that came before a sink was attached
        self._sink: asyncio.WriteTransport | None = None
        self._collecting = False
        self._closed = False  # the executor closed its end
        self._collect = bytearray()  # de-chunked body, when collecting
        self._chunked = False
        self._length: int | None = None
        self._received = 0
        self._need = 0  # bytes left in the current chunk, its CRLF included
        self._size_line = b""  # a chunk-size line split across reads, not yet forwarded
        self._paused = False  # not reading from the executor until the client drains

    async def open(self, host: str, port: int) -> None:
        """Connect to the executor, sending the request in this very step where it can.

        On loopback the handshake completes inside connect(), so the request can go out at once
        instead of one event-loop turn later, after every other request that arrived meanwhile
        has been parsed. That keeps a burst of requests as close together at the executor as
        they came: llama-server takes waiting requests into its slots per decode step, and a
        burst whose first request arrives alone leaves one slot out of step with the rest for
        the whole burst. Raises OSError when the executor cannot be reached.
        """
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.connect((host, port))
            except BlockingIOError:
                pass
            try:
                sent = sock.send(self._request)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.ENOTCONN):
                    raise
                await loop.sock_connect(sock, (host, port))  # not connected yet: wait for it
                sent = 0
            self._request = self._request[sent:]
            await loop.create_connection(lambda: self, sock=sock)
        except BaseException:
            sock.close()
            raise

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # a stream connection's transport
        self.transport = transport
        if self._request:
            transport.write(self._request)
        self._request = b""

    def data_received(self, data: bytes) -> None:
        now = self.last_data = time.monotonic()
        if not self.head.done():
            self._head_buf += data
            end = self._head_buf.find(b"\r\n\r\n")
            if end < 0:
                return
            data = self._head_buf[end + 4:]
            try:
                self._parse_head(self._head_buf[:end])
            except (ValueError, IndexError):
                self._fail(UpstreamError("the executor sent a malformed response head"))
                return
            self._head_buf = b""
            self.head.set_result(None)
            if not data:
                return
        if not self.first_body:
            self.first_body = now
        self.last_body = now
        self._tail.append(data)
        if self._sink is None and not self._collecting:
            self._pending += data
            return
        try:
            self._body(data)
        except ValueError:
            self._fail(UpstreamError("the executor broke its chunked framing"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if not self.head.done():
            self.head.set_exception(UpstreamError("the executor closed the connection"))
        if self._sink is not None or self._collecting:
            self._conclude()
        # else: bytes may wait in _pending; the verdict comes when they are processed

    def _conclude(self) -> None:
        """The connection is gone: the body is complete only if its framing says so."""
        if not self.done.done():
            close_delimited = self._length is None and not self._chunked
            self.done.set_result(close_delimited and self._received > 0)

    # -- phase 2 ------------------------------------------------------------------------------

    def forward_to(self, sink: asyncio.WriteTransport) -> None:
        """Send the body, as it arrives, to the client's transport (already in chunked mode)."""
        self._sink = sink
        self._drain_pending()

    def collect(self) -> None:
        self._collecting = True
        self._drain_pending()

    def collected(self) -> bytes:
        """The whole body, without chunk framing (after `done` resolved True)."""
        return dechunk(bytes(self._collect)) if self._chunked else bytes(self._collect)

    def tail(self) -> bytes:
        """The body's last reads as they came (chunk framing included)."""
        return b"".join(self._tail)

    def at_chunk_boundary(self) -> bool:
        return self._need == 0 and not self._size_line

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- internals -----------------------------------------------------------------------------

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ", 2)[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in self.headers:
            self._length = int(self.headers["content-length"])
            if self._length == 0:
                self._finish()

    def _drain_pending(self) -> None:
        if self._pending:
            data, self._pending = bytes(self._pending), bytearray()
            try:
                self._body(data)
            except ValueError:
                self._fail(UpstreamError("the executor broke its chunked framing"))
        if self._closed:
            self._conclude()

    def _body(self, data: bytes) -> None:
        if self.done.done():
            return
        if not self._chunked:
            self._received += len(data)
            self._emit_unframed(data)
            if self._length is not None and self._received >= self._length:
                self._finish()
            return
        if self._size_line:
            data, self._size_line = self._size_line + data, b""
        pos, end = 0, len(data)
        while pos < end:
            if self._need:
                take = min(self._need, end - pos)
                pos += take
                self._need -= take
                continue
            newline = data.find(b"\n", pos)
            if newline < 0:  # hold a split size line back until it is whole
                self._size_line = data[pos:]
                self._emit_framed(data[:pos])
                return
            size = int(data[pos:newline].split(b";", 1)[0].strip(), 16)
            if size == 0:  # the last chunk: the client's own is written by the HTTP front
                self._emit_framed(data[:pos])
                self._finish()
                return
            pos = newline + 1
            self._need = size + 2
        self._emit_framed(data)

    def _emit_framed(self, framed: bytes) -> None:
        if not framed:
            return
        if self._sink is None:
            self._collect += framed
        elif self._sink.is_closing():  # the client left: stop the generation
            self._fail(UpstreamError("the client closed the connection"))
        else:
            self._sink.write(framed)
            if not self._paused and self._sink.get_write_buffer_size() > HIGH_WATER:
                self._pause()

    def _pause(self) -> None:
        if self.transport is None:
            return
        self._paused = True
        self.transport.pause_reading()
        asyncio.get_running_loop().call_later(DRAIN_POLL_S, self._check_drain)

    def _check_drain(self) -> None:
        """While paused: resume once the client took its backlog down, fail once it left."""
        if not self._paused or self._closed or self.transport is None:
            return
        sink = self._sink
        if sink is None or sink.is_closing():
            self._fail(UpstreamError("the client closed the connection"))
            return
        if sink.get_write_buffer_size() <= LOW_WATER:
            self._paused = False
            self.last_data = time.monotonic()  # the executor was held back, not silent
            self.transport.resume_reading()
        else:
            asyncio.get_running_loop().call_later(DRAIN_POLL_S, self._check_drain)

    def _emit_unframed(self, data: bytes) -> None:
        if self._sink is None:
            self._collect += data
        else:
            self._emit_framed(b"%x\r\n%b\r\n" % (len(data), data))

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(True)
        self.close()

    def _fail(self, exc: Exception) -> None:
        if not self.head.done():
            self.head.set_exception(exc)
        if not self.done.done():
            self.done.set_result(False)
        self.close()


def dechunk(framed: bytes) -> bytes:
    out, pos = bytearray(), 0
    while pos < len(framed):
        newline = framed.index(b"\n", pos)
        size = int(framed[pos:newline].split(b";", 1)[0].strip(), 16)
        out += framed[newline + 1:newline + 1 + size]
        pos = newline + 1 + size + 2
    return bytes(out)
