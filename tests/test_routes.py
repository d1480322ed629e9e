"""Every route's contract: argv, environment, refusals, and two end to end through stand-ins."""

from __future__ import annotations

import importlib.util
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ONEBIT, http

from lemonade_onebit.backends.ds4 import Ds4Launcher
from lemonade_onebit.backends.llamacpp import (
    NO_FILTERS,
    CudaLauncher,
    HrxLauncher,
    RocmLauncher,
    VulkanLauncher,
    greedy_unfiltered,
)
from lemonade_onebit.backends.mlx import MlxLauncher
from lemonade_onebit.backends.npu import NpuLauncher
from lemonade_onebit.backends.onnx import OnnxLauncher
from lemonade_onebit.backends.zinc import ZincLauncher
from lemonade_onebit.catalog.resolve import resolve_model
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef
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
                    "--jinja", "--metrics", "--alias", "q", "-c", "2048"]


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


def test_greedy_requests_lose_their_filters_only_under_backend_sampling():
    """`-bs` in the final command line (however spelt) turns it on; a greedy request then goes
    without top-k, top-p and min-p, which cannot change its argmax; anything that samples, reads
    probabilities back, names its own chain or uses a sampler that looks at what the filters
    left goes unchanged."""
    cuda = CudaLauncher()
    greedy = {"messages": [], "temperature": 0, "top_k": 40}
    cuda.runs(["llama-server", "-m", "m.gguf", "-ngl", "99"], {})
    assert cuda.rewrite_body(greedy) is None
    for spelling in ("-bs", "--backend-sampling"):
        cuda.runs(["llama-server", "-m", "m.gguf", spelling, "-np", "4"], {})
        assert cuda.rewrite_body(greedy) == {"messages": [], "temperature": 0, **NO_FILTERS}
    assert greedy_unfiltered({"temperature": -1.0}) == {"temperature": -1.0, **NO_FILTERS}
    unchanged = [{"messages": []}, {"temperature": 0.7}, {"temperature": "0"},
                 {"temperature": False}, {"temperature": None}, {"temperature": 0, **NO_FILTERS},
                 {"temperature": 0, "logprobs": True}, {"temperature": 0, "n_probs": 5},
                 {"temperature": 0, "top_logprobs": 2}, {"temperature": 0, "mirostat": 2},
                 {"temperature": 0, "samplers": ["top_k", "temperature"]},
                 {"temperature": 0, "post_sampling_probs": True},
                 {"temperature": 0, "typical_p": 0.9}, {"temperature": 0, "typical_p": "x"},
                 {"temperature": 0, "xtc_probability": 0.5},
                 {"temperature": 0, "dynatemp_range": 0.5}]
    for payload in unchanged:
        assert greedy_unfiltered(payload) is None, payload
    assert greedy_unfiltered({"temperature": 0, "logprobs": False, "n_probs": 0}) is not None
    assert greedy_unfiltered({"temperature": 0, "typical_p": 1.0, "xtc_probability": 0,
                              "dynatemp_range": 0.0}) is not None
    # a sampler that looks at what the filters left, or another order, set for every request
    for flags in (["--typical", "0.9"], ["--xtc-probability", "0.5"], ["--dynatemp-range", "1"],
                  ["--samplers", "top_k;temperature"], ["--sampling-seq", "kt"], ["--mirostat", "2"]):
        cuda.runs(["llama-server", "-m", "m.gguf", "-bs", *flags], {})
        assert cuda.rewrite_body(greedy) is None, flags


