"""`1bit serve` with the real llama-server and SmolLM2, driven by the OpenAI client and raw HTTP;
and serve over a llama-server stand-in that closes the connections serve pools."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from pathlib import Path

import aiohttp
import openai
import pytest
from conftest import http, sse_events

PARIS = [{"role": "user", "content": "What is the capital of France? One word."}]


@pytest.fixture(scope="module")
def client(smol_serve):
    return openai.OpenAI(base_url=smol_serve.url + "/v1", api_key="unused", max_retries=0)


def test_chat_non_stream_answers_paris_with_alias_and_usage(client):
    reply = client.chat.completions.create(model="anything", messages=PARIS, max_tokens=12,
                                           temperature=0)
    assert "Paris" in reply.choices[0].message.content
    assert reply.model == "smol"
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0


def test_chat_stream_carries_alias_and_usage(client):
    chunks = list(client.chat.completions.create(
        model="smol", messages=PARIS, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert {c.model for c in chunks} == {"smol"}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_completions_non_stream(client):
    reply = client.completions.create(model="smol", prompt="The capital of France is",
                                      max_tokens=8, temperature=0)
    assert reply.choices[0].text.strip()
    assert reply.model == "smol"
    assert reply.usage.total_tokens > 0


def test_count_to_five_streams_many_chunks_and_done(smol_serve):
    status, raw = http("POST", smol_serve.url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 40, "temperature": 0, "stream": True,
    })
    assert status == 200
    events = sse_events(raw)
    assert len(events) > 3
    assert events[-1] == b"[DONE]"


def test_models_lists_served_id_and_device(smol_serve):
    status, raw = http("GET", smol_serve.url + "/v1/models")
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "list"
    assert body["data"][0]["id"] == "smol"
    assert body["data"][0]["owned_by"] == "1bit"
    assert body["data"][0]["device"] == "cpu"


def test_llama_server_extras_are_relayed(smol_serve):
    status, raw = http("POST", smol_serve.url + "/tokenize", {"content": "hello world"})
    assert status == 200 and json.loads(raw)["tokens"]
    status, raw = http("GET", smol_serve.url + "/props")
    assert status == 200 and "default_generation_settings" in json.loads(raw)
    status, raw = http("GET", smol_serve.url + "/slots")
    assert status == 200 and isinstance(json.loads(raw), list)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (b'{"max_tokens": 4}', 400, "missing_field"),
    ],
)
def test_bad_bodies_get_openai_errors(smol_serve, body, status, code):
    got, raw = http("POST", smol_serve.url + "/v1/chat/completions", body,
                    {"Content-Type": "application/json"})
    assert got == status
    error = json.loads(raw)["error"]
    assert error["code"] == code and error["message"] and error["type"]


def test_twenty_megabyte_body_is_413(smol_serve):
    body = b'{"messages": "' + b"x" * (20 * 1024 * 1024) + b'"}'
    status, raw = http("POST", smol_serve.url + "/v1/chat/completions", body,
                       {"Content-Type": "application/json"})
    assert status == 413
    assert json.loads(raw)["error"]["code"] == "body_too_large"


def test_unknown_route_is_404_in_openai_shape(smol_serve):
    status, raw = http("GET", smol_serve.url + "/v1/nothing-here")
    assert status == 404
    assert json.loads(raw)["error"]["type"] == "not_found_error"


def test_wrong_method_is_405(smol_serve):
    status, raw = http("GET", smol_serve.url + "/v1/chat/completions")
    assert status == 405
    assert "error" in json.loads(raw)


def test_embeddings_without_flag_is_refused(smol_serve):
    status, raw = http("POST", smol_serve.url + "/v1/embeddings", {"input": "hi"})
    assert status == 501
    assert "--embedding" in json.loads(raw)["error"]["message"]


def test_32_concurrent_streams_complete_with_well_formed_sse(smol_serve):
    async def one(session: aiohttp.ClientSession, i: int) -> list[bytes]:
        body = {"messages": [{"role": "user", "content": f"Say a word about the number {i}."}],
                "max_tokens": 12, "temperature": 0, "stream": True}
        async with session.post(smol_serve.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            return sse_events(await resp.read())

    async def run() -> list[list[bytes]]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=240)) as session:
            return await asyncio.gather(*(one(session, i) for i in range(32)))

    results = asyncio.run(run())
    assert len(results) == 32
    for events in results:
        assert events[-1] == b"[DONE]"
        payloads = [json.loads(e) for e in events[:-1]]
        assert payloads and all(p["object"] == "chat.completion.chunk" for p in payloads)


CLOSING_EXECUTOR = r"""
import asyncio, json, sys

mode, record = sys.argv[1], sys.argv[2]  # mode: once (per connection) | never
port = int(sys.argv[sys.argv.index("--port") + 1])
chats = []  # chat requests each connection carried, in the order they were accepted
REPLY = json.dumps({"object": "chat.completion", "model": "x", "choices": []}).encode()


async def handle(reader, writer):
    connection = len(chats)
    chats.append(0)
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            break
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        body = b'{"status": "ok"}'
        if not head.startswith(b"GET /health"):
            chats[connection] += 1
            with open(record, "w") as f:
                json.dump([n for n in chats if n], f)
            if mode == "never" or chats[connection] > 1:
                break  # closed with the request unanswered, as an idle close meets it
            body = REPLY
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        await writer.drain()
    writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


asyncio.run(main())
"""


def _closing_executor(tmp_path: Path, mode: str) -> tuple[str, Path]:
    """A llama-server stand-in that keeps connections alive but closes one, unanswered, when a
    chat arrives on it after it answered one (`once`) or at the first chat (`never`)."""
    script, record = tmp_path / "closing_executor.py", tmp_path / "chats.json"
    script.write_text(CLOSING_EXECUTOR)
    wrapper = tmp_path / "closing-llama-server"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" {mode} "{record}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper), record


def test_a_pooled_connection_the_executor_closed_is_retried_on_a_new_one(start_serve, smollm2,
                                                                        tmp_path):
    """llama-server closes idle keep-alive connections: a request that meets such a close on
    serve's pooled connection goes out again on a fresh one instead of failing with a 502."""
    wrapper, record = _closing_executor(tmp_path, "once")
    serve = start_serve("-m", str(smollm2), "--alias", "smol", "--llama-server", wrapper)
    serve.wait_ready()
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    for _ in range(2):
        status, raw = http("POST", serve.url + "/v1/chat/completions", chat)
        assert status == 200, raw
        assert json.loads(raw)["model"] == "smol"
    assert json.loads(record.read_text()) == [2, 1]  # the second chat met the close, then a new one


def test_an_executor_that_closes_twice_gets_a_502_after_one_retry(start_serve, smollm2, tmp_path):
    wrapper, record = _closing_executor(tmp_path, "never")
    serve = start_serve("-m", str(smollm2), "--llama-server", wrapper).wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 502 and json.loads(raw)["error"]["code"] == "executor_failed"
    assert json.loads(record.read_text()) == [1, 1]
