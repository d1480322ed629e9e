"""The expert index of a GGUF and the placement planner: file facts and memory in, flags out."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ONEBIT

from lemonade_onebit.moe import plan as P
from lemonade_onebit.moe.apply import place_experts, workload_of
from lemonade_onebit.moe.inspect import ExpertLayer, MoeIndex, Tensor, read_index

GiB, MiB = P.GiB, P.MiB


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ONEBIT_GPU_BUDGET_GIB", raising=False)


def synthetic(layers: int = 48, sizes=(100 * MiB, 100 * MiB, 150 * MiB)) -> MoeIndex:
    """Qwen3-30B-A3B's layout with routed tensors of the given sizes in every layer."""
    kinds = ("gate", "up", "down")
    return MoeIndex(
        path=Path("synthetic.gguf"), architecture="qwen3moe", file_bytes=0, n_layer=layers,
        expert_count=128, expert_used_count=8, expert_shared_count=0,
        layers=tuple(ExpertLayer(i, tuple(Tensor(f"blk.{i}.ffn_{k}_exps.weight", "Q4_K",
                                                 (2048, 768, 128), n)
                                          for k, n in zip(kinds, sizes)), ())
                     for i in range(layers)),
        dense_bytes=800 * MiB, input_bytes=170 * MiB, n_embd=2048, n_head=32, n_head_kv=4,
        key_length=128, value_length=128, n_vocab=151936, ctx_train=40960, n_ff_exp=768)


WORK = P.Workload(ctx=4096, parallel=1)
PLENTY = 256 * GiB


def gpu(budget: int, ram: int = PLENTY, lockable: int | None = None) -> P.Memory:
    return P.Memory(budget, ram, lockable, "of GPU budget")


def test_index_of_the_tiny_moe_matches_gguf_reader(moe_tiny):
    import gguf

    index = read_index(moe_tiny)
    assert (index.architecture, index.n_layer, index.expert_count, index.expert_used_count) == (
        "qwen3moe", 4, 8, 2)
    expert = 8 * 32 * 64 * 2  # 8 experts of 32 x 64 F16
    assert [layer.routed_bytes for layer in index.layers] == [3 * expert] * 4
    assert index.input_bytes == 49152 * 64 * 2 and index.n_vocab == 49152
    assert index.bytes_per_token == index.dense_bytes - index.input_bytes + 4 * 3 * expert // 4
    reader = gguf.GGUFReader(moe_tiny)
    theirs = {t.name: int(t.n_bytes) for t in reader.tensors}
    ours = {t.name: t.nbytes for layer in index.layers for t in layer.routed}
    assert ours == {name: n for name, n in theirs.items() if "_exps." in name}
    assert index.dense_bytes + index.routed_bytes == sum(theirs.values())


def test_index_reads_the_header_only_and_fast(smollm2):
    start = time.perf_counter()
    index = read_index(smollm2)
    assert time.perf_counter() - start < 2.0
    assert not index.moe and index.layers == () and index.n_layer == 30


def test_a_truncated_or_crafted_file_is_a_value_error(moe_tiny, tmp_path):
    data = moe_tiny.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated"):
        read_index(cut)
    crafted = tmp_path / "crafted.gguf"
    crafted.write_bytes(data[:8] + struct.pack("<Q", 1 << 40) + data[16:])
    with pytest.raises(ValueError, match="tensors claimed"):
        read_index(crafted)


def test_everything_on_the_gpu_when_it_fits():
    index = synthetic()
    p = P.plan(index, gpu(P.budget_for(index, WORK, 1.0)), WORK, "cuda")
    assert p.flags == () and p.resident_fraction == 1.0 and "everything fits" in p.reason
    assert p.gpu_need_bytes <= p.gpu_bytes


def test_a_partial_budget_keeps_the_last_layers_experts_and_pins_the_rest():
    index = synthetic()
    p = P.plan(index, gpu(P.budget_for(index, WORK, 0.5)), WORK, "cuda")
    assert p.flags[:2] == ("--n-cpu-moe", "24") and p.flags[-2:] == ("--load-mode", "mlock")
    assert p.resident_fraction == 0.5 and p.gpu_need_bytes <= p.gpu_bytes
    assert p.cpu_tensors[0] == "blk.0.ffn_gate_exps.weight" and len(p.cpu_tensors) == 72
    assert "pinned" in p.reason and p.warnings == ()


