"""The onnx route for real: `1bit serve` over ONNX Runtime GenAI with a committed tiny model
(tests/fixtures/onnx-tiny, built by scripts/make_fixtures.py: 2 layers, random weights, SmolLM2's
tokenizer and chat template)."""

from __future__ import annotations

import asyncio
import json
import selectors
import socket
import struct
import time
from pathlib import Path

import aiohttp
import openai
import pytest
from conftest import Serve, http, sse_events

FIXTURE = Path(__file__).parent / "fixtures" / "onnx-tiny"
HI = [{"role": "user", "content": "Say hello."}]
KEY_ENV = "ONEBIT_ONNX_API_KEY"
# As long as the fixture's context allows: with ignore_eos, a generation of known, ample length.
LONG = {"messages": HI, "max_tokens": 1900, "temperature": 0, "ignore_eos": True}
SHORT = {"messages": HI, "max_tokens": 2, "temperature": 0}


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


def test_metrics_on_onnx_are_serves_own(onnx_serve):
    """/metrics answers on a route whose executor has none: serve's own, tokens from the
    stream's final `timings`, nothing appended."""
    before = http("GET", onnx_serve.url + "/metrics")[1].decode()
    status, raw = http("POST", onnx_serve.url + "/v1/chat/completions",
                       {**SHORT, "max_tokens": 4, "ignore_eos": True, "stream": True})
    assert status == 200
    final = json.loads([e for e in sse_events(raw) if e != b"[DONE]"][-1])["timings"]
    status, raw = http("GET", onnx_serve.url + "/metrics")
    text = raw.decode()
    assert status == 200 and "llamacpp:" not in text

    def sample(exposition: str, name: str) -> float:
        found = [line.rsplit(" ", 1)[1] for line in exposition.splitlines()
                 if line.startswith(name + '{device="onnx"}')]
        return float(found[0]) if found else 0.0

    grew = {name: sample(text, name) - sample(before, name) for name in (
        "onebit_prompt_tokens_total", "onebit_completion_tokens_total",
        "onebit_time_to_first_token_seconds_count")}
    assert grew == {"onebit_prompt_tokens_total": final["prompt_n"],
                    "onebit_completion_tokens_total": 4,
                    "onebit_time_to_first_token_seconds_count": 1}
    assert sample(text, "onebit_executor_ready") == 1


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


def executor(serve: Serve):
    """The executor process behind `serve` and its private port (from its command line)."""
    (proc,) = [p for p in serve.children() if "--port" in p.cmdline()]
    argv = proc.cmdline()
    return proc, int(argv[argv.index("--port") + 1])


def raw_post(port: int, body: dict, key: str | None = None) -> bytes:
    data = json.dumps(body).encode()
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode() + data


def cpu_seconds(proc) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def wait_generating(proc, since: float, amount: float, timeout: float = 30) -> None:
    """Return once the executor has burnt `amount` s of CPU since `since`: a generation is
    running (an idle server burns none; parsing and templating a request take milliseconds)."""
    deadline = time.monotonic() + timeout
    while cpu_seconds(proc) - since < amount:
        assert time.monotonic() < deadline, "the executor never started generating"
        time.sleep(0.01)


def wait_log(serve: Serve, start: int, text: str, timeout: float = 30) -> str:
    """serve's log from offset `start` once it holds `text` (the executor's lines reach it through
    serve's drain thread, a moment after the executor writes them)."""
    deadline = time.monotonic() + timeout
    while text not in (log := serve.log()[start:]):
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{log}"
        time.sleep(0.02)
    return log


def stopped_after(log: str) -> int:
    """The tokens the executor generated for the request whose client left, from its one line."""
    (line,) = [row for row in log.splitlines() if "request cancelled" in row]
    return int(line.split("generation stopped after ")[1].split()[0])


def timed(url: str, body: dict) -> float:
    start = time.monotonic()
    status, raw = http("POST", url + "/v1/chat/completions", body)
    assert status == 200, raw
    return time.monotonic() - start


def test_private_port_refuses_requests_without_serves_key(onnx_serve):
    proc, port = executor(onnx_serve)
    url = f"http://127.0.0.1:{port}"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer"}):
        status, raw = http("POST", url + "/v1/chat/completions", SHORT, headers=headers)
        assert status == 401, raw
        error = json.loads(raw)["error"]
        assert error["code"] == "invalid_api_key" and error["type"] == "authentication_error"
        assert http("GET", url + "/v1/models", headers=headers)[0] == 401
    assert http("GET", url + "/health")[0] == 200  # serve's readiness probe needs no key
    key = proc.environ()[KEY_ENV]
    status, _ = http("POST", url + "/v1/chat/completions", SHORT,
                     headers={"Authorization": f"Bearer {key}"})
    assert status == 200


