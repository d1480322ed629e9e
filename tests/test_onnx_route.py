"""The onnx route for real: `1bit serve` over ONNX Runtime GenAI with a committed tiny model
(tests/fixtures/onnx-tiny, built by scripts/make_fixtures.py: 2 layers, random weights, SmolLM2's
tokenizer and chat template)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import openai
import pytest
from conftest import Serve, http, sse_events

FIXTURE = Path(__file__).parent / "fixtures" / "onnx-tiny"
HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def onnx_serve(tmp_path_factory):
    serve = Serve(["-m", str(FIXTURE), "--alias", "tiny-onnx"], tmp_path_factory.mktemp("onnx"))
    try:
        yield serve.wait_ready()
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def client(onnx_serve):
    return openai.OpenAI(base_url=onnx_serve.url + "/v1", api_key="unused", max_retries=0)


def test_auto_picks_onnx_for_a_genai_folder(onnx_serve):
    assert "auto picked onnx for onnx" in onnx_serve.log()
    assert "tiny-onnx on onnx (" in onnx_serve.log()


def test_chat_non_stream_through_openai_client(client):
    reply = client.chat.completions.create(model="x", messages=HI, max_tokens=8, temperature=0)
    assert reply.model == "tiny-onnx"
    assert reply.choices[0].message.content
    assert reply.usage.prompt_tokens > 0 and 0 < reply.usage.completion_tokens <= 8


def test_chat_stream_through_openai_client(client):
    chunks = list(client.chat.completions.create(
        model="x", messages=HI, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain = client.chat.completions.create(model="x", messages=HI, max_tokens=8, temperature=0)
    assert text == plain.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_completions_stop_at_max_tokens_with_finish_reason_length(client):
    """ignore_eos (llama-server's extension, honoured here) rules out an early end of sequence."""
    reply = client.completions.create(model="x", prompt="Once upon a time", max_tokens=5,
                                      temperature=0, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 5
    assert reply.choices[0].finish_reason == "length"


def test_temperature_zero_is_deterministic_and_sampling_varies(client):
    runs = {client.chat.completions.create(model="x", messages=HI, max_tokens=12,
                                           temperature=0).choices[0].message.content
            for _ in range(2)}
    assert len(runs) == 1
    sampled = {client.chat.completions.create(model="x", messages=HI, max_tokens=12,
                                              temperature=1.5).choices[0].message.content
               for _ in range(4)}
    assert len(sampled) > 1


def test_stop_sequence_cuts_the_answer(client):
    full = client.chat.completions.create(model="x", messages=HI, max_tokens=16,
                                          temperature=0).choices[0].message.content
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    cut = client.chat.completions.create(model="x", messages=HI, max_tokens=16, temperature=0,
                                         stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert stop not in cut.choices[0].message.content
    assert full.startswith(cut.choices[0].message.content)


def test_speed_figures_in_timings(onnx_serve):
    status, raw = http("POST", onnx_serve.url + "/v1/chat/completions",
                       {"messages": HI, "max_tokens": 6, "temperature": 0})
    timings = json.loads(raw)["timings"]
    assert status == 200
    assert timings["predicted_n"] > 0 and timings["predicted_per_second"] > 0
    assert timings["prompt_n"] > 0


def test_concurrent_requests_are_queued_not_dropped(onnx_serve):
    async def one(session, i):
        body = {"messages": [{"role": "user", "content": f"Number {i}"}], "max_tokens": 6,
                "stream": i % 2 == 0}
        async with session.post(onnx_serve.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            raw = await resp.read()
            return sse_events(raw)[-1] == b"[DONE]" if body["stream"] else json.loads(raw)

    async def run():
        async with aiohttp.ClientSession() as session:
            return await asyncio.gather(*(one(session, i) for i in range(6)))

    results = asyncio.run(run())
    assert all(results)


def test_llama_server_extras_are_501_on_onnx(onnx_serve):
    status, raw = http("POST", onnx_serve.url + "/tokenize", {"content": "hi"})
    assert status == 501 and json.loads(raw)["error"]["type"] == "not_supported_error"


def test_onnx_refuses_parallel(smollm2):
    import subprocess

    from conftest import ONEBIT

    out = subprocess.run([ONEBIT, "serve", "-m", str(FIXTURE), "--parallel", "2"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--parallel: the ONNX server runs one generation at a time" in out.stderr


def test_corrupt_genai_folder_exits_1_with_the_servers_error(start_serve, tmp_path):
    bad = tmp_path / "broken-onnx"
    bad.mkdir()
    (bad / "genai_config.json").write_text("{not json")
    serve = start_serve("-m", str(bad))
    assert serve.wait_exit(60) == 1
    last = serve.log().strip().splitlines()[-1]
    assert last.startswith("1bit serve: error: ")
    assert "cannot load" in last