def test_the_layer_split_between_gpu_and_ram_goes_by_tensor():
    """Room for 10 layers and 250 MiB more: of layer 37, gate and down (250 MiB) fit, up
    (100 MiB) goes to RAM with -ot, layers 0-36 with --n-cpu-moe 37."""
    index = synthetic()
    base = P.budget_for(index, WORK, 0.0)
    p = P.plan(index, gpu(base + 10 * 350 * MiB + 260 * MiB), WORK, "cuda")
    assert p.flags[:4] == ("--n-cpu-moe", "37", "-ot", r"blk\.37\.ffn_up_exps=CPU")
    assert p.gpu_routed_bytes == 10 * 350 * MiB + 250 * MiB


def test_more_budget_never_means_fewer_experts_resident_nor_more_than_the_budget():
    index = synthetic(layers=12, sizes=(90 * MiB, 90 * MiB, 140 * MiB))
    low, high = P.budget_for(index, WORK, 0.0), P.budget_for(index, WORK, 1.0)
    last = -1.0
    for budget in range(low, high + 64 * MiB, 37 * MiB):
        p = P.plan(index, gpu(budget), WORK, "cuda")
        assert p.resident_fraction >= last
        assert p.gpu_need_bytes <= budget or p.warnings
        last = p.resident_fraction


def test_ram_too_small_leaves_experts_mapped_and_says_decode_reads_disk():
    index = synthetic()
    p = P.plan(index, gpu(P.budget_for(index, WORK, 0.25), ram=4 * GiB), WORK, "cuda")
    assert p.flags[-2:] == ("--load-mode", "mmap") and p.load_mode == "mmap"
    assert any("from disk" in w for w in p.warnings) and p.per_token["disk"] > 0


def test_a_memlock_limit_reads_experts_into_ram_unpinned():
    index = synthetic()
    p = P.plan(index, gpu(P.budget_for(index, WORK, 0.5), lockable=64 * 1024), WORK, "cuda")
    assert p.flags[-2:] == ("--load-mode", "none") and "ulimit -l" in p.reason


def test_dense_weights_that_do_not_fit_say_so():
    index = synthetic()
    p = P.plan(index, gpu(1 * GiB), WORK, "cuda")
    assert p.flags[0] == "--cpu-moe" and any("lower -c" in w for w in p.warnings)


def test_the_cpu_route_places_nothing_and_warns_when_ram_is_short():
    index = synthetic()
    p = P.plan(index, P.Memory(None, PLENTY), WORK, "cpu")
    assert p.flags == () and "nothing to place" in p.reason and p.warnings == ()
    short = P.plan(index, P.Memory(None, 8 * GiB), WORK, "cpu")
    assert short.flags == () and "from disk" in short.warnings[0]


def test_unknown_gpu_memory_leaves_placement_to_llama_cpp():
    p = P.plan(synthetic(), P.Memory(None, PLENTY), WORK, "cuda")
    assert p.flags == () and "unknown" in p.reason


def test_kv_tokens_follow_llama_server():
    index = synthetic()
    assert P.Workload(ctx=8192).kv_tokens(index) == 8192
    assert P.Workload().kv_tokens(index) == 40960
    assert P.Workload(parallel=4).kv_tokens(index) == 4 * 40960  # unset -c: the trained one each


def test_workload_is_read_from_the_argv_whoever_set_it():
    w = workload_of(["llama-server", "-m", "x", "--ctx-size", "16384", "-np", "4", "-ub=1024",
                     "-fa", "off", "--cache-type-k", "q8_0"])
    assert (w.ctx, w.parallel, w.ubatch, w.flash_attn, w.type_k, w.type_v) == (
        16384, 4, 1024, "off", "q8_0", "f16")


