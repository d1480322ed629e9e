"""The streamed relay's HTTP framing, against a local socket that sends crafted executor replies.

The real llama-server is exercised end to end in test_serve_*; these cases pin down the framing
edge cases it produces only by timing: a whole reply arriving before the client is attached, replies
split at every byte, and connections cut at and inside a chunk.
"""

from __future__ import annotations

import asyncio

import pytest

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
    relay = StreamRelay(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    await asyncio.get_running_loop().create_connection(lambda: relay, "127.0.0.1", port)
    await relay.head
    if attach_after_close:
        await asyncio.sleep(0.2)  # the whole reply and the close arrive before the sink
    sink = Sink()
    relay.forward_to(sink)
    finished = await asyncio.wait_for(relay.done, 5)
    server.close()
    return relay, sink, finished


def test_whole_reply_before_the_client_is_attached_is_complete():
    relay, sink, finished = asyncio.run(_relay(HEAD + FRAMED + b"0\r\n\r\n", attach_after_close=True))
    assert finished is True
    assert bytes(sink.data) == FRAMED  # the last chunk is left to the HTTP front


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
