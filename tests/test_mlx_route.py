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


@pytest.mark.parametrize("stream", [False, True])
def test_mlx_refusals_come_in_the_openai_shape(mlx_serve, stream):
    """mlx_lm.server answers a message that is not an object with `{"error": "'str' object has
    no attribute 'get'"}`: serve relays it as an OpenAI error."""
    status, raw = http("POST", mlx_serve.url + "/v1/chat/completions",
                       {"model": "x", "messages": ["hi"], "max_tokens": 2, "stream": stream})
    assert status == 400, raw
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == 400
    assert error["message"] == ("the mlx executor refused the request: "
                                "'str' object has no attribute 'get'")


def test_mlx_error_shapes_without_a_server():
    from lemonade_onebit.backends.mlx import MlxLauncher

    launcher = MlxLauncher()
    status, body = launcher.upstream_error(404, b'{"error": "no template"}')
    assert status == 400
    assert json.loads(body) == {"error": {
        "message": "the mlx executor refused the request: no template",
        "type": "invalid_request_error", "code": 400}}
    status, body = launcher.upstream_error(411, b"Length Required")
    assert status == 411 and "Length Required" in json.loads(body)["error"]["message"]
    shaped = b'{"error": {"message": "m", "type": "server_error", "code": 502}}'
    assert launcher.upstream_error(502, shaped) is None
