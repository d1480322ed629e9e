"""`1bit serve --laya`: one decision per conversation, lazy start of a second device's executor
through real backends (llama-server on cpu, onebit-onnx-server on onnx), and the route header."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from http.client import HTTPException
from pathlib import Path
from types import SimpleNamespace

import psutil
from conftest import http, sse_events, wait_for

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
    assert "laya: onnx: ready" in log
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
    pool = SimpleNamespace(primary=SimpleNamespace(device="cpu"), unusable=frozenset)
    router = laya.LayaRouter(None, policy, pool, logged.append)
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


def test_decide_sends_an_unusable_device_to_the_default():
    policy = {"min_confidence": 0.0, "default": "cpu", "classes": {
        "short": {"device": "onnx", "why": "small answers"}}}
    assert laya.decide(policy, "hi", "cpu", frozenset())[0][::2] == ("short", "onnx")
    (klass, _, device), why = laya.decide(policy, "hi", "cpu", frozenset({"onnx"}))
    assert (klass, device) == ("short", "cpu") and "onnx is not available here" in why


# Lifecycle of a lazily started backend: the primary is the ds4 stand-in (it starts in well under
# a second), and "short" conversations go to cpu, whose executor each test chooses.

STANDIN = ROOT / "tests" / "standins" / "executor.py"
HI = [{"role": "user", "content": "hi"}]


def _script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _standin(tmp_path: Path, flavour: str, **env: str) -> str:
    exports = "".join(f"export {k}={v}\n" for k, v in env.items())
    return _script(tmp_path, f"{flavour}-standin",
                   f'{exports}exec "{sys.executable}" "{STANDIN}" {flavour} "$@"')


def _laya_serve(start_serve, tmp_path: Path, smollm2: Path, lazy: str, *args: str,
                device: str = "cpu", env: dict | None = None, primary: str | None = None):
    model = tmp_path / "tiny.1bp"
    model.write_bytes(b"1bp")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"min_confidence": 0.0, "default": "ds4", "classes": {
        "short": {"device": device, "why": "test", "model": str(smollm2)}}}))
    return start_serve("-m", str(model), "--laya", "--route-policy", str(policy), *args, env={
        "ONEBIT_DS4": primary or _standin(tmp_path, "ds4"), "ONEBIT_LLAMA_SERVER": lazy,
        **(env or {})})


def _gone(pid: int, timeout: float = 5) -> bool:
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    _, alive = psutil.wait_procs([proc], timeout=timeout)
    return not alive


def _route(headers: dict) -> str:
    return headers["X-1bit-Route"].split()[-1]


def test_a_lazy_start_that_stalls_stops_its_executor(start_serve, tmp_path, smollm2):
    pid_file = tmp_path / "pid"
    stalled = _script(tmp_path, "stalled-llama-server", f'echo $$ > "{pid_file}"\nexec sleep 600')
    serve = _laya_serve(start_serve, tmp_path, smollm2, stalled, "--load-timeout", "2")
    serve.wait_ready()
    status, headers, _ = chat(serve.url, HI)
    assert status == 200 and _route(headers) == "ds4"
    assert "laya: cpu cannot serve" in serve.log() and "made no progress for 2 s" in serve.log()
    assert _gone(int(pid_file.read_text())), "the stalled executor was left running"


def test_serve_stopping_mid_start_stops_the_starting_executor(start_serve, tmp_path, smollm2):
    # The executor's own child is in its process group: only a stop of the group reaches it
    # (the kernel's parent-death signal reaches the executor alone).
    starting = _script(tmp_path, "starting-llama-server", "sleep 600")
    serve = _laya_serve(start_serve, tmp_path, smollm2, starting).wait_ready()
    threading.Thread(target=_swallow, args=(chat, serve.url, HI), daemon=True).start()
    sleeper = wait_for(lambda: next((p for p in serve.children() if p.name() == "sleep"), None),
                        "the starting executor")
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.wait_exit(10) == 0
    assert _gone(sleeper.pid), "the executor of a start in progress outlived serve"


def test_sigterm_stops_two_backends_within_one_grace_period(start_serve, tmp_path, smollm2):
    lazy = _standin(tmp_path, "llama-server", STANDIN_IGNORE_TERM="1")
    primary = _standin(tmp_path, "ds4", STANDIN_IGNORE_TERM="1")
    serve = _laya_serve(start_serve, tmp_path, smollm2, lazy, primary=primary).wait_ready()
    status, headers, _ = chat(serve.url, HI)
    assert status == 200 and _route(headers) == "cpu"
    executors = serve.children()
    assert len(executors) == 2
    started = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.wait_exit(30) == 0
    took = time.monotonic() - started
    # Both ignore SIGTERM: one shared 5 s deadline, then SIGKILL (Lemonade kills serve at 5 s).
    assert took < 7.5, f"stopping two executors took {took:.1f} s"
    assert all(_gone(p.pid, 0) for p in executors)


def _ask_and_leave(serve, launches) -> None:
    """Send a first turn, wait until it has started the cpu executor, then hang up."""
    body = json.dumps({"messages": HI, "max_tokens": 4}).encode()
    with socket.create_connection(("127.0.0.1", serve.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_for(launches.exists, "the start of cpu")


def test_a_device_found_unusable_is_not_started_again_for_earlier_conversations(
        start_serve, tmp_path, smollm2):
    gate, launches = tmp_path / "gate", tmp_path / "launches"
    failing = _script(tmp_path, "failing-llama-server",
                      f'echo start >> "{launches}"\n'
                      f'while [ ! -e "{gate}" ]; do sleep 0.05; done\n'
                      'echo "error: cannot load the model"\nexit 1')
    serve = _laya_serve(start_serve, tmp_path, smollm2, failing).wait_ready()
    _ask_and_leave(serve, launches)
    # That client left while cpu was starting; its conversation was decided for cpu.
    assert serve.health() == 200  # a round trip: serve has seen the disconnect
    gate.touch()
    status, headers, _ = chat(serve.url, [{"role": "user", "content": "thanks"}])
    assert status == 200 and _route(headers) == "ds4"
    turn2 = [*HI, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    status, headers, _ = chat(serve.url, turn2)
    assert status == 200 and _route(headers) == "ds4"
    assert launches.read_text().split() == ["start"], "an unusable device was started again"


def test_a_start_goes_on_when_the_client_that_asked_for_it_leaves(start_serve, tmp_path, smollm2):
    gate, launches = tmp_path / "gate", tmp_path / "launches"
    gated = _script(tmp_path, "gated-llama-server",
                    f'echo start >> "{launches}"\n'
                    f'while [ ! -e "{gate}" ]; do sleep 0.05; done\n'
                    f'exec "{sys.executable}" "{STANDIN}" llama-server "$@"')
    serve = _laya_serve(start_serve, tmp_path, smollm2, gated).wait_ready()
    _ask_and_leave(serve, launches)
    assert serve.health() == 200  # a round trip: serve has seen the disconnect
    gate.touch()
    turn2 = [*HI, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    status, headers, raw = chat(serve.url, turn2)
    assert status == 200 and _route(headers) == "cpu"
    assert json.loads(raw)["choices"][0]["message"]["content"] == "hello from llama-server"
    assert launches.read_text().split() == ["start"]


def test_health_answers_while_a_decision_asks_vulkaninfo(start_serve, tmp_path, smollm2):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked, gate = tmp_path / "asked", tmp_path / "gate"
    _script(bin_dir, "vulkaninfo", f'touch "{asked}"\nwhile [ ! -e "{gate}" ]; do sleep 0.05; done')
    # Detection reads the real machine here ("/"), so it asks the vulkaninfo on PATH.
    serve = _laya_serve(start_serve, tmp_path, smollm2, _standin(tmp_path, "llama-server"),
                        device="vulkan", env={"PATH": f"{bin_dir}:{os.environ['PATH']}",
                                              "ONEBIT_SYSFS_ROOT": "/"})
    serve.wait_ready()
    reply: dict = {}
    asking = threading.Thread(target=lambda: reply.update(status=chat(serve.url, HI)[0]),
                              daemon=True)
    asking.start()
    try:
        wait_for(asked.exists, "the decision ask vulkaninfo")
        started = time.monotonic()
        status = serve.health()  # None when it does not answer within 2 s
        took = time.monotonic() - started
    finally:
        gate.touch()
    asking.join(60)
    assert status == 200 and took < 1, f"/health took {took:.2f} s while vulkaninfo ran"
    assert reply["status"] == 200


def _swallow(fn, *args) -> None:
    try:
        fn(*args)
    except (OSError, HTTPException):
        pass


# A lazy backend that dies: restarted for its conversations, or, when it cannot come back, its
# conversations go to the fallback; every routed reply says where it went, and /health says
# how each backend is.

def _post(url: str, messages: list[dict]) -> tuple[int, dict, bytes]:
    """`chat`, with an error reply returned instead of raised."""
    import urllib.error

    try:
        return chat(url, messages)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _health(serve) -> dict:
    status, raw = http("GET", serve.url + "/health")
    body = json.loads(raw)
    assert (status == 200) == (body["status"] == "ok"), (status, body)
    return body


def _lazy(serve) -> psutil.Process:
    """The cpu backend's executor (the llama-server stand-in)."""
    return wait_for(lambda: next((p for p in serve.children()
                                   if "llama-server" in " ".join(p.cmdline())), None),
                     "the cpu executor")


