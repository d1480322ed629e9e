"""The executor's life under serve: loading, early exit, stalls, crashes, silence, orphans."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from http.client import HTTPException
from pathlib import Path

import psutil
import pytest
from conftest import http, sse_events

from lemonade_onebit.serve import process

STANDIN = Path(__file__).parent / "standins" / "executor.py"

LONG = {"messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
        "max_tokens": 2000, "temperature": 1.0, "stream": True,
        "ignore_eos": True}


def _script(tmp_path, name: str, body: str) -> str:
    """A wrapper executable around the real llama-server (slow start, or never ready)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _standin(tmp_path, flavour: str, **env: str) -> str:
    """A wrapper executable around the stand-in executor, with the misbehaviours in `env`."""
    path = tmp_path / f"{flavour}-standin"
    exports = "".join(f"export {k}={v}\n" for k, v in env.items())
    path.write_text(f'#!/bin/sh\n{exports}exec "{sys.executable}" "{STANDIN}" {flavour} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _executor(serve) -> psutil.Process:
    kids = serve.children()
    assert len(kids) == 1, kids
    return kids[0]


def _grandchild(serve) -> psutil.Process:
    """The process the stand-in started in its own session, from the line it printed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in serve.log().splitlines():
            if line.startswith("grandchild "):
                return psutil.Process(int(line.split()[1]))
        time.sleep(0.05)
    pytest.fail("the stand-in never started its grandchild")


def test_health_is_503_while_loading_then_200(start_serve, tmp_path, smollm2, llama_server):
    gate = tmp_path / "gate"  # the executor starts loading only once the test creates it
    slow = _script(tmp_path, "slow-llama-server",
                   f'while [ ! -e "{gate}" ]; do sleep 0.05; done\nexec "{llama_server}" "$@"')
    serve = start_serve("-m", str(smollm2), "--llama-server", slow)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and serve.health() is None:
        time.sleep(0.05)
    status, raw = http("GET", serve.url + "/health")
    assert status == 503 and json.loads(raw)["status"] == "loading"
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 503 and json.loads(raw)["error"]["code"] == "model_loading"
    gate.touch()
    seen = []
    while time.monotonic() < deadline and 200 not in seen:
        seen.append(serve.health())
        time.sleep(0.05)
    assert seen[-1] == 200
    assert "1bit serve: ready on http://127.0.0.1:" in serve.log()


def test_serve_logs_route_and_ready_lines(start_serve, smollm2, llama_server):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    log = serve.log()
    assert f"1bit serve: {smollm2.stem} on cpu ({llama_server})" in log
    assert f"1bit serve: ready on http://127.0.0.1:{serve.port}" in log


def test_corrupt_gguf_exits_1_with_executor_error_line(start_serve, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a gguf file" * 100)
    serve = start_serve("-m", str(bad))
    assert serve.wait_exit() == 1
    last = serve.log().strip().splitlines()[-1]
    assert last.startswith("1bit serve: error: ")
    assert "llama-server exited with code" in last
    assert "fail" in last.lower() or "error" in last.lower()


def test_missing_model_file_exits_1_with_reason(start_serve, tmp_path):
    serve = start_serve("-m", str(tmp_path / "nowhere.gguf"))
    assert serve.wait_exit() == 1
    assert "model not found" in serve.log()
    assert "Traceback" not in serve.log()


def test_executor_that_never_gets_ready_fails_after_stall(start_serve, tmp_path, smollm2):
    silent = _script(tmp_path, "silent-llama-server", "exec sleep 600")
    serve = start_serve("-m", str(smollm2), "--llama-server", silent, "--load-timeout", "1")
    assert serve.wait_exit(30) == 1
    assert "made no progress for 1 s" in serve.log()


def test_sigterm_stops_serve_and_executor(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    child = _executor(serve)
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.wait_exit(10) == 0
    child.wait(timeout=2)
    assert not child.is_running()


def test_sigkill_of_serve_mid_request_leaves_no_orphan(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    child = _executor(serve)
    reader = threading.Thread(
        target=lambda: _swallow(http, "POST", serve.url + "/v1/chat/completions", LONG),
        daemon=True,
    )
    reader.start()
    _wait_processing(serve.url)
    serve.proc.kill()
    serve.proc.wait()
    gone, alive = psutil.wait_procs([child], timeout=2)
    assert not alive, "llama-server outlived a SIGKILLed serve"


def test_executor_crash_mid_stream_sends_error_event_and_health_reports_it(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    child = _executor(serve)
    req = urllib.request.Request(serve.url + "/v1/chat/completions",
                                 data=json.dumps(LONG).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        first = resp.readline()
        assert first.startswith(b"data: ")
        child.kill()
        rest = resp.read()
    events = sse_events(first + rest)
    error = json.loads(events[-1])["error"]
    assert error["type"] == "server_error" and "executor failed" in error["message"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and serve.health() != 503:
        time.sleep(0.05)
    status, raw = http("GET", serve.url + "/health")
    assert status == 503
    assert json.loads(raw)["status"] == "error"
    assert "exited with code -9" in json.loads(raw)["message"]
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 502 and json.loads(raw)["error"]["code"] == "executor_failed"


def test_silent_executor_gets_502(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2), "--executor-timeout", "1").wait_ready()
    child = _executor(serve)
    child.suspend()
    try:
        started = time.monotonic()
        status, raw = http("POST", serve.url + "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert status == 502
        assert json.loads(raw)["error"]["code"] == "executor_timeout"
        assert time.monotonic() - started < 10
    finally:
        child.resume()


def test_client_disconnect_cancels_the_generation(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    body = json.dumps(LONG).encode()
    with socket.create_connection(("127.0.0.1", serve.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        _wait_processing(serve.url)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _processing(serve.url):
        time.sleep(0.05)
    assert not _processing(serve.url), "llama-server kept generating for a client that left"


def test_api_key_is_required_except_for_health(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2), "--api-key", "s3cret").wait_ready()
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    status, raw = http("POST", serve.url + "/v1/chat/completions", chat)
    assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
    status, _ = http("POST", serve.url + "/v1/chat/completions", chat,
                     {"Authorization": "Bearer wrong"})
    assert status == 401
    status, _ = http("GET", serve.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, _ = http("POST", serve.url + "/v1/chat/completions", chat,
                     {"Authorization": "Bearer s3cret"})
    assert status == 200


def test_private_executor_port_refuses_direct_requests(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    child = _executor(serve)
    port = int(child.cmdline()[child.cmdline().index("--port") + 1])
    host = child.cmdline()[child.cmdline().index("--host") + 1]
    assert host == "127.0.0.1"
    status, _ = http("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 401


def test_binds_loopback_by_default(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    addrs = {c.laddr.ip for c in psutil.Process(serve.proc.pid).net_connections("tcp")
             if c.status == psutil.CONN_LISTEN}
    assert addrs == {"127.0.0.1"}


def test_port_in_use_exits_1_before_starting_the_executor(start_serve, smollm2):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        serve = start_serve("-m", str(smollm2), port=taken.getsockname()[1])
        assert serve.wait_exit(30) == 1
    assert "cannot listen on 127.0.0.1:" in serve.log()
    assert "ready on" not in serve.log()


def _swallow(fn, *args) -> None:
    try:
        fn(*args)
    except (OSError, HTTPException):
        pass


def _processing(url: str) -> bool:
    status, raw = http("GET", url + "/slots", timeout=5)
    return status == 200 and any(s["is_processing"] for s in json.loads(raw))


def _wait_processing(url: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _processing(url):
            return
        time.sleep(0.05)
    pytest.fail("the generation never started")


def test_health_fails_at_once_when_the_executor_exits_though_a_grandchild_holds_its_output(
        start_serve, tmp_path):
    model = tmp_path / "tiny.1bp"
    model.write_bytes(b"1bp")
    serve = start_serve("-m", str(model), env={
        "ONEBIT_DS4": _standin(tmp_path, "ds4", STANDIN_GRANDCHILD="1")}).wait_ready()
    grandchild = _grandchild(serve)
    try:
        psutil.Process(serve.proc.pid).children()[0].kill()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and serve.health() != 503:
            time.sleep(0.02)
        status, raw = http("GET", serve.url + "/health")
        assert status == 503, "the executor's exit was not seen while its grandchild lived"
        assert "exited with code -9" in json.loads(raw)["message"]
        assert grandchild.is_running()  # the pipe was still held, so the drain never ended
    finally:
        grandchild.kill()


def test_load_fails_at_once_when_the_executor_exits_though_a_grandchild_holds_its_output(
        start_serve, tmp_path):
    model = tmp_path / "tiny.1bp"
    model.write_bytes(b"1bp")
    serve = start_serve("-m", str(model), env={
        "ONEBIT_DS4": _standin(tmp_path, "ds4", STANDIN_GRANDCHILD="1", STANDIN_EXIT="3")})
    grandchild = _grandchild(serve)
    try:
        assert serve.wait_exit(15) == 1  # not at the 600 s stall timeout
        last = serve.log().strip().splitlines()[-1]
        assert "exited with code 3: error: the stand-in fails on purpose" in last
    finally:
        grandchild.kill()


PDEATHSIG_AND_PARENT = ("import ctypes, os; sig = ctypes.c_int(); "
                        "ctypes.CDLL(None).prctl(2, ctypes.byref(sig)); "
                        "print(sig.value, os.getppid())")


@pytest.mark.executor
def test_spawn_sets_the_death_signal_without_preexec_fn(monkeypatch):
    calls = []
    popen = subprocess.Popen

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording)
    child = process.spawn([sys.executable, "-c", PDEATHSIG_AND_PARENT])
    out, _ = child.communicate(timeout=30)
    assert calls and all(c.get("preexec_fn") is None for c in calls)
    # SIGKILL when serve dies, and the executor itself is serve's child: no wrapper in between.
    assert out.split() == [str(int(signal.SIGKILL)).encode(), str(os.getpid()).encode()]
