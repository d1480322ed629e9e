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
from conftest import BIN, free_port, hf_layout, http, sse_events

SHIM = str(BIN / "onebit-llama-server-cpu")


def lemonade_argv(model: Path, port: int, shim: str = SHIM) -> list[str]:
    """What Lemonade's llamacpp backend writes (cpu variant), sampler defaults included."""
    return [shim, "-m", str(model), "--ctx-size", "4096", "--port", str(port), "--jinja",
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
        raise AssertionError("still running 5 s after SIGTERM") from None
    return time.monotonic() - started


@pytest.mark.executor
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
        # One command line: Lemonade's flags reached the executor, each flag once, and nothing
        # the CPU build cannot use (llama-server warns about both).
        executor_argv = children[0].cmdline()
        assert executor_argv.count("--jinja") == 1 and "--top-k" in executor_argv
        assert "-ngl" not in executor_argv and executor_argv.count("--device") == 1
        assert executor_argv[executor_argv.index("--device") + 1] == "none"
        text = log.read_text()
        assert "specified multiple times" not in text and "no usable GPU found" not in text
        # Each log line is whole: serve's lines never land inside the executor's.
        assert all(line.startswith("1bit serve:") for line in text.splitlines()
                   if "1bit serve:" in line)
        assert stop_like_lemonade(proc) < 5
        gone, alive = psutil.wait_procs(children, timeout=2)
        assert not alive
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.executor
def test_another_model_is_handed_to_the_real_llama_server_unchanged(smollm2, tmp_path,
                                                                     llama_server):
    other = tmp_path / "not-ours.gguf"
    shutil.copyfile(smollm2, other)
    with open(other, "ab") as f:  # other bytes: not the catalog's file, still a loadable GGUF
        f.write(b"\0" * 32)
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


def test_a_catalog_file_is_recognised_wherever_it_lies(tmp_path, monkeypatch, smollm2):
    from lemonade_onebit.catalog.entries import owner_of

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # In a snapshot of any HF cache (not ours: HF_HUB_CACHE points elsewhere), by repo and file.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "ours"))
    lemonades = tmp_path / "lemonade-home" / "hub"
    qwen = hf_layout(lemonades, "unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q4_K_M.gguf", b"GGUF")
    assert owner_of(qwen) == "Qwen3-0.6B-1bit"
    assert owner_of(qwen.resolve()) == "Qwen3-0.6B-1bit"  # the blob, through the snapshot's link
    other_quant = hf_layout(lemonades, "unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", b"GGUF",
                            blob_name="def456")
    assert owner_of(other_quant) is None  # the entry names Q4_K_M, not this file
    # Another file that also matches Q4_K_M makes the variant ambiguous, as `1bit serve -m NAME`
    # would say: then neither is the entry's.
    hf_layout(lemonades, "unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-UD-Q4_K_M.gguf", b"GGUF",
              blob_name="fed789")
    assert owner_of(qwen) is None
    # The embedded file itself, and its bytes anywhere: by the sha256 the catalog records.
    assert owner_of(smollm2) == "SmolLM2-135M-Instruct-1bit"
    copy = tmp_path / "models" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copyfile(smollm2, copy)
    assert owner_of(copy) == "SmolLM2-135M-Instruct-1bit"
    sha = json.loads((Path(__file__).parent.parent / "lemonade_onebit" / "catalog" /
                      "models.json").read_text())["SmolLM2-135M-Instruct-1bit"]["sha256"]
    blob_link = tmp_path / "elsewhere" / "blobs" / sha
    blob_link.parent.mkdir(parents=True)
    blob_link.symlink_to(copy)
    assert owner_of(blob_link) == "SmolLM2-135M-Instruct-1bit"
    # Same size, other bytes: not ours.
    fake = tmp_path / "models" / "same-size.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * (smollm2.stat().st_size - 4))
    assert owner_of(fake) is None
    assert owner_of(tmp_path / "missing.gguf") is None


def test_no_model_not_ours_and_no_real_llama_server_is_a_clear_error(tmp_path):
    other = tmp_path / "x.gguf"
    other.write_bytes(b"GGUF")
    env = {**os.environ, "ONEBIT_LLAMA_SERVER": "", "PATH": "/usr/bin:/bin"}
    code = ("import sys, lemonade_onebit.lemonade.shim as s; s.real_llama_server = lambda *a: None; "
            f"sys.exit(s.main(['-m', {str(other)!r}, '--port', '1']))")
    out = subprocess.run([str(BIN / "python"), "-c", code], capture_output=True, text=True,
                         env=env, timeout=30)
    assert out.returncode == 1 and "no real llama-server was found" in out.stderr


@pytest.mark.executor
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


def test_the_variant_decides_the_route(smollm2, tmp_path):
    """Lemonade's vulkan variant runs on the vulkan route, never silently on the CPU: on a
    machine without a GPU (an empty device tree) the load fails and says why."""
    empty = tmp_path / "sysfs"
    empty.mkdir()
    port = free_port()
    out = subprocess.run(lemonade_argv(smollm2, port, str(BIN / "onebit-llama-server-vulkan")),
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ONEBIT_SYSFS_ROOT": str(empty)})
    assert out.returncode == 1
    assert "onebit-llama-server-vulkan: error: --device vulkan: this machine has no" in out.stderr
    out = subprocess.run([*lemonade_argv(smollm2, port, str(BIN / "onebit-llama-server-vulkan")),
                          "--device", "CUDA0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "names a cuda device" in out.stderr


@pytest.mark.parametrize("variant,devices,route", [
    ("cpu", None, "cpu"), ("vulkan", "Vulkan0", "vulkan"), ("cuda", "CUDA0,CUDA1", "cuda"),
    ("rocm", None, "rocm"), (None, "Vulkan1", "vulkan"), (None, "none", "cpu"),
    (None, None, "auto"), (None, "HRX0", "hrx"),
])
def test_route_for_variant_and_device_list(variant, devices, route):
    from lemonade_onebit.lemonade.shim import route_for

    assert route_for(variant, devices) == route


def test_lemonade_flags_and_serves_merge_into_one_command_line():
    from lemonade_onebit.backends.llamacpp import VulkanLauncher
    from lemonade_onebit.config import ServeConfig
    from lemonade_onebit.modelref import ModelRef

    config = ServeConfig(model="m.gguf", ctx_size=4096, extra_args=(
        "--device", "Vulkan1", "--jinja", "--metrics", "--gpu-layers", "20", "-c", "8192",
        "--seed", "-1"))
    argv = VulkanLauncher().argv("llama-server", ModelRef("gguf", Path("/m.gguf"), "m"), 9,
                                 config)
    assert argv.count("--jinja") == 1 and argv.count("--device") == 1
    assert argv[argv.index("--device") + 1] == "Vulkan1"  # Lemonade's value wins
    assert "-ngl" not in argv and argv[argv.index("--gpu-layers") + 1] == "20"
    assert "4096" not in argv and argv[argv.index("-c") + 1] == "8192"
    assert argv[argv.index("--seed") + 1] == "-1"
    assert argv[:7] == ["llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", "9"]
    with pytest.raises(Exception, match="--port is for serve to set"):
        VulkanLauncher().argv("llama-server", ModelRef("gguf", Path("/m.gguf"), "m"), 9,
                              ServeConfig(model="m.gguf", extra_args=("--port", "1")))


@pytest.mark.executor
def test_a_501_and_a_reply_keep_llama_servers_shape(smollm2, tmp_path):
    port = free_port()
    proc, log = start(lemonade_argv(smollm2, port), tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_health_like_lemonade(url, proc, log)
        status, raw = http("POST", url + "/v1/rerank", {"query": "q", "documents": ["a"]})
        assert status == 501
        assert raw.startswith(b'{"error":{"code":501,"message":"This server does not support '
                              b'reranking. Start it with `--reranking`')
        assert json.loads(raw)["error"]["type"] == "not_supported_error"
        status, raw = http("POST", url + "/v1/embeddings", {"input": "a"})
        assert status == 501 and b"does not support embeddings" in raw
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        status, raw = http("POST", url + "/v1/chat/completions", body)
        assert status == 200 and b'"model":"SmolLM2-135M-Instruct-1bit"' in raw
        assert b'": ' not in raw  # compact, as llama-server writes it
    finally:
        stop_like_lemonade(proc)


def test_a_log_line_is_one_write(monkeypatch):
    from lemonade_onebit import console

    writes = []
    monkeypatch.setattr(console.os, "write", lambda fd, data: writes.append((fd, data)) or len(data))
    console.line("1bit serve: ready on http://127.0.0.1:8001")
    import sys

    assert writes == [(sys.stderr.fileno(), b"1bit serve: ready on http://127.0.0.1:8001\n")]
