"""`1bit lemonade register|export` against a stand-in for `lemond` (Lemonade's C++ server, which
this machine cannot run): it checks every body against the documented `/internal/set` and
`/api/v1/pull` shapes (`../shared/LEMONADE.md`) and answers as Lemonade does, errors included."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import BIN, ONEBIT, free_port

MODES = {"chat", "embeddings", "reranking"}
CAPABILITIES = {"vision", "tool-calling", "reasoning", "coding", "hot"}


class Lemond:
    def __init__(self, admin_key: str | None = None, supported=("cpu", "vulkan")) -> None:
        self.admin_key = admin_key
        self.supported = supported
        self.config: dict = {"llamacpp": {}}
        self.models: dict[str, dict] = {}
        self.calls: list[tuple[str, str, dict | None]] = []
        lemond = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                lemond.calls.append(("GET", self.path, None))
                if self.path == "/api/v1/models?show_all=true":
                    return self.answer(200, {"object": "list", "data": [
                        {"id": k, "object": "model", "owned_by": "lemonade", "downloaded": True,
                         **v} for k, v in lemond.models.items()]})
                self.answer(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                lemond.calls.append(("POST", self.path, body))
                status, reply = lemond.handle(self.path, body, self.headers.get("Authorization"))
                self.answer(status, reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def handle(self, path: str, body: dict, auth: str | None) -> tuple[int, dict]:
        def bad(message: str, status: int = 400) -> tuple[int, dict]:
            return status, {"error": {"message": message, "type": "invalid_request_error"}}

        if path == "/internal/set":
            if self.admin_key and auth != f"Bearer {self.admin_key}":
                return bad("Invalid or missing admin API key", 401)
            assert set(body) == {"llamacpp"} and len(body["llamacpp"]) == 1, body
            (key, value), = body["llamacpp"].items()
            variant = key.removesuffix("_bin")
            assert key.endswith("_bin") and variant in ("cpu", "vulkan", "rocm", "cuda"), key
            if variant not in self.supported:
                return bad(f"llamacpp backend '{variant}' is not supported on this system")
            if not (os.path.isabs(value) and os.path.isfile(value) and os.access(value, os.X_OK)):
                return bad(f"{value} is not an executable file")
            self.config["llamacpp"][key] = value
            return 200, {"status": "success"}
        if path in ("/api/v1/pull", "/api/v1/models/register"):
            allowed = {"model_name", "recipe", "checkpoint", "checkpoints", "labels", "size",
                       "recipe_options", "stream"}
            assert set(body) <= allowed, set(body) - allowed
            assert body["model_name"].startswith("user."), body
            if ("checkpoint" in body) == ("checkpoints" in body):
                return bad("give exactly one of checkpoint and checkpoints")
            main = body.get("checkpoint") or body["checkpoints"]["main"]
            if ":" not in main:
                return bad("GGUF checkpoint must specify a variant")
            labels = body.get("labels", [])
            if len([l for l in labels if l in MODES]) != 1:
                return bad("labels must contain exactly one of chat, embeddings, reranking")
            assert set(labels) <= MODES | CAPABILITIES, labels
            assert body["recipe"] == "llamacpp"
            assert isinstance(body["size"], (int, float)) and body["size"] > 0
            assert body["recipe_options"]["llamacpp_backend"] in self.supported
            self.models[body["model_name"]] = {k: v for k, v in body.items()
                                               if k not in ("model_name", "stream")}
            return 200, {"status": "success", "model_name": body["model_name"]}
        return bad(f"no route {path}", 404)

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def lemond():
    server = Lemond()
    yield server
    server.stop()


def onebit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_register_points_the_variant_at_the_shim_and_registers_every_model(lemond):
    out = onebit("lemonade", "register", "--url", lemond.url, "--variant", "vulkan")
    assert out.returncode == 0, out.stderr
    assert lemond.config["llamacpp"] == {"vulkan_bin": str(BIN / "onebit-llama-server")}
    catalog = json.loads(onebit("list", "--json").stdout)
    assert set(lemond.models) == {f"user.{e['name']}" for e in catalog}
    gemma = lemond.models["user.Gemma-3-4b-it-1bit"]
    assert gemma["checkpoints"] == {"main": "ggml-org/gemma-3-4b-it-GGUF:Q4_K_M",
                                    "mmproj": "ggml-org/gemma-3-4b-it-GGUF:mmproj-model-f16.gguf"}
    assert gemma["recipe_options"] == {"llamacpp_backend": "vulkan"}
    pulls = [c for c in lemond.calls if c[1] == "/api/v1/pull"]
    assert all(c[2]["stream"] is False for c in pulls)
    assert "user.Qwen3-4B-Instruct-2507-1bit: added" in out.stdout
    again = onebit("lemonade", "register", "--url", lemond.url, "--variant", "vulkan",
                   "--only", "Qwen3-4B-Instruct-2507-1bit", "--no-download")
    assert again.returncode == 0 and "user.Qwen3-4B-Instruct-2507-1bit: updated" in again.stdout
    assert lemond.calls[-1][1] == "/api/v1/models/register"


def test_export_writes_the_bodies_register_sends(lemond, tmp_path):
    assert onebit("lemonade", "register", "--url", lemond.url).returncode == 0
    sent = {c[2]["model_name"]: {k: v for k, v in c[2].items() if k != "stream"}
            for c in lemond.calls if c[1] == "/api/v1/pull"}
    out = onebit("lemonade", "export", str(tmp_path / "out"))
    assert out.returncode == 0
    written = {json.loads(p.read_text())["model_name"]: json.loads(p.read_text())
               for p in (tmp_path / "out").glob("*.json")}
    assert written == sent


def test_the_admin_key_is_sent_when_set():
    server = Lemond(admin_key="s3cret")
    try:
        out = onebit("lemonade", "register", "--url", server.url, "--only",
                     "SmolLM2-135M-Instruct-1bit", env={"LEMONADE_ADMIN_API_KEY": ""})
        assert out.returncode == 1
        assert "answered 401: Invalid or missing admin API key (set LEMONADE_ADMIN_API_KEY)" in out.stderr
        out = onebit("lemonade", "register", "--url", server.url, "--only",
                     "SmolLM2-135M-Instruct-1bit", env={"LEMONADE_ADMIN_API_KEY": "s3cret"})
        assert out.returncode == 0, out.stderr
    finally:
        server.stop()


def test_lemonades_own_errors_and_no_lemonade_are_reported(lemond):
    out = onebit("lemonade", "register", "--url", lemond.url, "--variant", "rocm")
    assert out.returncode == 1
    assert "answered 400: llamacpp backend 'rocm' is not supported on this system" in out.stderr
    assert not lemond.models
    out = onebit("lemonade", "register", "--url", f"http://127.0.0.1:{free_port()}")
    assert out.returncode == 1 and "cannot reach Lemonade" in out.stderr
    out = onebit("lemonade", "register", "--url", lemond.url, "--only", "Nope-1bit")
    assert out.returncode == 2 and "not in the catalog: Nope-1bit" in out.stderr
    assert "Traceback" not in out.stderr
