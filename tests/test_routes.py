"""Every route's contract: argv, environment, refusals, and two end to end through stand-ins."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ONEBIT, http
from lemonade_onebit.backends.ds4 import Ds4Launcher
from lemonade_onebit.backends.llamacpp import (
    CudaLauncher, HrxLauncher, RocmLauncher, VulkanLauncher,
)
from lemonade_onebit.backends.mlx import MlxLauncher
from lemonade_onebit.backends.npu import NpuLauncher
from lemonade_onebit.backends.onnx import OnnxLauncher
from lemonade_onebit.backends.zinc import ZincLauncher
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef, resolve_model
from lemonade_onebit.route import refusals
from lemonade_onebit.serve import merged_env

GGUF = ModelRef("gguf", Path("/m/q.gguf"), "q")
BASE = ["--host", "127.0.0.1", "--port", "9"]


@pytest.mark.parametrize(
    ("launcher", "device_args"),
    [
        (CudaLauncher, ["-ngl", "99"]),
        (VulkanLauncher, ["--device", "Vulkan0", "-ngl", "99"]),
        (RocmLauncher, ["--device", "ROCm0", "-ngl", "99"]),
        (HrxLauncher, ["--device", "HRX0", "-ngl", "99"]),
    ],
)
def test_llama_server_gpu_routes_argv(launcher, device_args):
    argv = launcher().argv("/x/llama-server", GGUF, 9, ServeConfig(model="q", ctx_size=2048))
    assert argv == ["/x/llama-server", "-m", "/m/q.gguf", *BASE, *device_args,
                    "--jinja", "--alias", "q", "-c", "2048"]


def test_hrx_env_points_iree_at_libhsa():
    env = HrxLauncher().env(ServeConfig(model="q", hrx_libhsa="/opt/rocm/lib/libhsa.so"), GGUF)
    assert env == {"IREE_HAL_AMDGPU_LIBHSA_PATH": "/opt/rocm/lib/libhsa.so"}


def test_lean_h32_sets_w4a4_on_vulkan_and_rocm_only_for_h32_files():
    h32 = ModelRef("gguf", Path("/m/Qwen3-4B-H32.gguf"), "q")
    for launcher in (VulkanLauncher, RocmLauncher):
        assert launcher().env(ServeConfig(model="q", lean=True), h32) == {
            "GGML_W4A4_TENSORS": "all"}
        assert launcher().env(ServeConfig(model="q", lean=True), GGUF) == {}
        assert launcher().env(ServeConfig(model="q"), h32) == {}


def test_zinc_argv_env_and_request_without_model():
    z = ZincLauncher()
    assert z.argv("/z/zinc", GGUF, 9, ServeConfig(model="q", ctx_size=4096)) == [
        "/z/zinc", "-m", "/m/q.gguf", "-p", "9", "-c", "4096"]
    assert z.env(ServeConfig(model="q"), GGUF) == {"RADV_PERFTEST": "coop_matrix"}
    assert z.rewrite_body({"model": "q", "messages": []}) == {"messages": []}
    assert z.rewrite_body({"messages": []}) is None


def test_ds4_argv_and_readiness():
    one = ModelRef("1bp", Path("/m/q.1bp"), "q")
    assert Ds4Launcher().argv("/d/ds4-server", one, 9, ServeConfig(model="q", ctx_size=8192)) == [
        "/d/ds4-server", "-m", "/m/q.1bp", *BASE, "--ctx", "8192"]
    assert Ds4Launcher.info.readiness == "/v1/models"


def test_mlx_argv_model_id_and_offline_hub(tmp_path, monkeypatch):
    folder = ModelRef("mlx", tmp_path, "m")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    launcher = MlxLauncher()
    argv = launcher.argv("/v/bin/mlx_lm.server", folder, 9, ServeConfig(model="m"))
    assert argv == ["/v/bin/mlx_lm.server", "--model", str(tmp_path), *BASE]
    assert launcher.rewrite_body({"model": "m", "messages": []})["model"] == "default_model"
    assert launcher.env(ServeConfig(model="m"), folder) == {
        "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    assert (tmp_path / "hub").is_dir()
    lemon = MlxLauncher()
    hf = ModelRef("hf-id", Path("mlx-community/Qwen3-0.6B-4bit"), "Qwen3-0.6B-4bit",
                  "mlx-community/Qwen3-0.6B-4bit")
    assert lemon.argv("/b/lemon-mlx-server", hf, 9, ServeConfig(model="x"))[2] == hf.source
    assert lemon.rewrite_body({"model": "x"}) == {"model": "mlx-community/Qwen3-0.6B-4bit"}


def test_onnx_argv():
    folder = ModelRef("onnx", Path("/m/phi"), "phi")
    assert OnnxLauncher().argv("/o/ryzenai-server", folder, 9, ServeConfig(
        model="phi", ctx_size=1024)) == ["/o/ryzenai-server", "-m", "/m/phi", "--port", "9",
                                         "--ctx-size", "1024"]


def test_npu_argv_readiness_and_lookup(monkeypatch, tmp_path):
    folder = ModelRef("npu", Path("/m/qwen-npu"), "qwen-npu")
    assert NpuLauncher().argv("/n/onebit-npu-server", folder, 9, ServeConfig(model="q")) == [
        "/n/onebit-npu-server", "-m", "/m/qwen-npu", *BASE]
    assert NpuLauncher.info.readiness == "/v1/health"
    from lemonade_onebit.backends.executors import resolve_executor
    from lemonade_onebit.errors import RunError

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunError, match=r"set \$ONEBIT_NPU_SERVER"):
        resolve_executor(NpuLauncher(), ServeConfig(model="q"))


@pytest.mark.parametrize(
    ("launcher", "option", "value"),
    [(OnnxLauncher, "parallel", 2), (OnnxLauncher, "mtp", "/h"), (OnnxLauncher, "dflash", "/d"),
     (OnnxLauncher, "lean", True), (OnnxLauncher, "mmproj", "/p"),
     (Ds4Launcher, "parallel", 2), (Ds4Launcher, "mtp", "/h"),
     (CudaLauncher, "lean", True), (ZincLauncher, "parallel", 2), (MlxLauncher, "ctx_size", 9),
     (NpuLauncher, "parallel", 2), (NpuLauncher, "llama_server", "/x")],
)
def test_routes_refuse_what_they_cannot_honour(launcher, option, value):
    found = refusals(ServeConfig(model="m", **{option: value}), launcher)
    assert found and all(f.startswith("--") for f in found)


def test_environment_extras_never_override_the_user(monkeypatch):
    monkeypatch.setenv("RADV_PERFTEST", "mine")
    assert merged_env({"RADV_PERFTEST": "coop_matrix", "OTHER": "1"})["RADV_PERFTEST"] == "mine"
    assert merged_env({"OTHER": "1"})["OTHER"] == "1"


def test_model_kinds_are_detected(tmp_path):
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "genai_config.json").write_text("{}")
    (tmp_path / "npu" / "npu").mkdir(parents=True)
    (tmp_path / "npu" / "model.q4nx").write_bytes(b"")
    (tmp_path / "mlx").mkdir()
    (tmp_path / "mlx" / "config.json").write_text("{}")
    (tmp_path / "mlx" / "model.safetensors").write_bytes(b"")
    (tmp_path / "m.1bp").write_bytes(b"")
    assert resolve_model(str(tmp_path / "onnx")).kind == "onnx"
    assert resolve_model(str(tmp_path / "npu")).kind == "npu"
    assert resolve_model(str(tmp_path / "mlx")).kind == "mlx"
    assert resolve_model(str(tmp_path / "m.1bp")).kind == "1bp"
    hf = resolve_model("mlx-community/Qwen3-0.6B-4bit")
    assert hf.kind == "hf-id" and hf.served_id == "Qwen3-0.6B-4bit"


def _standin(tmp_path: Path, flavour: str) -> str:
    script = tmp_path / f"{flavour}-standin"
    here = Path(__file__).parent / "standins" / "executor.py"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{here}" {flavour} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_zinc_end_to_end_through_standin(start_serve, tmp_path, smollm2):
    serve = start_serve("-m", str(smollm2), "--device", "zinc", "-c", "2048",
                        "--zinc", _standin(tmp_path, "zinc")).wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"model": "anything", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200, raw
    reply = json.loads(raw)
    assert reply["choices"][0]["message"]["content"] == "hello from zinc"
    seen = json.loads(reply["system_fingerprint"])
    assert seen["RADV_PERFTEST"] == "coop_matrix"
    assert seen["argv"][seen["argv"].index("-c") + 1] == "2048"
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"model": "x", "stream": True,
                        "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n")
    status, raw = http("GET", serve.url + "/slots")
    assert status == 501 and json.loads(raw)["error"]["type"] == "not_implemented"
    assert "no vulkan or amd-gpu detected" in serve.log()


def test_ds4_is_ready_on_v1_models(start_serve, tmp_path):
    model = tmp_path / "tiny.1bp"
    model.write_bytes(b"1bp")
    serve = start_serve("-m", str(model), env={"ONEBIT_DS4": _standin(tmp_path, "ds4")})
    serve.wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and json.loads(raw)["model"] == "tiny"
    assert "auto picked ds4 for 1bp" in serve.log()


def test_devices_json_reports_cpu_and_its_executor(llama_server):
    out = subprocess.run([ONEBIT, "devices", "--json"], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert [d["kind"] for d in report["devices"]] == ["cpu"]
    cpu = next(r for r in report["routes"] if r["device"] == "cpu")
    assert cpu["available"] and cpu["executor"] == llama_server
    assert not any(r["available"] for r in report["routes"]
                   if r["device"] in ("cuda", "vulkan", "rocm", "hrx", "zinc", "npu"))
    mlx = next(r for r in report["routes"] if r["device"] == "mlx")
    assert mlx["available"] and mlx["executor"].endswith("mlx_lm.server")  # MLX's CPU build
    onnx = next(r for r in report["routes"] if r["device"] == "onnx")
    assert onnx["available"] and onnx["executor"].endswith("onebit-onnx-server")


def test_npu_folder_end_to_end_through_standin(start_serve, tmp_path):
    folder = tmp_path / "qwen-npu"
    (folder / "npu").mkdir(parents=True)
    (folder / "model.q4nx").write_bytes(b"q4nx")
    serve = start_serve("-m", str(folder), "--device", "npu", "-c", "1024",
                        env={"ONEBIT_NPU_SERVER": _standin(tmp_path, "npu")}).wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and json.loads(raw)["model"] == "qwen-npu"
    seen = json.loads(json.loads(raw)["system_fingerprint"])
    assert seen["argv"][seen["argv"].index("--ctx-size") + 1] == "1024"


def _recording_llama_server(tmp_path: Path, real: str) -> tuple[str, Path]:
    """The real llama-server behind a wrapper that records the argv and environment a GPU route
    gives it, then drops the GPU device flags so the CPU build can serve the request."""
    record = tmp_path / "record.json"
    script = tmp_path / "gpu-llama-server"
    script.write_text(f"""#!{sys.executable}
