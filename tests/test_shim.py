"""`onebit-llama-server` driven exactly as stock Lemonade drives llama-server: its argv, `/health`
polled every 100 ms (only 200 counts), chat and stream, SIGTERM with a 5 s grace."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import BIN, free_port, http, sse_events

SHIM = str(BIN / "onebit-llama-server")


def lemonade_argv(model: Path, port: int) -> list[str]:
    """What Lemonade's llamacpp backend writes (cpu variant), sampler defaults included."""
    return [SHIM, "-m", str(model), "--ctx-size", "4096", "--port", str(port), "--jinja",
            "--metrics", "--temp", "0.7", "--top-p", "0.8", "--top-k", "20"]


def start(argv: list[str], tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "shim.log"
    proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    return proc, log


def wait_health_like_lemonade(url: str, proc: subprocess.Popen, log: Path) -> list[int | None]:
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            status = http("GET", url + "/health", timeout=2)[0]
        except OSError:
            status = None
        seen.append(status)
        if status == 200:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"not ready:\n{log.read_text()}")


def chat_and_stream(url: str) -> None:
    body = {"model": "user.anything", "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4}
    status, raw = http("POST", url + "/v1/chat/completions", body)
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] is not None
    status, raw = http("POST", url + "/v1/chat/completions", {**body, "stream": True})
    events = sse_events(raw)
    assert status == 200 and events[-1] == b"[DONE]" and len(events) >= 2


def stop_like_lemonade(proc: subprocess.Popen) -> float:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("still running 5 s after SIGTERM")
    return time.monotonic() - started


def test_a_catalog_model_runs_through_serve_and_stops_with_no_grandchild(smollm2, tmp_path):
    port = free_port()
    proc, log = start(lemonade_argv(smollm2, port), tmp_path)
    try:
        seen = wait_health_like_lemonade(f"http://127.0.0.1:{port}", proc, log)
        assert set(seen[:-1]) <= {None, 503}
        children = psutil.Process(proc.pid).children(recursive=True)
        assert [c.name() for c in children] == ["llama-server"]
        assert "1bit serve: SmolLM2-135M-Instruct-1bit on cpu" in log.read_text()
        chat_and_stream(f"http://127.0.0.1:{port}")
        # Lemonade's flags reached the executor; its --device list did not.
        executor_argv = children[0].cmdline()
        assert "--jinja" in executor_argv and "--top-k" in executor_argv
        assert stop_like_lemonade(proc) < 5
        gone, alive = psutil.wait_procs(children, timeout=2)
        assert not alive
    finally:
        if proc.poll() is None:
            proc.kill()


def test_another_model_is_handed_to_the_real_llama_server_unchanged(smollm2, tmp_path,
                                                                     llama_server):
    other = tmp_path / "not-ours.gguf"
    shutil.copyfile(smollm2, other)
    port = free_port()
    proc, log = start(lemonade_argv(other, port), tmp_path)
    try:
        wait_health_like_lemonade(f"http://127.0.0.1:{port}", proc, log)
        me = psutil.Process(proc.pid)  # the same process, now llama-server itself
        assert Path(me.exe()).resolve() == Path(llama_server).resolve()
        assert me.cmdline()[1:] == lemonade_argv(other, port)[1:]
        assert not me.children()
        assert "1bit serve" not in log.read_text()
        chat_and_stream(f"http://127.0.0.1:{port}")
        assert stop_like_lemonade(proc) < 5
    finally:
        if proc.poll() is None:
            proc.kill()


def test_version_prints_what_lemonade_parses():
    out = subprocess.run([SHIM, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert any(line.startswith("version: ") and line.split()[1].isdigit()
               for line in (out.stdout + out.stderr).splitlines())


def test_a_file_pulled_for_a_catalog_entry_is_owned(tmp_path, monkeypatch, smollm2):
    from lemonade_onebit.shim import owner

    repo = tmp_path / "hub" / "models--unsloth--Qwen3-0.6B-GGUF"
    blob = repo / "blobs" / "abc123"
    link = repo / "snapshots" / "c0ffee" / "Qwen3-0.6B-Q4_K_M.gguf"
    blob.parent.mkdir(parents=True)
    link.parent.mkdir(parents=True)
    blob.write_bytes(b"GGUF")
    link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c0ffee")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert owner(link) == "Qwen3-0.6B-1bit"
    assert owner(smollm2) == "SmolLM2-135M-Instruct-1bit"
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    assert owner(other) is None


def test_no_model_not_ours_and_no_real_llama_server_is_a_clear_error(tmp_path):
    other = tmp_path / "x.gguf"
    other.write_bytes(b"GGUF")
    env = {**os.environ, "ONEBIT_LLAMA_SERVER": "", "PATH": "/usr/bin:/bin"}
    code = ("import sys, lemonade_onebit.shim as s; s.real_llama_server = lambda: None; "
            f"sys.exit(s.main(['-m', {str(other)!r}, '--port', '1']))")
    out = subprocess.run([str(BIN / "python"), "-c", code], capture_output=True, text=True,
                         env=env, timeout=30)
    assert out.returncode == 1 and "no real llama-server was found" in out.stderr


def test_the_onebit_recipe_argv_as_lemonade_writes_it(smollm2, tmp_path):
    """Lemonade's `onebit` recipe: `1bit serve -m <gguf> --port <p> --device <dev> --alias <name>
    [--ctx-size N] [onebit_args]`, readiness on /health, OpenAI calls, SIGTERM."""
    from conftest import ONEBIT

    port = free_port()
    argv = [ONEBIT, "serve", "-m", str(smollm2), "--port", str(port), "--device", "auto",
            "--alias", "SmolLM2-135M-Instruct-1bit", "--ctx-size", "4096", "--parallel", "2"]
    proc, log = start(argv, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_health_like_lemonade(url, proc, log)
        status, raw = http("GET", url + "/v1/models")
        assert [m["id"] for m in json.loads(raw)["data"]] == ["SmolLM2-135M-Instruct-1bit"]
        chat_and_stream(url)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert stop_like_lemonade(proc) < 5
        assert not psutil.wait_procs(children, timeout=2)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    out = subprocess.run([ONEBIT, "version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("1bit ")