def test_serve_applies_the_plan_on_a_gpu_route_and_leaves_cpu_alone(moe_tiny, monkeypatch):
    said: list[str] = []
    argv = ["llama-server", "-m", str(moe_tiny), "-ngl", "99", "-c", "4096"]
    assert place_experts(argv, moe_tiny, "cpu", (), said.append) == argv and said == []
    index = read_index(moe_tiny)
    budget = P.budget_for(index, P.Workload(ctx=4096), 0.5)
    monkeypatch.setenv("ONEBIT_GPU_BUDGET_GIB", repr(budget / GiB))
    out = place_experts(argv, moe_tiny, "cuda", (), said.append)
    assert out[: len(argv)] == argv and out[len(argv)] == "--n-cpu-moe"
    assert any(line.startswith("expert placement: ") and "GPU budget" in line for line in said)
    for given in (["--n-cpu-moe", "2"], ["-ot", "exps=CPU"], ["--fit", "off"], ["-cmoe"]):
        said.clear()
        assert place_experts(argv + given, moe_tiny, "cuda", tuple(given), said.append) == \
            argv + given
        assert said and "left to the given" in said[0]
    said.clear()
    theirs = argv + ["--load-mode", "mmap"]
    out = place_experts(theirs, moe_tiny, "cuda", ("--load-mode", "mmap"), said.append)
    assert out.count("--load-mode") == 1 and "--n-cpu-moe" in out


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, "moe", *args], capture_output=True, text=True, timeout=60)


def test_inspect_and_plan_commands_on_the_tiny_moe(moe_tiny):
    out = run("inspect", str(moe_tiny))
    assert out.returncode == 0, out.stderr
    assert "8 per layer, 2 used per token" in out.stdout and "ffn_down_exps F16" in out.stdout
    data = json.loads(run("inspect", str(moe_tiny), "--json").stdout)
    assert data["expert_count"] == 8 and len(data["layers"]) == 4

    index = read_index(moe_tiny)
    work = P.Workload(ctx=4096)

    def plan(*extra: str) -> dict:
        done = run("plan", str(moe_tiny), "--device", "cuda", "--ctx", "4096", "--json", *extra)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    full = plan("--budget-gib", repr(P.budget_for(index, work, 1.0) / GiB + 0.01))
    assert full["flags"] == [] and full["resident_fraction"] == 1.0
    half = plan("--budget-gib", repr(P.budget_for(index, work, 0.5) / GiB), "--ram-gib", "64")
    assert half["flags"][:2] == ["--n-cpu-moe", "2"] and half["resident_fraction"] == 0.5
    short = plan("--budget-gib", repr(P.budget_for(index, work, 0.5) / GiB), "--ram-gib", "0.5")
    assert short["flags"][-2:] == ["--load-mode", "mmap"] and "from disk" in short["warnings"][0]
    text = run("plan", str(moe_tiny), "--device", "cpu")
    assert text.returncode == 0 and "nothing to place" in text.stdout
    assert "llama-server flags: (none)" in text.stdout


def test_plan_refuses_what_it_cannot_plan(moe_tiny, tmp_path):
    out = run("plan", str(moe_tiny), "--device", "cpu", "--budget-gib", "8")
    assert out.returncode == 2 and "GPU routes" in out.stderr
    out = run("plan", str(tmp_path / "missing.gguf"))
    assert out.returncode == 1 and "model not found" in out.stderr
    out = run("plan", str(moe_tiny), "--budget-gib", "-1")
    assert out.returncode == 2 and "greater than 0" in out.stderr


def test_plan_reads_the_gpus_free_memory_from_nvidia_smi(moe_tiny, fake_sysfs):
    """A stand-in `nvidia-smi` (the driver's tool, absent here) reports the GPU's free memory, in
    MiB; the plan is made for that number: just under what the tiny model needs beside its
    experts, so every expert goes to RAM and the plan says the GPU is too small."""
    env = fake_sysfs("nvidia-gpu")
    index = read_index(moe_tiny)
    work = P.Workload(ctx=4096)
    assert P.budget_for(index, work, 1.0) - P.budget_for(index, work, 0.0) < MiB
    free_mib = P.budget_for(index, work, 0.0) // MiB
    smi = Path(env["ONEBIT_SYSFS_ROOT"]) / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\n# stands in for the NVIDIA driver's nvidia-smi --query-gpu\n"
                   f"echo '0, NVIDIA H200, 143771, {free_mib}'\n")
    smi.chmod(0o755)
    done = subprocess.run([ONEBIT, "moe", "plan", str(moe_tiny), "--ctx", "4096", "--json"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device"] == "cuda" and data["memory"]["gpu_bytes"] == free_mib * MiB
    assert data["memory"]["gpu_source"] == "free on the GPU (nvidia-smi)"
    assert data["flags"][0] == "--cpu-moe" and "free on the GPU (nvidia-smi)" in data["warnings"][0]