import json, os, sys
argv = sys.argv[1:]
json.dump({{"argv": argv, "env": {{k: os.environ.get(k) for k in
           ("IREE_HAL_AMDGPU_LIBHSA_PATH", "GGML_W4A4_TENSORS")}}}}, open("{record}", "w"))
out = []
skip = 0
for i, a in enumerate(argv):
    if skip:
        skip -= 1
        continue
    if a == "--device":
        skip = 1
        continue
    if a == "-ngl":
        out += ["-ngl", "0"]
        skip = 1
        continue
    out.append(a)
os.execv("{real}", ["{real}", *out])
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), record


@pytest.mark.parametrize(
    ("device", "args", "device_flag", "env"),
    [
        ("hrx", ["--hrx-libhsa", "/opt/rocm/lib/libhsa-runtime64.so"], "HRX0",
         {"IREE_HAL_AMDGPU_LIBHSA_PATH": "/opt/rocm/lib/libhsa-runtime64.so"}),
        ("rocm", ["--lean"], "ROCm0", {"GGML_W4A4_TENSORS": "all"}),
        ("vulkan", [], "Vulkan0", {}),
    ],
)
def test_gpu_llama_server_routes_end_to_end(start_serve, tmp_path, smollm2, llama_server,
                                            device, args, device_flag, env):
    model = tmp_path / "SmolLM2-H32.gguf"  # an H32 name: the lean route sets W4A4 for it
    model.symlink_to(smollm2)
    wrapper, record = _recording_llama_server(tmp_path, llama_server)
    serve = start_serve("-m", str(model), "--device", device, "--llama-server", wrapper,
                        *args).wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 200
    seen = json.loads(record.read_text())
    assert seen["argv"][seen["argv"].index("--device") + 1] == device_flag
    assert seen["argv"][seen["argv"].index("-ngl") + 1] == "99"
    assert {k: v for k, v in seen["env"].items() if v} == env
