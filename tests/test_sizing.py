"""`--parallel auto`: slots and context sized from the GPU's free memory, the weights and the KV
cache per token; explicit values win; what cannot fit is refused with the numbers."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import ONEBIT, fake_gpu, http

from lemonade_onebit import devices
from lemonade_onebit.backends.llamacpp import slot_ask, with_slots
from lemonade_onebit.backends.sizing import (
    GIB,
    KvShape,
    Room,
    SlotAsk,
    plan_slots,
)
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import UsageError
from lemonade_onebit.ggufmeta import GgufFacts
from lemonade_onebit.modelref import ModelRef
from lemonade_onebit.serve.plan import plan
from lemonade_onebit.serve.slots import draft_kv_per_token, weight_bytes

QWEN3 = KvShape(layers=28, kv_heads=8, key_length=128, value_length=128, train_ctx=40960)
H200 = Room(free=139 * GIB)
WEIGHTS = 400 << 20


# -- the planner: pure ------------------------------------------------------------------------

def test_kv_per_token_counts_k_and_v_of_every_kv_head_of_every_layer():
    assert QWEN3.bytes_per_token() == 28 * 8 * 256 * 2 == 112 * 1024
    assert QWEN3.bytes_per_token("q8_0", "q8_0") == pytest.approx(112 * 1024 * 34 / 64)
    assert QWEN3.bytes_per_token("q4_0", "f16") == pytest.approx(28 * 8 * 128 * (18 / 32 + 2))


def test_head_sizes_default_as_llama_cpp_does_and_a_missing_layer_count_is_unknown():
    smol = GgufFacts("llama", 0, None, block_count=30, embedding_length=576, head_count=9,
                     head_count_kv=3, context_length=8192)
    assert KvShape.from_facts(smol) == KvShape(30, 3, 64, 64, 8192)
    no_kv_heads = GgufFacts("llama", 0, None, block_count=2, embedding_length=64, head_count=4)
    assert KvShape.from_facts(no_kv_heads) == KvShape(2, 4, 16, 16, None)  # head_count: a bound
    assert KvShape.from_facts(GgufFacts("llama", 0, None, head_count=4)) is None


def test_auto_gives_as_many_slots_of_the_default_context_as_fit_at_most_64():
    plan = plan_slots(SlotAsk(), H200, WEIGHTS, QWEN3)
    assert (plan.slots, plan.ctx) == (64, 64 * 8192)
    assert plan.message.startswith("64 slots x 8192 tokens, KV 56.0 GiB of 139.0 GiB free")
    assert "--parallel auto: 149 fit, at most 64" in plan.message


def test_auto_on_a_smaller_gpu_gives_fewer_slots():
    room = Room(free=24 * GIB)  # headroom 1 GiB + 5% of 24 GiB: 22.2 GiB for weights and KV
    plan = plan_slots(SlotAsk(), room, WEIGHTS, QWEN3)
    budget = 24 * GIB - WEIGHTS - GIB - 24 * GIB // 20
    assert plan.slots == budget // (8192 * 112 * 1024) == 24
    assert plan.ctx == 24 * 8192


def test_serve_c_is_the_context_of_one_request_rounded_up_to_llama_cpp_s_step():
    plan = plan_slots(SlotAsk(slots=8, ctx=1000), H200, WEIGHTS, QWEN3)
    assert (plan.slots, plan.ctx) == (8, 8 * 1024)
    auto = plan_slots(SlotAsk(ctx=40960), H200, WEIGHTS, QWEN3)
    assert (auto.slots, auto.ctx) == (29, 29 * 40960)


def test_the_default_context_is_at_most_the_trained_one():
    small = KvShape(2, 2, 16, 16, train_ctx=4096)
    assert plan_slots(SlotAsk(slots=2), H200, WEIGHTS, small).ctx == 2 * 4096


def test_explicit_slots_that_cannot_fit_are_refused_with_the_numbers():
    with pytest.raises(UsageError) as refused:
        plan_slots(SlotAsk(slots=64, ctx=40960), H200, WEIGHTS, QWEN3)
    message = str(refused.value)
    assert message.startswith("--parallel 64 -c 40960 needs 288.3 GiB of GPU memory: KV cache "
                              "280.0 GiB (2621440 tokens x 112 KiB) + weights 0.4 GiB")
    assert "the GPU has 139.0 GiB free (29 slots of 40960 tokens fit, or 64 slots of 18944 " \
           "tokens)" in message
    assert message.endswith("ask for fewer slots (--parallel) or less context (-c), or free the GPU")


def test_an_explicit_context_that_fits_no_slot_is_refused_but_defaults_fall_back():
    tiny = Room(free=2 * GIB)
    with pytest.raises(UsageError, match=r"^-c 40960 needs .* \(1 slot of \d+ tokens fit\)"):
        plan_slots(SlotAsk(ctx=40960), tiny, WEIGHTS, QWEN3)
    plan = plan_slots(SlotAsk(), tiny, int(1.9 * GIB), QWEN3)
    assert (plan.slots, plan.ctx) == (None, None)
    assert "not one slot of 8192 tokens fits" in plan.message


def test_the_executor_s_own_c_is_a_total_and_is_checked():
    mine = plan_slots(SlotAsk(executor_ctx=65536), H200, WEIGHTS, QWEN3)
    assert (mine.slots, mine.ctx) == (None, None)  # llama-server's own slots share it
    split = plan_slots(SlotAsk(slots=8, executor_ctx=65536), H200, WEIGHTS, QWEN3)
    assert (split.slots, split.ctx) == (8, None) and split.message.startswith("8 slots x 8192")
    with pytest.raises(UsageError, match=r"^-- -c 3000000 needs .* \(at most \d+ tokens fit\)"):
        plan_slots(SlotAsk(executor_ctx=3_000_000), H200, WEIGHTS, QWEN3)


def test_a_unified_cache_gets_the_same_total_and_says_it_is_shared():
    plan = plan_slots(SlotAsk(slots=32, unified=True), H200, WEIGHTS, QWEN3)
    assert (plan.slots, plan.ctx) == (32, 32 * 8192)
    assert plan.message.startswith("32 slots sharing 262144 tokens (unified KV cache)")


def test_unknown_memory_or_shape_leaves_auto_to_llama_server_and_explicit_values_unchecked():
    for room, shape, why in ((None, QWEN3, "the device's free memory is unknown"),
                             (H200, None, "the model's KV cache size is unknown")):
        plan = plan_slots(SlotAsk(), room, WEIGHTS, shape)
        assert (plan.slots, plan.ctx) == (None, None) and why in plan.message
    plan = plan_slots(SlotAsk(slots=100), None, WEIGHTS, QWEN3)
    assert (plan.slots, plan.ctx) == (100, 100 * 8192) and "not checked" in plan.message


def test_a_kv_cache_in_host_memory_is_not_checked_against_the_gpu():
    plan = plan_slots(SlotAsk(slots=64, ctx=40960, kv_on_host=True), H200, WEIGHTS, QWEN3)
    assert (plan.slots, plan.ctx) == (64, 64 * 40960)
    assert "the KV cache stays in host memory (-nkvo): not checked" in plan.message


def test_more_slots_than_llama_cpp_runs_are_refused():
    with pytest.raises(UsageError, match="llama-server runs 1 to 256 slots"):
        plan_slots(SlotAsk(slots=257), H200, WEIGHTS, QWEN3)


# -- llama-server's command line --------------------------------------------------------------

ARGV = ["/b/llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", "9", "-ngl", "99"]


def test_slot_ask_reads_every_spelling_and_tells_serve_c_from_the_executor_s():
    config = ServeConfig(model="m", ctx_size=4096)
    assert slot_ask([*ARGV, "-c", "4096"], config) == SlotAsk(ctx=4096)
    theirs = ServeConfig(model="m", ctx_size=4096, extra_args=("--ctx-size=65536",))
    argv = [*ARGV, "--parallel=8", "--ctx-size=65536", "--kv-unified", "--cache-type-k", "q8_0",
            "-ctv", "q4_0", "-nkvo"]
    assert slot_ask(argv, theirs) == SlotAsk(slots=8, executor_ctx=65536, unified=True,
                                             type_k="q8_0", type_v="q4_0", kv_on_host=True)
    assert slot_ask([*ARGV, "-np", "4", "-no-kvu"], config).unified is False


@pytest.mark.parametrize("extra", [["-np", "-1"], ["-np", "x"], ["-c", "0"]])
def test_llama_server_s_own_auto_and_values_it_must_judge_are_left_to_it(extra):
    config = ServeConfig(model="m", extra_args=tuple(extra))
    assert slot_ask([*ARGV, *extra], config) is None


def test_with_slots_replaces_any_spelling_in_place_and_keeps_the_rest():
    argv = [*ARGV, "--ctx-size", "4096", "--jinja", "--parallel=2", "--alias", "x"]
    assert with_slots(argv, 16, 16 * 4096) == [*ARGV, "-c", "65536", "--jinja", "-np", "16",
                                                "--alias", "x"]
    assert with_slots(ARGV, 4, None) == [*ARGV, "-np", "4"]
    assert with_slots(ARGV, None, None) == ARGV


# -- the device's memory ----------------------------------------------------------------------

def test_nvidia_memory_is_read_from_nvidia_smi_for_the_gpus_cuda_sees(fake_sysfs, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_gpu(fake_sysfs, free_mib=142000)
    assert devices.device_memory(("nvidia-gpu",)) == [
        devices.Memory("NVIDIA H200", 143771 << 20, 142000 << 20, 0)]
    assert devices.device_memory(("amd-gpu",)) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert devices.device_memory(("nvidia-gpu",)) == []


def test_no_nvidia_smi_means_unknown_memory(fake_sysfs):
    fake_sysfs("nvidia-gpu")  # the driver's files, no nvidia-smi
    assert devices.device_memory(("nvidia-gpu",)) == []


# -- serve's plan on a fake GPU host ----------------------------------------------------------

def _plan(config: ServeConfig):
    said: list[str] = []
    return plan(config, say=said.append), said


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_cuda_serve_sizes_its_slots_from_the_gpu(fake_sysfs, monkeypatch, smollm2, llama_server):
    """SmolLM2: 30 layers x 3 KV heads x (64 + 64) x 2 bytes = 22.5 KiB a token, trained 8,192."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_gpu(fake_sysfs, free_mib=142000)
    cuda = (("--llama-server", llama_server),)
    p, said = _plan(ServeConfig(model=str(smollm2), device="cuda", executors=cuda))
    assert (_flag(p.spec.argv, "-np"), _flag(p.spec.argv, "-c")) == ("64", str(64 * 8192))
    assert any(line.startswith("64 slots x 8192 tokens, KV 11.2 GiB of 138.7 GiB free")
               for line in said), said
    p, _ = _plan(ServeConfig(model=str(smollm2), device="cuda", executors=cuda, parallel=3,
                             ctx_size=2048))
    assert (_flag(p.spec.argv, "-np"), _flag(p.spec.argv, "-c")) == ("3", str(3 * 2048))
    p, said = _plan(ServeConfig(model=str(smollm2), device="cuda", executors=cuda,
                                extra_args=("-np", "-1")))
    assert _flag(p.spec.argv, "-np") == "-1" and "-c" not in p.spec.argv
    assert "llama-server chooses its own slots (the -np or -c given after `--`)" in said


