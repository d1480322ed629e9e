"""GPUs on the cuda route: which ones a llama-server runs on, and the split over several, from a
fake device tree (the stand-in `nvidia-smi` of conftest's `fake_gpu` prints the rows the real
driver's `--query-gpu=index,name,memory.total,memory.free` prints). The argv is checked here; it
runs on the two-GPU machine."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import ONEBIT, fake_gpu

from lemonade_onebit.backends.llamacpp import LLAMA_FLAG_ALIASES
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import UsageError
from lemonade_onebit.serve.options import parse_serve_args
from lemonade_onebit.serve.plan import plan


@pytest.fixture
def cuda(llama_server):
    return (("--llama-server", llama_server),)


def _plan(**kw):
    said: list[str] = []
    return plan(ServeConfig(device="cuda", **kw), say=said.append).spec.argv, said


def _after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.fixture(autouse=True)
def _all_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ONEBIT_GPU_BUDGET_GIB", raising=False)


def test_a_model_one_gpu_holds_runs_on_the_freest_gpu_alone(fake_sysfs, smollm2, cuda):
    fake_gpu(fake_sysfs, [90000, 142000])
    argv, said = _plan(model=str(smollm2), executors=cuda)
    assert _after(argv, "--device") == "CUDA1"
    assert "--split-mode" not in argv and "--tensor-split" not in argv
    assert any(line.startswith("GPUs: CUDA1 holds the model alone") for line in said), said
    # the slots are planned in that GPU's memory, not both
    assert any("of 138.7 GiB free" in line for line in said), said


def test_a_model_no_gpu_holds_is_split_by_layer_by_free_memory(fake_sysfs, smollm2, cuda):
    """SmolLM2 (about 100 MB) with a 2,048-token slot (45 MiB of KV cache) beside 1 GiB plus a
    twentieth of each GPU kept for compute: 1,180 MiB free holds it on neither alone."""
    fake_gpu(fake_sysfs, [1150, 1180])
    argv, said = _plan(model=str(smollm2), executors=cuda, ctx_size=2048)
    assert _after(argv, "--device") == "CUDA0,CUDA1"
    assert _after(argv, "--split-mode") == "layer"
    assert _after(argv, "--tensor-split") == "1150,1180"
    assert any(line.startswith("GPUs: layers split over CUDA0 (1.1 GiB free), CUDA1 (1.2 GiB "
                               "free) by free memory") for line in said), said
    assert _after(argv, "-np") is not None  # the slots fit in the two together
    for flag in ("--device", "--split-mode", "--tensor-split"):
        assert flag in LLAMA_FLAG_ALIASES  # the pinned llama-server's own spellings


def test_one_slot_is_counted_in_the_kv_cache_types_the_argv_asks_for(fake_sysfs, smollm2, cuda):
    """SmolLM2 (93.8 MiB) with a 2,048-token slot: 45 MiB of f16 KV cache, 12.7 MiB of q4_0. With
    1,210 MiB free, a GPU keeps 1,084.5 for compute and holds 125.5: the f16 slot does not fit
    beside the weights, the q4_0 one does, and a cache kept in RAM (-nkvo) takes nothing."""
    fake_gpu(fake_sysfs, [1200, 1210])
    argv, _ = _plan(model=str(smollm2), executors=cuda, ctx_size=2048)
    assert _after(argv, "--split-mode") == "layer"
    for extra in (("-ctk", "q4_0", "-ctv", "q4_0"), ("-nkvo",)):
        argv, said = _plan(model=str(smollm2), executors=cuda, ctx_size=2048, extra_args=extra)
        assert _after(argv, "--device") == "CUDA1" and "--split-mode" not in argv, (extra, said)


def test_device_cuda_n_picks_the_gpus(fake_sysfs, smollm2, cuda):
    fake_gpu(fake_sysfs, [142000, 142000])
    argv, _ = _plan(model=str(smollm2), executors=cuda, gpus=(1,))
    assert _after(argv, "--device") == "CUDA1"
    fake_gpu(fake_sysfs, [1150, 1180, 142000])
    argv, said = _plan(model=str(smollm2), executors=cuda, gpus=(1, 0), ctx_size=2048)
    assert _after(argv, "--device") == "CUDA1,CUDA0"  # in the order picked
    assert _after(argv, "--tensor-split") == "1180,1150"
    with pytest.raises(UsageError, match=r"--device cuda:3: there is no cuda:3 here; CUDA sees "
                                         r"cuda:0 \(NVIDIA H200\), cuda:1"):
        _plan(model=str(smollm2), executors=cuda, gpus=(3,))


def test_cuda_visible_devices_renumbers_the_gpus_as_cuda_does(fake_sysfs, monkeypatch, smollm2,
                                                               cuda):
    fake_gpu(fake_sysfs, [1000, 142000, 90000])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")  # CUDA0 is nvidia-smi's GPU 2
    argv, said = _plan(model=str(smollm2), executors=cuda)
    assert _after(argv, "--device") == "CUDA1"  # nvidia-smi's GPU 1, the freest it sees
    with pytest.raises(UsageError, match="no cuda:2"):
        _plan(model=str(smollm2), executors=cuda, gpus=(2,))


def test_a_split_or_device_flag_given_after_dashes_wins(fake_sysfs, smollm2, cuda):
    fake_gpu(fake_sysfs, [1150, 1180])
    argv, said = _plan(model=str(smollm2), executors=cuda, ctx_size=2048,
                       extra_args=("-sm", "row"))
    assert argv.count("-sm") == 1 and _after(argv, "-sm") == "row"
    assert "--tensor-split" not in argv and "--device" not in argv
    assert "GPUs: as the given -sm say" in said
    argv, _ = _plan(model=str(smollm2), executors=cuda, gpus=(1,), extra_args=("-ts", "1,3"))
    assert _after(argv, "--device") == "CUDA1" and "--split-mode" not in argv
    argv, _ = _plan(model=str(smollm2), executors=cuda, gpus=(0,),
                    extra_args=("--device", "CUDA1"))
    assert "CUDA0" not in argv


def test_picked_gpus_whose_memory_is_unknown_are_passed_on(fake_sysfs, smollm2, cuda):
    fake_sysfs("nvidia-gpu")  # the driver's files, no nvidia-smi
    argv, said = _plan(model=str(smollm2), executors=cuda, gpus=(0, 1))
    assert _after(argv, "--device") == "CUDA0,CUDA1" and _after(argv, "--split-mode") == "layer"
    argv, _ = _plan(model=str(smollm2), executors=cuda)
    assert "--device" not in argv


def test_one_gpu_machines_get_no_device_flag(fake_sysfs, smollm2, cuda):
    fake_gpu(fake_sysfs, 142000)
    argv, _ = _plan(model=str(smollm2), executors=cuda)
    assert "--device" not in argv and "--split-mode" not in argv


@pytest.mark.parametrize("value, message", [
    ("cuda:x", "expected GPU numbers like cuda:0 or cuda:0,1"),
    ("cuda:0,0", "each GPU number once"),
    ("cuda:-1", "each GPU number once"),
    ("cpu:0", "GPUs are picked by number on the cuda route"),
    ("tpu", "invalid choice: 'tpu'"),
])
def test_bad_device_values_are_refused_with_the_reason(value, message):
    out = subprocess.run([ONEBIT, "serve", "-m", "x.gguf", "--device", value],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_the_parsed_device_carries_the_picks():
    config = parse_serve_args("m.gguf", ["--device", "cuda:0,1"])
    assert (config.device, config.gpus) == ("cuda", (0, 1))
    assert parse_serve_args("m.gguf", ["--device", "cuda"]).gpus == ()


def test_devices_lists_each_gpu_with_its_memory(fake_sysfs):
    env = fake_gpu(fake_sysfs, [142000, 90000])
    out = subprocess.run([ONEBIT, "devices", "--json"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    gpus = json.loads(out.stdout)["gpus"]
    assert [(g["device"], g["name"], g["free_mib"], g["total_mib"]) for g in gpus] == [
        ("cuda:0", "NVIDIA H200", 142000, 143771), ("cuda:1", "NVIDIA H200", 90000, 143771)]
    text = subprocess.run([ONEBIT, "devices"], capture_output=True, text=True, timeout=60,
                          env=env).stdout
    assert "cuda:1  NVIDIA H200  87.9 GiB free of 140.4 GiB" in text
