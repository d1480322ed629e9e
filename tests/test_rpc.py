"""llama.cpp's RPC workers: `1bit rpc-worker` (the pinned ggml-rpc-server, supervised), the worker
probe behind `1bit devices --rpc` and `1bit serve --rpc`, and serve across two loopback workers:
a chat and a stream with layers on both, a worker down at start, a worker killed mid-stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lemonade_onebit import rpc
from lemonade_onebit.backends.llamacpp import CpuLauncher
from lemonade_onebit.backends.onnx import OnnxLauncher
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.modelref import ModelRef
from lemonade_onebit.route import refusals

ONEBIT = [sys.executable, "-m", "lemonade_onebit"]


@pytest.mark.parametrize("text, endpoints", [
    ("127.0.0.1:50052", (rpc.Endpoint("127.0.0.1", 50052),)),
    ("a:1, b.example:65535", (rpc.Endpoint("a", 1), rpc.Endpoint("b.example", 65535))),
])
def test_endpoints_parse(text, endpoints):
    assert rpc.parse_endpoints(text) == endpoints


@pytest.mark.parametrize("text, why", [
    ("host", "is not HOST:PORT"), ("host:0", "is not HOST:PORT"), ("host:70000", "not HOST:PORT"),
    (":50052", "not HOST:PORT"), ("a:1,,b:2", "(empty) is not HOST:PORT"),
    ("[::1]:50052", "no IPv6"), ("a:1,a:1", "named twice"), ("-x:1", "not a host name"),
])
def test_bad_endpoints_are_usage_errors(text, why):
    with pytest.raises(UsageError, match=why.replace("(", r"\(").replace(")", r"\)")):
        rpc.parse_endpoints(text)


def test_worker_argv_and_devices():
    assert rpc.worker_argv("/x", "127.0.0.1", 1, "cuda:1", 4, True) == [
        "/x", "--host", "127.0.0.1", "--port", "1", "--device", "CUDA1", "--threads", "4",
        "--cache"]
    assert rpc.device_name("cpu") == "CPU" and rpc.device_name("vulkan") == "Vulkan0"
    with pytest.raises(UsageError, match="one of cpu, cuda, rocm, vulkan"):
        rpc.device_name("npu")
    assert not rpc.exposed("127.0.0.1") and not rpc.exposed("127.0.0.2")
    assert not rpc.exposed("localhost") and not rpc.exposed("::1")
    assert rpc.exposed("0.0.0.0") and rpc.exposed("192.168.1.4") and rpc.exposed("box.lan")


def test_rpc_is_passed_to_llama_server_and_refused_elsewhere_with_the_reason():
    config = ServeConfig(model="m", rpc="127.0.0.1:50052,127.0.0.1:50053")
    argv = CpuLauncher().argv("/llama-server", ModelRef("gguf", Path("/m.gguf"), "m"), 9, config)
    assert argv[argv.index("--rpc") + 1] == "127.0.0.1:50052,127.0.0.1:50053"
    assert refusals(config, CpuLauncher) == []
    assert refusals(config, OnnxLauncher) == [
        "--rpc is not supported on the onnx route: it needs llama.cpp's RPC backend "
        "(the llama-server routes)"]


def test_a_port_that_is_not_a_worker_is_named(tmp_path):
    import socket
    import threading

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            conn.recv(64)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(RunError, match=f"RPC worker 127.0.0.1:{port}: answered"):
            rpc.probe(rpc.Endpoint("127.0.0.1", port), timeout=5)


# -- with the pinned ggml-rpc-server -----------------------------------------------------------

@pytest.fixture(scope="module")
def rpc_server() -> str:
    return rpc.find_executor()  # `make setup` builds llama.cpp with RPC: it must be there


def start_worker(port: int, log: Path, *extra: str) -> subprocess.Popen:
    out = open(log, "wb")
    proc = subprocess.Popen([*ONEBIT, "rpc-worker", "--port", str(port), "--device", "cpu",
                             "--threads", "1", *extra], stdout=out, stderr=subprocess.STDOUT)
    out.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            rpc.probe(rpc.Endpoint("127.0.0.1", port), timeout=2)
            return proc
        except RunError:
            time.sleep(0.1)
    raise AssertionError(f"worker on {port} not up: {log.read_text()}")


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=15)


def children_of(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.executor
def test_a_worker_answers_the_probe_and_stops_clean(rpc_server, tmp_path):
    import psutil
    from conftest import free_port

    port = free_port()
    worker = start_worker(port, tmp_path / "w.log")
    kids = children_of(worker.pid)
    assert kids, "the worker runs ggml-rpc-server as its child"
    out = subprocess.run([*ONEBIT, "devices", "--rpc", f"127.0.0.1:{port}", "--json"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["rpc"][0]
    assert found["endpoint"] == f"127.0.0.1:{port}" and found["protocol"].startswith("7.")
    assert found["devices"][0]["total"] > 0
    assert stop(worker) == 0
    time.sleep(0.2)
    assert not any(psutil.pid_exists(k) and psutil.Process(k).status() != "zombie" for k in kids)
    # A second worker on a port already taken is one line, exit 1.
    other = free_port()
    first = start_worker(other, tmp_path / "a.log")
    try:
        taken = subprocess.run([*ONEBIT, "rpc-worker", "--port", str(other)],
                               capture_output=True, text=True, timeout=30)
        assert taken.returncode == 1 and f"cannot listen on 127.0.0.1:{other}" in taken.stderr
    finally:
        stop(first)


@pytest.mark.executor
def test_a_worker_killed_by_sigkill_takes_its_executor_with_it(rpc_server, tmp_path):
    import psutil
    from conftest import free_port

    worker = start_worker(free_port(), tmp_path / "w.log")
    kids = children_of(worker.pid)
    worker.kill()
    worker.wait(timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(psutil.pid_exists(k) for k in kids):
        time.sleep(0.05)
    assert not any(psutil.pid_exists(k) and psutil.Process(k).status() != "zombie" for k in kids)


def serve(model: Path, port: int, workers: str, log: Path, *extra: str) -> subprocess.Popen:
    out = open(log, "wb")
    proc = subprocess.Popen([*ONEBIT, "serve", "-m", str(model), "--device", "cpu", "--port",
                             str(port), "--rpc", workers, "-c", "1024", *extra],
                            stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return proc


@pytest.mark.executor
@pytest.mark.slow
def test_serve_places_layers_on_two_workers_and_answers(rpc_server, smollm2, tmp_path):
    from conftest import free_port, http, sse_events, wait_for

    ports = [free_port(), free_port()]
    workers = [start_worker(p, tmp_path / f"w{i}.log") for i, p in enumerate(ports)]
    port = free_port()
    log = tmp_path / "serve.log"
    proc = serve(smollm2, port, ",".join(f"127.0.0.1:{p}" for p in ports), log,
                 "--executor-timeout", "20")
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return http("GET", url + "/health", timeout=2)[0] == 200
            except OSError:
                return False

        wait_for(ready, "serve ready through two RPC workers", timeout=300)
        text = log.read_text()
        for p in ports:
            assert f"RPC worker 127.0.0.1:{p}: RPC protocol 7." in text
        assert (f"1bit serve: layers: 15 on RPC0[127.0.0.1:{ports[0]}], 15 on "
                f"RPC1[127.0.0.1:{ports[1]}] (of 30, by free memory)") in text
        # Both workers hold weights: each was connected to and sent tensors.
        for i in range(2):
            assert "Accepted client connection" in (tmp_path / f"w{i}.log").read_text()
        body = {"messages": [{"role": "user",
                              "content": "What is the capital of France? One word."}],
                "max_tokens": 12, "temperature": 0}
        status, raw = http("POST", url + "/v1/chat/completions", body, timeout=120)
        assert status == 200, raw
        assert "Paris" in json.loads(raw)["choices"][0]["message"]["content"]
        status, raw = http("POST", url + "/v1/chat/completions", {**body, "stream": True},
                           timeout=120)
        assert status == 200 and sse_events(raw)[-1] == b"[DONE]"
        # A worker killed mid-stream: the reply ends (an error, never a hang) within the
        # executor timeout, and serve says what happened.
        long = {**body, "max_tokens": 4000, "stream": True, "ignore_eos": True}
        import threading

        killer = threading.Timer(1.0, lambda: workers[1].kill())
        killer.start()
        started = time.monotonic()
        try:
            status, raw = http("POST", url + "/v1/chat/completions", long, timeout=60)
        except OSError:
            status, raw = 0, b""
        elapsed = time.monotonic() - started
        assert elapsed < 45, elapsed
        assert status in (0, 200, 502)
        if status == 200:
            assert b"[DONE]" not in raw.split(b"\n\n")[-2:][0] or b"error" in raw
        killer.cancel()
    finally:
        stop(proc)
        for w in workers:
            stop(w)


@pytest.mark.executor
def test_serve_refuses_to_start_when_a_worker_is_down(rpc_server, smollm2, tmp_path):
    from conftest import free_port

    up = free_port()
    worker = start_worker(up, tmp_path / "w.log")
    down = free_port()
    log = tmp_path / "serve.log"
    try:
        proc = serve(smollm2, free_port(), f"127.0.0.1:{up},127.0.0.1:{down}", log)
        assert proc.wait(timeout=60) == 1
        text = log.read_text()
        assert f"RPC worker 127.0.0.1:{down}: Connection refused" in text
        assert "Traceback" not in text and "llama-server" not in text.split("RPC worker")[-1]
        assert os.path.exists(f"/proc/{worker.pid}")  # the healthy worker is not touched
    finally:
        stop(worker)