def test_a_killed_lazy_backend_is_restarted_for_its_conversation(start_serve, tmp_path, smollm2):
    serve = _laya_serve(start_serve, tmp_path, smollm2,
                        _standin(tmp_path, "llama-server")).wait_ready()
    assert _route(chat(serve.url, HI)[1]) == "cpu"
    first = _lazy(serve)
    first.kill()
    wait_for(lambda: _health(serve)["backends"]["cpu"] == "restarting", "cpu restarting")
    status, headers, raw = chat(serve.url, HI)
    assert status == 200 and _route(headers) == "cpu"
    assert json.loads(raw)["choices"][0]["message"]["content"] == "hello from llama-server"
    assert _lazy(serve).pid != first.pid
    assert _health(serve) == {"status": "ok", "backends": {"ds4": "ready", "cpu": "ready"}}
    log = serve.log()
    assert "1bit serve: cpu: the executor died: " in log and "killed by SIGKILL" in log
    assert "1bit serve: cpu: the executor is back and ready" in log


def test_a_lazy_backend_that_cannot_come_back_sends_old_and_new_conversations_to_the_fallback(
        start_serve, tmp_path, smollm2):
    broken = tmp_path / "broken"  # once it exists, the cpu executor exits at every start
    lazy = _standin(tmp_path, "llama-server", STANDIN_EXIT_IF=str(broken))
    serve = _laya_serve(start_serve, tmp_path, smollm2, lazy).wait_ready()
    status, headers, _ = chat(serve.url, HI)
    assert status == 200 and _route(headers) == "cpu"
    assert _health(serve) == {"status": "ok", "backends": {"ds4": "ready", "cpu": "ready"}}
    broken.touch()
    _lazy(serve).kill()
    wait_for(lambda: _health(serve)["backends"]["cpu"] == "restarting", "cpu restarting")
    status, headers, raw = chat(serve.url, HI)  # decided for cpu: waits, then falls back
    assert status == 200 and _route(headers) == "ds4"
    assert json.loads(raw)["choices"][0]["message"]["content"] == "hello from ds4"
    status, headers, _ = chat(serve.url, [{"role": "user", "content": "thanks"}])
    assert status == 200 and _route(headers) == "ds4"
    assert _health(serve) == {"status": "ok", "backends": {"ds4": "ready", "cpu": "unusable"}}
    log = serve.log()
    assert "1bit serve: cpu: not restarting it again: the executor died 5 times in a row" in log
    assert "laya: cpu cannot serve" in log
    assert serve.proc.poll() is None  # a Laya backend's deaths never end serve


def test_a_routed_reply_carries_its_route_when_the_backend_dies_under_it(
        start_serve, tmp_path, smollm2):
    lazy = _standin(tmp_path, "llama-server", STANDIN_DIE_ON_REQUEST="1")
    serve = _laya_serve(start_serve, tmp_path, smollm2, lazy).wait_ready()
    status, headers, raw = _post(serve.url, HI)
    assert status == 502 and json.loads(raw)["error"]["code"] == "executor_failed"
    assert _route(headers) == "cpu"