def test_api_key_through_serve_and_not_on_the_private_port(start_serve):
    serve = start_serve("-m", str(FIXTURE), "--api-key", "s3cret").wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions", SHORT,
                       headers={"Authorization": "Bearer s3cret"})
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] is not None
    assert http("POST", serve.url + "/v1/chat/completions", SHORT)[0] == 401
    _, port = executor(serve)
    for headers in ({}, {"Authorization": "Bearer s3cret"}):  # the user's key is not serve's
        status, _ = http("POST", f"http://127.0.0.1:{port}/v1/chat/completions", SHORT,
                         headers=headers)
        assert status == 401


def full_job(url: str, proc) -> tuple[float, float]:
    """Wall and executor CPU seconds of one whole LONG job."""
    before = cpu_seconds(proc)
    wall = timed(url, LONG)
    return wall, cpu_seconds(proc) - before


def abandon(port: int, request: bytes, proc, job_cpu: float, reset: bool) -> None:
    """Send `request`, wait until the executor has done a tenth of its job, then leave: with
    `reset`, as a client that dies (RST), else with a plain close (FIN)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        busy = cpu_seconds(proc)
        sock.sendall(request)
        wait_generating(proc, busy, job_cpu / 10)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_client_that_leaves_a_non_stream_request_frees_the_model(onnx_serve):
    """The next request waits for one token of the abandoned job, not for all of it. (A client
    that only closes its side is, to serve, one that half-closes and still wants its reply.)"""
    proc, _ = executor(onnx_serve)
    full, job_cpu = full_job(onnx_serve.url, proc)
    start = len(onnx_serve.log())
    abandon(onnx_serve.port, raw_post(onnx_serve.port, LONG), proc, job_cpu, reset=True)
    waited = timed(onnx_serve.url, SHORT)
    assert waited < full / 2, f"the next request waited {waited:.2f} s; a whole job is {full:.2f} s"
    log = wait_log(onnx_serve, start, "request cancelled")
    assert stopped_after(log) < LONG["max_tokens"] // 2
    assert "Traceback" not in log


def test_the_executor_stops_a_non_stream_generation_whose_client_closed(onnx_serve):
    proc, port = executor(onnx_serve)
    key = proc.environ()[KEY_ENV]
    full, job_cpu = full_job(onnx_serve.url, proc)
    start = len(onnx_serve.log())
    abandon(port, raw_post(port, LONG, key), proc, job_cpu, reset=False)
    waited = timed(onnx_serve.url, SHORT)
    assert waited < full / 2, f"the next request waited {waited:.2f} s; a whole job is {full:.2f} s"
    log = wait_log(onnx_serve, start, "request cancelled")
    assert stopped_after(log) < LONG["max_tokens"] // 2
    assert "Traceback" not in log


def test_a_client_that_leaves_a_stream_frees_the_model(onnx_serve):
    full = timed(onnx_serve.url, LONG)
    start = len(onnx_serve.log())
    with socket.create_connection(("127.0.0.1", onnx_serve.port)) as sock:
        sock.sendall(raw_post(onnx_serve.port, {**LONG, "stream": True}))
        seen = b""
        while b"data: " not in seen:
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
    waited = timed(onnx_serve.url, SHORT)
    assert waited < full / 2, f"the next request waited {waited:.2f} s; a whole job is {full:.2f} s"
    log = wait_log(onnx_serve, start, "request cancelled")
    assert stopped_after(log) < LONG["max_tokens"] // 2
    assert "Traceback" not in log


def test_a_queued_stream_gets_its_200_when_its_turn_comes(onnx_serve):
    """Stream A runs; stream B, sent meanwhile, must see its first byte only after A's last: the
    executor writes all of A before it starts B."""
    proc, port = executor(onnx_serve)
    key = proc.environ()[KEY_ENV]
    first = {**LONG, "max_tokens": 400, "stream": True}
    received = {"a": b"", "b": b""}
    with socket.create_connection(("127.0.0.1", port)) as a, \
            socket.create_connection(("127.0.0.1", port)) as b:
        a.sendall(raw_post(port, first, key))
        while b"data: " not in received["a"]:
            received["a"] += a.recv(65536)
        b.sendall(raw_post(port, {**SHORT, "stream": True}, key))
        with selectors.DefaultSelector() as sel:
            sel.register(a, selectors.EVENT_READ, "a")
            sel.register(b, selectors.EVENT_READ, "b")
            deadline = time.monotonic() + 60
            while not received["b"]:
                assert time.monotonic() < deadline, "stream B never started"
                for ready, _ in sel.select(timeout=1):
                    chunk = ready.fileobj.recv(65536)
                    if not chunk:
                        sel.unregister(ready.fileobj)
                    received[ready.data] += chunk
        a.setblocking(False)
        try:
            while chunk := a.recv(65536):
                received["a"] += chunk
        except BlockingIOError:
            pass
    assert received["b"].startswith(b"HTTP/1.1 200")
    assert b"data: [DONE]" in received["a"], "B's 200 came while A was still generating"