def test_backend_sampling_set_in_the_executor_s_environment_is_seen_by_serve(
        fake_sysfs, monkeypatch, smollm2, llama_server, tmp_path):
    """The greedy rewrite follows `-bs` wherever the executor gets it: the recipe's flag, a
    recipe's env, or serve's own environment."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LLAMA_ARG_BACKEND_SAMPLING", raising=False)
    fake_gpu(fake_sysfs, free_mib=142000)
    cuda = (("--llama-server", llama_server),)
    recipes = tmp_path / "recipes.json"
    recipes.write_text(json.dumps([{"id": "bs-env", "match": {"device": ["cuda"]},
                                    "env": {"LLAMA_ARG_BACKEND_SAMPLING": "1"}, "measured": "-"}]))
    for config, env_value in (
            (ServeConfig(model=str(smollm2), device="cuda", executors=cuda), None),
            (ServeConfig(model=str(smollm2), device="cuda", executors=cuda,
                         recipes=str(recipes)), "1")):
        p, _ = _plan(config)
        assert p.spec.env.get("LLAMA_ARG_BACKEND_SAMPLING") == env_value
        assert ("-bs" in p.spec.argv) == (env_value is None)  # the shipped recipe, or the file's
        assert p.launcher.backend_sampling
    off = ServeConfig(model=str(smollm2), device="cuda", executors=cuda, no_recipes=True)
    assert not _plan(off)[0].launcher.backend_sampling
    monkeypatch.setenv("LLAMA_ARG_BACKEND_SAMPLING", "true")
    assert _plan(off)[0].launcher.backend_sampling


def test_the_gpu_budget_caps_the_room_slots_are_planned_in(fake_sysfs, monkeypatch, smollm2,
                                                          llama_server):
    """$ONEBIT_GPU_BUDGET_GIB, the card share the MoE planner works with, bounds the slots too;
    a value that is no positive number is ignored."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_gpu(fake_sysfs, free_mib=142000)
    cuda = (("--llama-server", llama_server),)
    monkeypatch.setenv("ONEBIT_GPU_BUDGET_GIB", "4")
    p, said = _plan(ServeConfig(model=str(smollm2), device="cuda", executors=cuda))
    # 4 GiB - (1 GiB + 4/20 GiB) - weights, over 8,192 x 22.5 KiB a slot
    assert _flag(p.spec.argv, "-np") == "15", said
    assert any("15 slots x 8192 tokens, KV 2.6 GiB of 4.0 GiB free" in line for line in said), said
    for junk in ("0", "-3", "inf", "nan", "lots"):
        monkeypatch.setenv("ONEBIT_GPU_BUDGET_GIB", junk)
        p, _ = _plan(ServeConfig(model=str(smollm2), device="cuda", executors=cuda))
        assert _flag(p.spec.argv, "-np") == "64", junk


