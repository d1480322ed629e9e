"""The streamed relay's HTTP framing, against a local socket that sends crafted executor replies.

The real llama-server is exercised end to end in test_serve_*; these cases pin down the framing
edge cases it produces only by timing: a whole reply arriving before the client is attached, replies
split at every byte, and connections cut at and inside a chunk.
"""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from lemonade_onebit.serve import relay as relay_module
from lemonade_onebit.serve.relay import StreamRelay, dechunk

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = [b"data: {\"n\":1}\n\n", b"data: {\"n\":2}\n\n", b"data: [DONE]\n\n"]
FRAMED = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS)


class Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0  # takes everything at once: backpressure is tests/test_backpressure.py's


class ClosingSeen(StreamRelay):
    """A relay that lets the test wait until the executor's close has reached it."""

    def __init__(self, request: bytes) -> None:
        super().__init__(request)
        self.closed = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.closed.set()


async def _relay(reply: bytes, split: int | None = None, attach_after_close: bool = False):
    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if split is None:
            writer.write(reply)
        else:
            for i in range(0, len(reply), split):
                writer.write(reply[i:i + split])
                await writer.drain()
                await asyncio.sleep(0)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    relay = ClosingSeen(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    await relay.open("127.0.0.1", port)
    await relay.head
    if attach_after_close:
        await relay.closed.wait()  # the whole reply and the close are in before the sink
        assert not relay.done.done()  # the verdict waits until the held bytes are read
    sink = Sink()
    relay.forward_to(sink)
    finished = await asyncio.wait_for(relay.done, 5)
    server.close()
    return relay, sink, finished


def test_whole_reply_before_the_client_is_attached_is_complete():
    relay, sink, finished = asyncio.run(_relay(HEAD + FRAMED + b"0\r\n\r\n", attach_after_close=True))
    assert finished is True
    assert bytes(sink.data) == FRAMED  # the last chunk is left to the HTTP front


def test_a_reply_cut_before_the_client_is_attached_is_incomplete():
    cut = FRAMED[:-5]
    relay, sink, finished = asyncio.run(_relay(HEAD + cut, attach_after_close=True))
    assert finished is False
    assert bytes(sink.data) == cut and not relay.at_chunk_boundary()


@pytest.mark.parametrize("split", [1, 2, 3, 7])
def test_reply_split_anywhere_is_forwarded_unchanged(split):
    relay, sink, finished = asyncio.run(_relay(HEAD + FRAMED + b"0\r\n\r\n", split=split))
    assert finished is True
    assert bytes(sink.data) == FRAMED
    assert relay.status == 200 and relay.headers["content-type"] == "text/event-stream"


def test_cut_at_a_chunk_boundary_is_incomplete_but_resumable():
    relay, sink, finished = asyncio.run(_relay(HEAD + FRAMED[: FRAMED.index(b"data: [DONE]") - 3]))
    assert finished is False
    assert relay.at_chunk_boundary()


def test_cut_inside_a_chunk_is_incomplete_and_not_at_a_boundary():
    relay, sink, finished = asyncio.run(_relay(HEAD + FRAMED[:-5]))
    assert finished is False
    assert not relay.at_chunk_boundary()


def test_close_delimited_body_is_reframed_for_the_client():
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS)
    relay, sink, finished = asyncio.run(_relay(reply))
    assert finished is True
    assert dechunk(bytes(sink.data)) == b"".join(EVENTS)


def test_dechunk_inverts_framing():
    assert dechunk(FRAMED) == b"".join(EVENTS)


async def _received(request: bytes) -> bytes:
    """Send `request` through StreamRelay.open to a server that records it and answers an empty 200."""
    got = bytearray()

    async def answer(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        got.extend(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    relay = StreamRelay(request)
    await relay.open("127.0.0.1", port)
    relay.collect()
    assert await asyncio.wait_for(relay.done, 10) is True
    server.close()
    return bytes(got)


def _request(body: bytes) -> bytes:
    return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)


def test_a_request_larger_than_the_socket_buffer_arrives_whole():
    # the first send takes what the kernel buffer holds; the transport writes the rest
    request = _request(bytes(range(256)) * 32768)  # 8 MiB
    assert asyncio.run(_received(request)) == request


def test_a_connection_not_yet_established_waits_for_it_then_sends(monkeypatch):
    class Slow(socket.socket):
        """A connect still in progress when the request is first sent (as on a busy host)."""
        tried = 0

        def send(self, data, *args):
            if Slow.tried == 0:
                Slow.tried += 1
                raise OSError(errno.ENOTCONN, "not connected yet")
            return super().send(data, *args)

    monkeypatch.setattr(relay_module.socket, "socket", Slow)
    request = _request(b'{"stream": true}')
    assert asyncio.run(_received(request)) == request
    assert Slow.tried == 1


def test_an_executor_not_listening_raises_oserror():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go():
        await StreamRelay(_request(b"{}")).open("127.0.0.1", port)

    with pytest.raises(OSError):
        asyncio.run(go())
