"""A client that stops reading a stream: serve stops reading from the executor once a bounded
backlog waits for that client, and goes on when it reads again, every byte in order.

The executor is a stand-in for llama-server (it takes llama-server's command line and answers
`/health`) that streams 64 KB events as fast as it can: what a real one does with `n_probs` over
a large vocabulary, without a model to compute them."""

from __future__ import annotations

import json
import socket
import sys
import time

import psutil
import pytest

FAST = r'''
import sys
from aiohttp import web
port = int(sys.argv[sys.argv.index("--port") + 1])
EVENT = b"data: " + b'{"pad":"' + b"x" * 65536 + b'"}' + b"\n\n"
COUNT = int(4000)  # ~260 MB in all: far more than any socket buffer

async def chat(request):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for _ in range(COUNT):
        await resp.write(EVENT)
    await resp.write(b"data: [DONE]\n\n")
    return resp

app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
app.router.add_get("/health", lambda r: web.json_response({"status": "ok"}))
web.run_app(app, host="127.0.0.1", port=port, print=None)
'''


@pytest.mark.executor
def test_a_client_that_stops_reading_holds_serves_memory_bounded(start_serve, tmp_path,
                                                                 smollm2):
    script = tmp_path / "fast-llama-server"
    script.write_text(f"#!{sys.executable}\n{FAST}")
    script.chmod(0o755)
    serve = start_serve("-m", str(smollm2), "--device", "cpu", "--llama-server", str(script),
                        "--no-recipes").wait_ready()
    proc = psutil.Process(serve.proc.pid)
    before = proc.memory_info().rss
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", serve.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    # Not reading: without backpressure serve takes the whole 260 MB into memory in seconds.
    peak = before
    for _ in range(40):
        time.sleep(0.1)
        peak = max(peak, proc.memory_info().rss)
    assert peak - before < 24 * 2**20, f"serve grew by {(peak - before) / 2**20:.0f} MB"
    # Reading again: the rest arrives, whole and in order.
    sock.settimeout(60)
    got = 0
    tail = b""
    while True:
        data = sock.recv(1 << 20)
        if not data:
            break
        got += len(data)
        tail = (tail + data)[-64:]
        if b"data: [DONE]" in tail:
            break
    sock.close()
    assert b"[DONE]" in tail and got > 4000 * 65536
    assert serve.health() == 200