def test_a_moe_file_larger_than_the_gpu_plans_slots_beside_its_dense_weights(
        fake_sysfs, monkeypatch, moe_tiny, llama_server):
    """The experts keep the room: where the whole file and one slot do not fit, slots are
    planned beside the dense weights (at most 4) and the expert plan places the experts in what
    is left; where the file fits, it counts whole, as a dense model's does."""
    from lemonade_onebit.backends.sizing import GIB
    from lemonade_onebit.moe.inspect import read_index

    index = read_index(moe_tiny)
    one_slot = 512 * 4096  # 4 layers x 2 KV heads x (16 + 16) x 2 bytes, at its trained 4,096
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_gpu(fake_sysfs, free_mib=142000)
    cuda = (("--llama-server", llama_server),)
    budget = (GIB + index.dense_bytes + 1.5 * one_slot) / 0.95  # less than whole + one slot
    assert index.file_bytes + one_slot > 0.95 * budget - GIB
    monkeypatch.setenv("ONEBIT_GPU_BUDGET_GIB", str(budget / GIB))
    p, said = _plan(ServeConfig(model=str(moe_tiny), device="cuda", executors=cuda))
    assert (_flag(p.spec.argv, "-np"), _flag(p.spec.argv, "-c")) == ("1", "4096"), said
    assert any("a MoE file larger than the GPU's room: slots are planned beside its dense "
               "weights, at most 4" in line for line in said), said
    assert any(line.startswith("expert placement:") for line in said), said
    monkeypatch.setenv("ONEBIT_GPU_BUDGET_GIB", "2")
    p, said = _plan(ServeConfig(model=str(moe_tiny), device="cuda", executors=cuda))
    assert _flag(p.spec.argv, "-np") == "64" and not any("MoE file" in line for line in said)


