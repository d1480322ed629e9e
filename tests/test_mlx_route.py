"""The mlx route for real on Linux: `1bit serve` over `mlx_lm.server` (MLX's CPU build) with the
committed tiny MLX folder (tests/fixtures/mlx-tiny: the same random 2-layer llama as onnx-tiny)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from conftest import Serve, http, sse_events

FIXTURE = Path(__file__).parent / "fixtures" / "mlx-tiny"
HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def mlx_serve(tmp_path_factory):
    serve = Serve(["-m", str(FIXTURE), "--device", "mlx", "--alias", "tiny-mlx"],
                  tmp_path_factory.mktemp("mlx"))
    try:
        yield serve.wait_ready(timeout=120)
    finally:
        serve.stop()


def test_mlx_chat_through_openai_client(mlx_serve):
    client = openai.OpenAI(base_url=mlx_serve.url + "/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="tiny-mlx", messages=HI, max_tokens=6,
                                           temperature=0)
    assert reply.model == "tiny-mlx"
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0
    assert "mlx_lm.server" in mlx_serve.log()


def test_mlx_stream_ends_with_done(mlx_serve):
    status, raw = http("POST", mlx_serve.url + "/v1/chat/completions",
                       {"model": "tiny-mlx", "messages": HI, "max_tokens": 4, "stream": True})
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == b"[DONE]"
    assert any(json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]
               if json.loads(e).get("choices"))


def test_mlx_and_onnx_agree_on_the_same_weights(mlx_serve):
    """Both fixtures hold one random model: greedy decoding must give the same words."""
    from lemonade_onebit.executors.onnx_server import Engine, Job

    engine = Engine(FIXTURE.parent / "onnx-tiny", None)
    onnx_text = engine.generate(Job(engine.encode_chat(HI), 4, 0.0, 1.0, []), lambda _: None).text
    status, raw = http("POST", mlx_serve.url + "/v1/chat/completions",
                       {"model": "x", "messages": HI, "max_tokens": 4, "temperature": 0})
    assert status == 200
    assert json.loads(raw)["choices"][0]["message"]["content"].strip() == onnx_text.strip()


def test_auto_picks_mlx_for_an_mlx_folder(start_serve):
    serve = start_serve("-m", str(FIXTURE)).wait_ready(timeout=120)
    assert "auto picked mlx for mlx" in serve.log()
