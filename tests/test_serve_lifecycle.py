"""The executor's life under serve: loading, early exit, stalls, deaths and restarts, silence,
orphans; and serve's own connections: shutdown, half-close, header timeout, the API key."""

from __future__ import annotations

import asyncio
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
from http.client import HTTPConnection, HTTPException
from pathlib import Path

import psutil
import pytest
from conftest import http, sse_events, wait_for

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
        found = _grandchildren(serve)
        if found:
            return found[0]
        time.sleep(0.05)
    pytest.fail("the stand-in never started its grandchild")


def _grandchildren(serve) -> list[psutil.Process]:
    """Every grandchild the stand-ins printed, a restarted one's too, that still runs."""
    found = []
    for line in serve.log().splitlines():
        if line.startswith("grandchild "):
            try:
                found.append(psutil.Process(int(line.split()[1])))
            except psutil.NoSuchProcess:
                pass
    return found


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
    # the cause, not the wrap-up lines llama-server logs after it
    assert last.endswith("invalid magic characters: 'this', expected 'GGUF'"), last


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


HI = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _stream(url: str):
    """A LONG stream, open, with its first event read."""
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(LONG).encode(),
                                 headers={"Content-Type": "application/json"})
    resp = urllib.request.urlopen(req, timeout=120)
    first = resp.readline()
    assert first.startswith(b"data: ")
    return resp, first


def test_a_killed_executor_is_logged_and_restarted_for_the_next_request(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2)).wait_ready()
    child = _executor(serve)
    resp, first = _stream(serve.url)
    with resp:
        child.kill()  # as the OOM killer does
        rest = resp.read()
    error = json.loads(sse_events(first + rest)[-1])["error"]
    assert error["type"] == "server_error" and "executor failed" in error["message"]
    wait_for(lambda: serve.health() == 503, "serve notice the death")
    status, raw = http("POST", serve.url + "/v1/chat/completions", HI)
    assert status == 200, raw  # it waited for the restart
    assert _executor(serve).pid != child.pid
    assert serve.health() == 200
    log = serve.log()
    died = next(line for line in log.splitlines() if "the executor died" in line)
    assert died.startswith("1bit serve: cpu: the executor died: llama-server was killed by "
                           "SIGKILL (signal 9)")
    assert "listening" not in died and "launch_slot_" not in died
    assert "1bit serve: cpu: restarting the executor in 0.5 s" in log
    assert "1bit serve: cpu: the executor is back and ready" in log


def test_requests_wait_for_a_restart_and_health_says_restarting(start_serve, tmp_path, smollm2,
                                                                 llama_server):
    gate, launches = tmp_path / "gate", tmp_path / "launches"
    # The first launch starts at once; the restart waits for the test's gate.
    gated = _script(tmp_path, "restart-gated-llama-server",
                    f'echo start >> "{launches}"\n'
                    f'if [ "$(wc -l < "{launches}")" -gt 1 ]; then\n'
                    f'  while [ ! -e "{gate}" ]; do sleep 0.05; done\nfi\n'
                    f'exec "{llama_server}" "$@"')
    serve = start_serve("-m", str(smollm2), "--llama-server", gated).wait_ready()
    _executor(serve).kill()
    wait_for(lambda: len(launches.read_text().split()) == 2, "the restart begin")
    status, raw = http("GET", serve.url + "/health")
    health = json.loads(raw)
    assert status == 503 and health["status"] == "restarting"
    assert "killed by SIGKILL" in health["message"]
    reply: dict = {}
    asking = threading.Thread(target=lambda: reply.update(
        zip(("status", "raw"), http("POST", serve.url + "/v1/chat/completions", HI))),
        daemon=True)
    asking.start()
    serve_proc = psutil.Process(serve.proc.pid)
    wait_for(lambda: any(c.laddr.port == serve.port and c.status == psutil.CONN_ESTABLISHED
                          for c in serve_proc.net_connections("tcp")), "the request arrive")
    gate.touch()
    asking.join(60)
    assert reply["status"] == 200, reply["raw"]
    assert serve.health() == 200


def test_an_executor_that_keeps_dying_makes_serve_exit_1(start_serve, tmp_path, smollm2):
    broken = tmp_path / "broken"  # once it exists, the executor exits at every start
    standin = _standin(tmp_path, "llama-server", STANDIN_EXIT_IF=str(broken))
    serve = start_serve("-m", str(smollm2), "--llama-server", standin).wait_ready()
    broken.touch()
    _executor(serve).kill()
    assert serve.wait_exit(60) == 1
    log = serve.log()
    assert log.count("1bit serve: cpu: the executor died") == 5
    assert log.count("1bit serve: cpu: restarting the executor in") == 4
    last = log.strip().splitlines()[-1]
    assert last.startswith("1bit serve: error: cpu: the executor died 5 times in a row, last: ")
    assert last.endswith("exited with code 1: error: the stand-in fails on purpose")