def test_backend_sampling_from_the_environment_counts_as_the_flag():
    """LLAMA_ARG_BACKEND_SAMPLING in the executor's environment (serve's own, a recipe's or the
    launcher's) turns `-bs` on for the values llama.cpp takes as true; any other leaves it off."""
    cuda = CudaLauncher()
    greedy = {"temperature": 0}
    argv = ["llama-server", "-m", "m.gguf", "-ngl", "99"]
    for value in ("1", "true", "on", "enabled"):
        env = {"PATH": "/usr/bin", "LLAMA_ARG_BACKEND_SAMPLING": value}
        cuda.runs(argv, env)
        assert cuda.rewrite_body(greedy) == {"temperature": 0, **NO_FILTERS}, value
        cuda.runs([*argv, "--typical", "0.9"], env)  # a chain flag keeps every request as it is
        assert cuda.rewrite_body(greedy) is None
    for value in ("0", "false", "off", "yes", ""):
        cuda.runs(argv, {"LLAMA_ARG_BACKEND_SAMPLING": value})
        assert cuda.rewrite_body(greedy) is None, value


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
    assert launcher.model_id("/v/bin/mlx_lm.server", folder) == "default_model"
    assert launcher.env(ServeConfig(model="m"), folder) == {
        "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    assert (tmp_path / "hub").is_dir()
    lemon = MlxLauncher()
    hf = ModelRef("hf-id", Path("mlx-community/Qwen3-0.6B-4bit"), "Qwen3-0.6B-4bit",
                  "mlx-community/Qwen3-0.6B-4bit")
    assert lemon.argv("/b/lemon-mlx-server", hf, 9, ServeConfig(model="x"))[2] == hf.source
    assert lemon.model_id("/b/lemon-mlx-server", hf) == hf.source


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
    ("launcher", "option", "value", "reason"),
    [
        (OnnxLauncher, "parallel", 2, "--parallel: the ONNX server runs one generation at a time"),
        (OnnxLauncher, "mtp", "/h", "--mtp: ONNX Runtime GenAI has no speculative decoding here"),
        (OnnxLauncher, "dflash", "/d",
         "--dflash: ONNX Runtime GenAI has no speculative decoding here"),
        (OnnxLauncher, "lean", True, "--lean: --lean is for ROCmFPX GGUF files"),
        (OnnxLauncher, "mmproj", "/p", "--mmproj: ONNX GenAI folders carry their own vision model"),
        (Ds4Launcher, "parallel", 2, "--parallel: ds4-server serves one request at a time"),
        (Ds4Launcher, "mtp", "/h", "--mtp: ds4-server has no multi-token-prediction head"),
        (CudaLauncher, "lean", True,
         "--lean: --lean needs a ROCmFPX build (--device vulkan or rocm)"),
        (ZincLauncher, "parallel", 2, "--parallel is not supported on the zinc route"),
        (MlxLauncher, "ctx_size", 9, "--ctx-size is not supported on the mlx route"),
        (NpuLauncher, "parallel", 2, "--parallel: the NPU lane runs one sequence at a time"),
        (NpuLauncher, "executors", (("--llama-server", "/x"),),
         "--llama-server names an executor the npu route does not use"),
    ],
)
def test_routes_refuse_what_they_cannot_honour_with_the_reason(launcher, option, value, reason):
    assert refusals(ServeConfig(model="m", **{option: value}), launcher) == [reason]


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


ANYWAY = "running the named executor anyway"


@pytest.mark.parametrize(("kinds", "warning"),
                         [((), f"no vulkan or amd-gpu detected; {ANYWAY}"), (("amd-gpu",), None)],
                         ids=["cpu-only", "amd-gpu"])
def test_zinc_end_to_end_through_standin(start_serve, fake_sysfs, tmp_path, smollm2, kinds,
                                         warning):
    fake_sysfs(*kinds)
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
    assert status == 501 and json.loads(raw)["error"]["type"] == "not_supported_error"
    if warning is None:
        assert ANYWAY not in serve.log()
    else:
        assert warning in serve.log()


def test_ds4_is_ready_on_v1_models(start_serve, tmp_path):
    model = tmp_path / "tiny.1bp"
    model.write_bytes(b"1bp")
    serve = start_serve("-m", str(model), env={"ONEBIT_DS4": _standin(tmp_path, "ds4")})
    serve.wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and json.loads(raw)["model"] == "tiny"
    assert "auto picked ds4 for 1bp" in serve.log()


def devices_json(env: dict) -> dict:
    out = subprocess.run([ONEBIT, "devices", "--json"], capture_output=True, text=True, check=True,
                         env=env, timeout=60)
    return json.loads(out.stdout)


def test_devices_json_reports_cpu_and_its_executor(llama_server, fake_sysfs):
    report = devices_json(fake_sysfs())
    assert [d["kind"] for d in report["devices"]] == ["cpu"]
    cpu = next(r for r in report["routes"] if r["device"] == "cpu")
    assert cpu["available"] and cpu["executor"] == llama_server
    assert not any(r["available"] for r in report["routes"]
                   if r["device"] in ("cuda", "vulkan", "rocm", "hrx", "zinc", "npu"))
    # Where `make setup` installed them: MLX's CPU build, and ONNX Runtime GenAI for our server.
    has_mlx = importlib.util.find_spec("mlx") is not None
    has_genai = importlib.util.find_spec("onnxruntime_genai") is not None
    mlx = next(r for r in report["routes"] if r["device"] == "mlx")
    assert mlx["available"] is has_mlx
    assert (mlx["executor"] or "").endswith("mlx_lm.server") is has_mlx
    onnx = next(r for r in report["routes"] if r["device"] == "onnx")
    assert (onnx["executor"] or "").endswith("onebit-onnx-server") is has_genai


