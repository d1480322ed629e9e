"""`1bit serve --laya`: one decision per conversation, lazy start of a second device's executor
through real backends (llama-server on cpu, onebit-onnx-server on onnx), and the route header."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import http, sse_events

from lemonade_onebit.serve import laya

ROOT = Path(__file__).resolve().parent.parent
ONNX_TINY = ROOT / "tests" / "fixtures" / "onnx-tiny"

CODE = {"role": "user", "content": "Write a Python function that adds two numbers."}


def chat(url: str, messages: list[dict], stream: bool = False) -> tuple[int, dict, bytes]:
    import urllib.request

    body = json.dumps({"messages": messages, "max_tokens": 4, "stream": stream}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return resp.status, dict(resp.headers), resp.read()


def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"min_confidence": 0.0, "default": "cpu", "classes": {
        "code": {"device": "cpu", "why": "llama-server"},
        "prose": {"device": "cpu", "why": "llama-server"},
        "short": {"device": "onnx", "why": "small answers", "model": str(ONNX_TINY)},
        "long_doc": {"device": "cpu", "why": "llama-server"}}}))
    return path


def executor_names(serve) -> list[str]:
    return sorted(" ".join(c.cmdline()[:3]) for c in serve.children())


def test_routes_by_conversation_and_starts_the_second_device_lazily(start_serve, tmp_path):
    serve = start_serve("-m", "SmolLM2-135M-Instruct-1bit", "--laya", "--route-policy",
                        str(policy_file(tmp_path))).wait_ready()
    status, headers, _ = chat(serve.url, [CODE])
    assert status == 200 and headers["X-1bit-Route"].split()[::2] == ["code", "cpu"]
    assert not any("onnx" in n for n in executor_names(serve))  # not started yet

    status, headers, raw = chat(serve.url, [{"role": "user", "content": "hi"}])
    klass, confidence, device = headers["X-1bit-Route"].split()
    assert (klass, device) == ("short", "onnx") and 0 <= float(confidence) <= 1
    assert json.loads(raw)["choices"][0]["message"]["role"] == "assistant"
    assert any("onnx" in n for n in executor_names(serve))  # started on first pick

    # The second turn of the first conversation keeps its decision, though "thanks" is short.
    turn2 = [CODE, {"role": "assistant", "content": "def add(a, b): return a + b"},
             {"role": "user", "content": "thanks"}]
    assert chat(serve.url, turn2)[1]["X-1bit-Route"].split()[::2] == ["code", "cpu"]
    # A new conversation decides again; a stream carries the header too.
    status, headers, raw = chat(serve.url, [{"role": "user", "content": "thanks"}], stream=True)
    assert headers["X-1bit-Route"].split()[::2] == ["short", "onnx"]
    assert sse_events(raw)[-1] == b"[DONE]"

    log = serve.log()
    assert log.count("laya: new conversation:") == 3
    assert "laya: onnx ready" in log
    serve.stop()
    assert "1bit serve: requests routed: cpu 2 onnx 2" in serve.log()


def test_a_device_that_cannot_start_falls_back_to_the_default(start_serve, tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"min_confidence": 0.0, "default": "cpu", "classes": {
        "short": {"device": "onnx", "model": str(tmp_path / "missing-folder")}}}))
    serve = start_serve("-m", "SmolLM2-135M-Instruct-1bit", "--laya", "--route-policy",
                        str(path)).wait_ready()
    status, headers, _ = chat(serve.url, [{"role": "user", "content": "hi"}])
    assert status == 200 and headers["X-1bit-Route"].endswith(" cpu")
    assert "laya: onnx cannot serve" in serve.log()


def test_conversation_key_is_the_messages_up_to_the_first_user_message():
    system = {"role": "system", "content": "Be brief."}
    first = {"role": "user", "content": "hi"}
    k1, text = laya.conversation_key({"messages": [system, first]})
    k2, _ = laya.conversation_key({"messages": [system, first, {"role": "assistant",
                                                                 "content": "hello"},
                                                {"role": "user", "content": "more"}]})
    k3, _ = laya.conversation_key({"messages": [first]})
    assert k1 == k2 and k1 != k3 and text == "hi"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                       {"type": "text", "text": "b"}]}]}
    assert laya.conversation_key(parts)[1] == "a b"


def test_decisions_are_kept_per_conversation_in_an_lru(monkeypatch):
    monkeypatch.setattr(laya, "CONVERSATIONS", 2)
    policy = {"min_confidence": 0.0, "default": "cpu", "classes": {}}
    logged: list[str] = []
    router = laya.LayaRouter(None, policy, SimpleNamespace(device="cpu"), None, logged.append)
    a = {"messages": [{"role": "user", "content": "Write a Go HTTP server."}]}
    b = {"messages": [{"role": "user", "content": "hi"}]}
    c = {"messages": [{"role": "user", "content": "Explain the French Revolution."}]}
    assert router.decide(a)[0] == "code" and router.decide(b)[0] == "short"
    router.decide(a)  # a is now the most recent
    router.decide(c)  # evicts b
    assert len(logged) == 3
    router.decide(a)
    assert len(logged) == 3  # still known
    router.decide(b)
    assert len(logged) == 4  # forgotten, decided again