def test_sigterm_ends_open_streams_then_stops_within_5_s(start_serve, smollm2):
    serve = start_serve("-m", str(smollm2), "--parallel", "4").wait_ready()
    child = _executor(serve)
    streams = [_stream(serve.url) for _ in range(4)]
    started = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    for resp, first in streams:
        with resp:
            rest = resp.read()  # IncompleteRead if the chunked end were missing
        error = json.loads(sse_events(first + rest)[-1])["error"]
        assert error["message"] == "serve is shutting down"
    assert serve.wait_exit(10) == 0
    took = time.monotonic() - started
    assert took < 5.0, f"stopping with 4 open streams took {took:.1f} s"
    assert _gone(child)


def test_requests_during_shutdown_get_503_and_no_connection_is_accepted(start_serve, tmp_path,
                                                                         smollm2):
    # The executor ignores SIGTERM: serve stays in its shutdown for the stop's grace period.
    standin = _standin(tmp_path, "llama-server", STANDIN_IGNORE_TERM="1")
    serve = start_serve("-m", str(smollm2), "--llama-server", standin).wait_ready()
    conn = HTTPConnection("127.0.0.1", serve.port, timeout=10)

    def ask(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        conn.request(method, path, body=json.dumps(body) if body else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())

    assert ask("GET", "/health")[0] == 200
    started = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: ask("GET", "/health") == (503, {"status": "stopping"}),
              "health say stopping")
    status, body = ask("POST", "/v1/chat/completions", HI)
    assert status == 503
    assert body["error"]["code"] == "shutting_down"
    assert body["error"]["message"] == "serve is shutting down"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", serve.port), timeout=2)
    assert serve.wait_exit(10) == 0
    assert time.monotonic() - started < 5.0
    conn.close()


def _gone(proc: psutil.Process) -> bool:
    _, alive = psutil.wait_procs([proc], timeout=2)
    return not alive


def _half_closed(port: int, body: dict) -> bytes:
    """Send one request, shut the sending side (SHUT_WR), read until serve closes."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(data)).encode() + b"\r\n\r\n" + data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_a_client_that_half_closes_gets_the_whole_reply(smol_serve):
    reply = _half_closed(smol_serve.port, HI)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    head, _, body = reply.partition(b"\r\n\r\n")
    assert json.loads(body)["choices"][0]["message"]["role"] == "assistant"
    streamed = _half_closed(smol_serve.port, {**HI, "stream": True})
    assert streamed.startswith(b"HTTP/1.1 200"), streamed[:200]
    assert b"data: [DONE]" in streamed and streamed.endswith(b"0\r\n\r\n")


def test_a_request_head_that_never_ends_is_dropped_and_a_long_stream_is_not(monkeypatch):
    import importlib

    from aiohttp import web

    run = importlib.import_module("lemonade_onebit.serve.run")  # the package exports run()
    monkeypatch.setattr(run, "HEADER_TIMEOUT_S", 0.3)
    ticks = 4  # the stream lasts longer than the header timeout several times over

    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(ticks):
            await resp.write(b"tick\n")
            await asyncio.sleep(run.HEADER_TIMEOUT_S)
        await resp.write_eof()
        return resp

    async def main() -> tuple[bytes, bytes]:
        app = web.Application()
        app.router.add_get("/slow", slow)
        runner = run.make_runner(app)
        await runner.setup()
        listener = run.listen("127.0.0.1", 0)
        await web.SockSite(runner, listener).start()
        port = listener.getsockname()[1]
        try:
            held_r, held_w = await asyncio.open_connection("127.0.0.1", port)
            held_w.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n")  # the head never ends
            stream_r, stream_w = await asyncio.open_connection("127.0.0.1", port)
            stream_w.write(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            held, streamed = await asyncio.wait_for(
                asyncio.gather(held_r.read(), stream_r.read()), 30)
            held_w.close()
            stream_w.close()
            return held, streamed
        finally:
            await runner.cleanup()

    held, streamed = asyncio.run(main())
    assert held == b""  # closed without a reply
    assert streamed.count(b"tick") == ticks and streamed.endswith(b"0\r\n\r\n")


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
    # llama-server's other header, which its clients send
    status, _ = http("POST", serve.url + "/v1/chat/completions", chat, {"x-api-key": "s3cret"})
    assert status == 200
    status, _ = http("POST", serve.url + "/v1/chat/completions", chat, {"x-api-key": "wrong"})
    assert status == 401
    with socket.create_connection(("127.0.0.1", serve.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\r\n"
                     b"Connection: close\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 401")


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
        assert "killed by SIGKILL" in json.loads(raw)["message"]
        assert grandchild.is_running()  # the pipe was still held, so the drain never ended
    finally:
        serve.stop()
        for process in _grandchildren(serve):
            process.kill()


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
