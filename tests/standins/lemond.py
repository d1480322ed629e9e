"""A stand-in for `lemond` 11.7 (Lemonade's C++ server, which this machine cannot run), as a real
one was seen behaving (`../shared/LEMONADE.md`, last section):

- user models are taken as `user.<Name>` and listed under the bare `<Name>`; registering an
  existing one replaces it;
- `POST /api/v1/pull` saves the model first, then downloads: offline that fails with 500
  `{"error":"CURL error: Couldn't resolve host name"}` and the model stays registered; with
  `do_not_upgrade` and the file in its HF cache it succeeds offline;
- a model is `downloaded` (and loadable) only when its file is in its HF cache
  (`$HF_HOME/hub`); a blob that is a link to a file elsewhere counts; a load of a missing file
  tries to download it;
- a load execs `llamacpp.<variant>_bin` (or `$LEMONADE_LLAMACPP_<VARIANT>_BIN`, which wins) with
  `-m <abs gguf in its cache> --ctx-size 4096 [--device L] --port <first free >= 8001> --jinja
  --metrics [llamacpp_args]`, never `--version`; polls `/health` every 100 ms, only 200 counts;
  unload is SIGTERM, then SIGKILL after 5 s;
- `/internal/set` takes an absolute path to an executable file (or `builtin`), `/internal/config`
  shows the config.

Online (`hub=` a local hub's URL) it downloads as Lemonade does: a regular file in `blobs/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODES = {"chat", "embeddings", "reranking"}
CAPABILITIES = {"vision", "tool-calling", "reasoning", "coding", "hot"}
VARIANTS = ("cpu", "vulkan", "rocm", "cuda")
PULL_KEYS = {"model_name", "recipe", "checkpoint", "checkpoints", "labels", "size",
             "recipe_options", "stream", "do_not_upgrade"}
OFFLINE = "CURL error: Couldn't resolve host name"


class Lemond:
    def __init__(self, root: Path, hub: str | None = None, admin_key: str | None = None,
                 supported=("cpu", "vulkan"), env: dict | None = None,
                 devices: dict | None = None) -> None:
        self.root = root
        self.hf_cache = root / "hf_home" / "hub"
        self.config_dir = root / "config"
        self.hf_cache.mkdir(parents=True, exist_ok=True)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.hub = hub
        self.admin_key = admin_key
        self.supported = supported
        self.env = env or {}
        self.devices = devices or {}  # variant -> the --device list it is configured with
        self.config: dict = {"llamacpp": {f"{v}_bin": "builtin" for v in VARIANTS}}
        self.user_models: dict[str, dict] = {}
        self.builtin = {"Qwen3-0.6B-GGUF": {"checkpoint": "unsloth/Qwen3-0.6B-GGUF:Q4_0",
                                            "recipe": "llamacpp", "labels": ["chat"], "size": 0.4}}
        self.calls: list[tuple[str, str, dict | None]] = []
        self.loaded: dict[str, dict] = {}
        self.log_path = root / "lemond.log"
        self._log_lock = threading.Lock()
        lemond = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

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
                if self.path in ("/api/v1/models?show_all=true", "/api/v1/models"):
                    return self.answer(200, lemond.listing(self.path.endswith("show_all=true")))
                if self.path == "/api/v1/health":
                    return self.answer(200, lemond.health())
                if self.path == "/internal/config":
                    return self.answer(200, lemond.config)
                self.answer(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else {}
                lemond.calls.append(("POST", self.path, body))
                if self.path == "/api/v1/chat/completions":
                    return lemond.forward(self, body)
                status, reply = lemond.handle(self.path, body, self.headers.get("Authorization"))
                self.answer(status, reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    # -- the log -------------------------------------------------------------------------------

    def log(self, line: str) -> None:
        with self._log_lock, open(self.log_path, "a") as f:
            f.write(line.rstrip("\n") + "\n")

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    # -- models and their files ----------------------------------------------------------------

    def all_models(self) -> dict[str, dict]:
        return {**self.builtin, **self.user_models}

    def files_of(self, body: dict) -> list[str]:
        main = body.get("checkpoint") or body["checkpoints"]["main"]
        out = [main]
        if "checkpoints" in body and body["checkpoints"].get("mmproj"):
            out.append(body["checkpoints"]["mmproj"])
        return out

    def cached(self, checkpoint: str) -> Path | None:
        repo, _, variant = checkpoint.partition(":")
        folder = self.hf_cache / ("models--" + repo.replace("/", "--"))
        try:
            rev = (folder / "refs" / "main").read_text().strip()
        except OSError:
            return None
        snap = folder / "snapshots" / rev
        if not snap.is_dir():
            return None
        names = [str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()]
        pick = self._pick(names, variant)
        if pick is None:
            return None
        path = snap / pick
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return None  # Lemonade rejects a cached .gguf without the magic
        return path

    @staticmethod
    def _pick(names: list[str], variant: str) -> str | None:
        if variant in names:
            return variant
        token = re.compile(rf"(^|[-_./]){re.escape(variant)}([-_./]|$)", re.IGNORECASE)
        found = sorted(n for n in names if n.lower().endswith(".gguf") and token.search(n)
                       and "mmproj" not in n.lower())
        return found[0] if found else None

    def downloaded(self, body: dict) -> bool:
        return all(self.cached(c) is not None for c in self.files_of(body))

    def listing(self, show_all: bool) -> dict:
        data = []
        for name, body in self.all_models().items():
            got = self.downloaded(body)
            if show_all or got:
                data.append({"id": name, "object": "model", "owned_by": "lemonade",
                             "checkpoint": body.get("checkpoint") or body["checkpoints"]["main"],
                             "recipe": body["recipe"], "downloaded": got, "suggested": False,
                             "labels": body.get("labels", []), "size": body.get("size"),
                             "recipe_options": body.get("recipe_options", {})})
        return {"object": "list", "data": data}

    def download(self, checkpoint: str) -> str | None:
        """An error message, or None once the file is in the cache as a regular blob."""
        if self.hub is None:
            return OFFLINE
        repo, _, variant = checkpoint.partition(":")
        try:
            with urllib.request.urlopen(f"{self.hub}/api/models/{repo}/tree/main", timeout=30) as r:
                tree = json.loads(r.read())
        except (urllib.error.URLError, OSError) as exc:
            return f"CURL error: {exc}"
        pick = self._pick([t["path"] for t in tree if t.get("type") == "file"], variant)
        if pick is None:
            return f"no file for {checkpoint}"
        folder = self.hf_cache / ("models--" + repo.replace("/", "--"))
        (folder / "blobs").mkdir(parents=True, exist_ok=True)
        tmp = folder / "blobs" / "download.incomplete"
        digest = hashlib.sha256()
        with urllib.request.urlopen(f"{self.hub}/{repo}/resolve/main/{pick}", timeout=60) as r, \
                open(tmp, "wb") as out:
            rev = r.headers.get("X-Repo-Commit", "main")
            while block := r.read(1 << 20):
                digest.update(block)
                out.write(block)
        blob = folder / "blobs" / digest.hexdigest()
        os.replace(tmp, blob)
        link = folder / "snapshots" / rev / pick
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(rev)
        return None

    # -- the API ------------------------------------------------------------------------------

    def handle(self, path: str, body: dict, auth: str | None) -> tuple[int, dict]:
        def bad(message: str, status: int = 400) -> tuple[int, dict]:
            return status, {"error": {"message": message, "type": "invalid_request_error"}}

        if path == "/internal/set":
            if self.admin_key and auth != f"Bearer {self.admin_key}":
                return bad("Invalid or missing admin API key", 401)
            for section, values in body.items():
                if section != "llamacpp" or not isinstance(values, dict):
                    return bad(f"unknown config section {section}")
                for key, value in values.items():
                    variant = key.removesuffix("_bin")
                    if not key.endswith("_bin") or variant not in VARIANTS:
                        return bad(f"unknown key llamacpp.{key}")
                    if variant not in self.supported:
                        return bad(f"llamacpp backend '{variant}' is not supported on this system")
                    if value != "builtin" and not (os.path.isabs(value) and os.path.isfile(value)
                                                   and os.access(value, os.X_OK)):
                        return bad(f"{value} is not an executable file")
                    self.config["llamacpp"][key] = value
            return 200, {"status": "success"}
        if path in ("/api/v1/pull", "/api/v1/models/register"):
            unknown = set(body) - PULL_KEYS
            if unknown:
                return bad(f"unknown fields {sorted(unknown)}")
            name = body.get("model_name", "")
            if not name.startswith("user."):
                return bad("model_name must start with user.")
            if ("checkpoint" in body) == ("checkpoints" in body):
                return bad("give exactly one of checkpoint and checkpoints")
            if any(":" not in c for c in self.files_of(body)):
                return bad("GGUF checkpoint must specify a variant")
            labels = body.get("labels", [])
            if len([label for label in labels if label in MODES]) != 1:
                return bad("labels must contain exactly one of chat, embeddings, reranking")
            if not set(labels) <= MODES | CAPABILITIES:
                return bad(f"unknown labels {sorted(set(labels) - MODES - CAPABILITIES)}")
            backend = body.get("recipe_options", {}).get("llamacpp_backend", "cpu")
            if body.get("recipe") != "llamacpp" or backend not in self.supported:
                return bad(f"llamacpp backend '{backend}' is not supported on this system")
            bare = name[len("user."):]
            if bare in self.user_models:
                self.log(f"Replacing user model definition: {bare}")
            self.user_models[bare] = {k: v for k, v in body.items()
                                      if k not in ("model_name", "stream", "do_not_upgrade")}
            (self.config_dir / "user_models.json").write_text(json.dumps(self.user_models))
            if path == "/api/v1/pull":
                for checkpoint in self.files_of(body):
                    if body.get("do_not_upgrade") and self.cached(checkpoint) is not None:
                        continue
                    error = self.download(checkpoint)
                    if error:
                        return 500, {"error": error}
            return 200, {"status": "success", "model_name": name}
        if path == "/api/v1/delete":
            bare = body.get("model_name", "").removeprefix("user.")
            if bare not in self.user_models:
                return bad(f"model {bare} not found", 404)
            self.unload(bare)
            body = self.user_models.pop(bare)
            (self.config_dir / "user_models.json").write_text(json.dumps(self.user_models))
            repo = self.files_of(body)[0].partition(":")[0]
            shutil.rmtree(self.hf_cache / ("models--" + repo.replace("/", "--")),
                          ignore_errors=True)
            return 200, {"status": "success"}
        if path == "/api/v1/load":
            return self.load(body.get("model_name", ""))
        if path == "/api/v1/unload":
            for name in list(self.loaded) if not body.get("model_name") else [
                    body["model_name"].removeprefix("user.")]:
                self.unload(name)
            return 200, {"status": "success"}
        return bad(f"no route {path}", 404)

    def load(self, requested: str) -> tuple[int, dict]:
        name = requested.removeprefix("user.")
        body = self.all_models().get(name)
        if body is None:
            return 404, {"error": {"message": f"model {requested} not found",
                                   "type": "not_found", "code": "model_not_found"}}
        if name in self.loaded:
            return 200, {"status": "success", "message": f"Loaded model: {name}"}
        for name_ in list(self.loaded):
            self.unload(name_)
        for checkpoint in self.files_of(body):
            if self.cached(checkpoint) is None:
                self.log("Model not downloaded, downloading...")
                error = self.download(checkpoint)
                if error:
                    return 500, {"error": {"message": error, "type": "server_error"}}
        variant = body.get("recipe_options", {}).get("llamacpp_backend", "cpu")
        binary = (self.env.get(f"LEMONADE_LLAMACPP_{variant.upper()}_BIN")
                  or self.config["llamacpp"][f"{variant}_bin"])
        if binary == "builtin":
            return 500, {"error": {"message": "no built-in llama.cpp in this stand-in",
                                   "type": "server_error"}}
        port = 8001
        while not _free(port):
            port += 1
        argv = [binary, "-m", str(self.cached(self.files_of(body)[0])), "--ctx-size", "4096"]
        if self.devices.get(variant):
            argv += ["--device", self.devices[variant]]
        argv += ["--port", str(port), "--jinja", "--metrics"]
        if len(self.files_of(body)) > 1:
            argv += ["--mmproj", str(self.cached(self.files_of(body)[1]))]
            if variant == "cpu":
                argv.append("--no-mmproj-offload")
        argv += body.get("recipe_options", {}).get("llamacpp_args", "").split()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self.log(f"Starting llama-server (PID {proc.pid}): {' '.join(argv)}")
        threading.Thread(target=self._drain, args=(proc,), daemon=True).start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return 500, {"error": {"message": f"llama-server exited with {proc.returncode}",
                                       "type": "server_error"}}
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        else:
            proc.kill()
            return 500, {"error": {"message": "load timed out", "type": "server_error"}}
        self.loaded[name] = {"proc": proc, "port": port, "variant": variant, "argv": argv,
                             "checkpoint": self.files_of(body)[0]}
        return 200, {"status": "success", "message": f"Loaded model: {name}"}

    def _drain(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            self.log(raw.decode(errors="replace"))

    def unload(self, name: str) -> None:
        entry = self.loaded.pop(name, None)
        if entry is None:
            return
        proc = entry["proc"]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def health(self) -> dict:
        return {"status": "ok", "version": "11.7.0",
                "model_loaded": next(iter(self.loaded), None),
                "all_models_loaded": [
                    {"model_name": name, "checkpoint": e["checkpoint"], "recipe": "llamacpp",
                     "device": "cpu" if e["variant"] == "cpu" else "gpu",
                     "backend_url": f"http://127.0.0.1:{e['port']}/v1", "pid": e["proc"].pid}
                    for name, e in self.loaded.items()]}

    def forward(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        name = str(body.get("model", "")).removeprefix("user.")
        if name not in self.loaded:
            status, reply = self.load(name)
            if status != 200:
                return handler.answer(status, reply)
        port = self.loaded[name]["port"]
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            resp = urllib.request.urlopen(req, timeout=120)
        except urllib.error.HTTPError as exc:
            resp = exc
        data = resp.read()
        handler.send_response(resp.status if hasattr(resp, "status") else resp.code)
        handler.send_header("Content-Type", resp.headers.get("Content-Type", "application/json"))
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def stop(self) -> None:
        for name in list(self.loaded):
            self.unload(name)
        self.server.shutdown()
        self.server.server_close()


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