# mlx needs no device where MLX's CPU build is installed (`make setup` installs it).
NO_DEVICE_NEEDED = {"cpu", "ds4", "onnx"} | (
    {"mlx"} if importlib.util.find_spec("mlx") is not None else set())


@pytest.mark.parametrize(
    ("kind", "name", "routes"),
    [("nvidia-gpu", "NVIDIA H200", {"cuda"}),
     ("amd-gpu", "AMD GPU gfx1100", {"hrx", "rocm", "vulkan", "zinc"}),
     ("npu", "AMD XDNA NPU (accel0)", {"npu"})],
)
def test_devices_json_reports_a_device_and_the_routes_it_opens(fake_sysfs, tmp_path, kind, name,
                                                               routes):
    """With no GPU build installed, those routes show no executor: not the CPU build."""
    (tmp_path / "empty-bin").mkdir()
    report = devices_json({**fake_sysfs(kind), "PATH": str(tmp_path / "empty-bin"),
                           "ONEBIT_LLAMA_SERVER": "", "ONEBIT_NPU_SERVER": "", "ONEBIT_ZINC": ""})
    assert [(d["kind"], d["name"]) for d in report["devices"][:-1]] == [(kind, name)]
    assert report["devices"][-1]["kind"] == "cpu"
    assert {r["device"] for r in report["routes"] if r["available"]} == NO_DEVICE_NEEDED | routes
    assert {r["device"]: r["executor"] for r in report["routes"] if r["device"] in routes} == {
        device: None for device in routes}


@pytest.mark.parametrize(
    ("kinds", "device", "said"),
    [((), ["--device", "npu"], f"no npu detected; {ANYWAY}"),
     (("npu",), [], "auto picked npu for npu")],
    ids=["cpu-only", "npu"],
)
def test_npu_folder_end_to_end_through_standin(start_serve, fake_sysfs, tmp_path, kinds, device,
                                               said):
    fake_sysfs(*kinds)
    folder = tmp_path / "qwen-npu"
    (folder / "npu").mkdir(parents=True)
    (folder / "model.q4nx").write_bytes(b"q4nx")
    serve = start_serve("-m", str(folder), *device, "-c", "1024",
                        env={"ONEBIT_NPU_SERVER": _standin(tmp_path, "npu")}).wait_ready()
    assert said in serve.log()
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
    ("device", "kind", "args", "device_flag", "env"),
    [
        ("hrx", "amd-gpu", ["--hrx-libhsa", "/opt/rocm/lib/libhsa-runtime64.so"], "HRX0",
         {"IREE_HAL_AMDGPU_LIBHSA_PATH": "/opt/rocm/lib/libhsa-runtime64.so"}),
        ("rocm", "amd-gpu", ["--lean"], "ROCm0", {"GGML_W4A4_TENSORS": "all"}),
        ("vulkan", "amd-gpu", [], "Vulkan0", {}),
        ("cuda", "nvidia-gpu", [], None, {}),
    ],
)
def test_gpu_llama_server_routes_end_to_end(start_serve, fake_sysfs, tmp_path, smollm2,
                                            llama_server, device, kind, args, device_flag, env):
    """On a machine with the route's device, the named GPU build runs with its device flags."""
    fake_sysfs(kind)
    model = tmp_path / "SmolLM2-H32.gguf"  # an H32 name: the lean route sets W4A4 for it
    model.symlink_to(smollm2)
    wrapper, record = _recording_llama_server(tmp_path, llama_server)
    serve = start_serve("-m", str(model), "--device", device, "--llama-server", wrapper,
                        *args).wait_ready()
    status, raw = http("POST", serve.url + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 200
    seen = json.loads(record.read_text())
    if device_flag is None:
        assert "--device" not in seen["argv"]
    else:
        assert seen["argv"][seen["argv"].index("--device") + 1] == device_flag
    assert seen["argv"][seen["argv"].index("-ngl") + 1] == "99"
    assert {k: v for k, v in seen["env"].items() if v} == env
    assert f"SmolLM2-H32 on {device} ({wrapper})" in serve.log()
    assert ANYWAY not in serve.log()