def test_the_cpu_route_keeps_llama_server_s_own_slots(fake_sysfs, monkeypatch, smollm2):
    fake_gpu(fake_sysfs, free_mib=142000)
    p, said = _plan(ServeConfig(model=str(smollm2), device="cpu", ctx_size=2048))
    assert "-np" not in p.spec.argv and _flag(p.spec.argv, "-c") == "2048"
    assert not any("slots" in line for line in said)


def test_serve_refuses_what_cannot_fit_before_starting_anything(fake_sysfs, llama_server, smollm2,
                                                                tmp_path):
    env = fake_gpu(fake_sysfs, free_mib=3000)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = subprocess.run([ONEBIT, "serve", "-m", str(smollm2), "--device", "cuda",
                          "--llama-server", llama_server, "--parallel", "256", "-c", "8192"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2, out.stderr
    errors = [row for row in out.stderr.splitlines() if "needs" in row]
    assert len(errors) == 1, out.stderr
    assert errors[0].startswith("1bit serve: --parallel 256 -c 8192 needs 46.2 GiB of GPU memory: "
                                "KV cache 45.0 GiB (2097152 tokens x 22.5 KiB)")
    assert "but the GPU has 2.9 GiB free (9 slots of 8192 tokens fit, or 256 slots of 256 " \
           "tokens)" in errors[0]
    assert " on cuda (" in out.stderr and "ready on" not in out.stderr  # planned, never started


def test_llama_server_runs_the_slots_and_context_serve_planned(start_serve, fake_sysfs,
                                                               monkeypatch, smollm2, llama_server):
    """The real llama-server (the CPU build stands in for a CUDA one: it ignores `-ngl`) gives
    each planned slot the per-request context: it reads `-np N -c N x ctx` as serve means it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = fake_gpu(fake_sysfs, free_mib=1536)  # room for a few SmolLM2 slots of 2,048 tokens
    serve = start_serve("-m", str(smollm2), "--device", "cuda", "--llama-server", llama_server,
                        "-c", "2048", env=env).wait_ready()
    line = next(row for row in serve.log().splitlines() if " slots x 2048 tokens" in row)
    slots = int(line.split("1bit serve: ", 1)[1].split(" ")[0])
    assert slots > 1, line
    status, raw = http("GET", serve.url + "/props")
    assert status == 200
    props = json.loads(raw)
    assert props["total_slots"] == slots
    assert props["default_generation_settings"]["n_ctx"] == 2048


def test_a_draft_model_s_kv_cache_counts_with_the_target_s(smollm2):
    config = ServeConfig(model="m", dflash=str(smollm2))
    assert draft_kv_per_token(config) == 30 * 3 * 128 * 2
    room = Room(free=24 * GIB)
    alone = plan_slots(SlotAsk(), room, WEIGHTS, QWEN3)
    drafted = plan_slots(SlotAsk(), room, WEIGHTS, QWEN3, draft_per_token=QWEN3.bytes_per_token())
    assert drafted.slots == alone.slots // 2
    assert draft_kv_per_token(ServeConfig(model="m", mtp="/no/such.gguf")) == 0.0
    model = ModelRef(kind="gguf", path=smollm2, source=str(smollm2), served_id="s")
    assert weight_bytes(model, config) == 2 * smollm2.stat().st_size


def test_the_weights_of_a_split_gguf_are_every_shard(tmp_path):
    for i, size in ((1, 100), (2, 200), (3, 300)):
        (tmp_path / f"big[v2]-0000{i}-of-00003.gguf").write_bytes(b"x" * size)
    (tmp_path / "big[v2]-00001-of-00002.gguf").write_bytes(b"x" * 5000)  # another split
    first = tmp_path / "big[v2]-00001-of-00003.gguf"
    model = ModelRef(kind="gguf", path=first, source=str(first), served_id="big")
    assert weight_bytes(model, ServeConfig(model="m")) == 600
