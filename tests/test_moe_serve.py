"""The tiny MoE end to end with the real llama-server: served on the cpu route, the expert plan on
a GPU route, routing traces from libllama, and the placement benchmark's plumbing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ONEBIT, http, sse_events

from lemonade_onebit.moe import plan as P
from lemonade_onebit.moe.inspect import read_index
from lemonade_onebit.moe.simulate import load_trace

ROOT = Path(__file__).resolve().parent.parent
ASK = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 16,
       "temperature": 0, "stream": True}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ONEBIT_GPU_BUDGET_GIB", raising=False)


def streamed_text(url: str) -> str:
    status, raw = http("POST", url + "/v1/chat/completions", ASK)
    assert status == 200, raw
    events = sse_events(raw)
    assert events[-1] == b"[DONE]"
    return "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in events[:-1] if json.loads(e).get("choices"))


def executor_argv(serve) -> list[str]:
    children = [p for p in serve.children() if p.name() == "llama-server"]
    assert len(children) == 1
    return children[0].cmdline()


def test_serve_streams_a_reply_from_the_tiny_moe_on_the_cpu_route(start_serve, moe_tiny):
    serve = start_serve("-m", str(moe_tiny), "--alias", "moe").wait_ready()
    assert len(streamed_text(serve.url)) > 0
    assert "expert placement" not in serve.log()  # every weight is in RAM there already
    assert not {"--n-cpu-moe", "--cpu-moe", "--load-mode"} & set(executor_argv(serve))


@pytest.mark.parametrize("extra,added", [
    (0, ["--n-cpu-moe", "2"]),
    (40 * 1024, ["--n-cpu-moe", "1", "-ot", r"blk\.1\.ffn_up_exps=CPU,blk\.1\.ffn_down_exps=CPU"]),
])
def test_a_gpu_route_applies_and_logs_the_plan(start_serve, fake_sysfs, moe_tiny, llama_server,
                                               extra, added):
    """The CPU llama-server stands in for the CUDA build (it takes the same flags and ignores
    -ngl); the GPU budget comes from ONEBIT_GPU_BUDGET_GIB: half the experts fit, or half and one
    more expert tensor, which splits layer 1 with -ot."""
    env = fake_sysfs("nvidia-gpu")
    index = read_index(moe_tiny)
    budget = P.budget_for(index, P.Workload(ctx=4096), 0.5) + extra
    env = {**env, "ONEBIT_GPU_BUDGET_GIB": repr(budget / P.GiB)}
    serve = start_serve("-m", str(moe_tiny), "--device", "cuda", "--llama-server", llama_server,
                        "--", "-c", "4096", env=env).wait_ready()
    argv = executor_argv(serve)
    at = argv.index(added[0])
    assert argv[at:at + len(added)] == added
    assert argv[argv.index("--load-mode") + 1] in ("mlock", "none")
    log = serve.log()
    assert "of GPU budget ($ONEBIT_GPU_BUDGET_GIB) holds the dense weights" in log
    assert f"expert placement: adding {' '.join(added)} --load-mode" in log
    assert len(streamed_text(serve.url)) > 0


def test_a_placement_flag_after_the_dashes_wins(start_serve, fake_sysfs, moe_tiny, llama_server):
    env = {**fake_sysfs("nvidia-gpu"), "ONEBIT_GPU_BUDGET_GIB": "0.5"}
    serve = start_serve("-m", str(moe_tiny), "--device", "cuda", "--llama-server", llama_server,
                        "--", "--cpu-moe", env=env).wait_ready()
    argv = executor_argv(serve)
    assert "--cpu-moe" in argv and "--n-cpu-moe" not in argv and "--load-mode" not in argv
    assert "expert placement: left to the given -cmoe" in serve.log()


@pytest.mark.executor
def test_trace_records_every_tokens_experts_and_simulate_reads_it(moe_tiny, tmp_path):
    out = tmp_path / "trace.jsonl"
    done = subprocess.run([ONEBIT, "moe", "trace", str(moe_tiny), "--prompt", "Tell me a story.",
                           "--tokens", "12", "--ignore-eos", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trace = load_trace(out)
    prompt = trace.meta["prompt_tokens"]
    assert prompt > 3 and len(trace.tokens) == prompt + 12
    assert (trace.n_layer, trace.n_expert, trace.n_expert_used) == (4, 8, 2)
    assert all(len(ids) == 2 for token in trace.tokens for ids in token)
    again = tmp_path / "again.jsonl"
    subprocess.run([ONEBIT, "moe", "trace", str(moe_tiny), "--prompt", "Tell me a story.",
                    "--tokens", "12", "--ignore-eos", "--out", str(again)], check=True,
                   capture_output=True, timeout=120)
    assert load_trace(again).tokens == trace.tokens  # greedy and deterministic
    sim = subprocess.run([ONEBIT, "moe", "simulate", "--trace", str(out), "--slots", "2,8",
                          "--json"], capture_output=True, text=True, timeout=60)
    rates = {(r["policy"], r["per_layer_slots"]): r["hit_rate"]
             for r in json.loads(sim.stdout)["results"]}
    seen = {(layer, e) for token in trace.tokens for layer, ids in enumerate(token) for e in ids}
    assert rates[("lru", 8)] == pytest.approx(1 - len(seen) / trace.accesses)  # all 8 held
    assert rates[("belady", 2)] >= rates[("lru", 2)]


@pytest.mark.executor
def test_trace_refuses_a_dense_model(smollm2, tmp_path):
    done = subprocess.run([ONEBIT, "moe", "trace", str(smollm2), "--prompt", "hi", "--tokens",
                           "2", "--out", str(tmp_path / "t.jsonl")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "not a mixture of experts" in done.stderr


@pytest.mark.executor
@pytest.mark.slow
def test_the_placement_benchmark_runs_every_config(moe_tiny, llama_server, tmp_path):
    """bench/moe_speed.py at a toy size on the CPU build (the figures mean nothing here; the GPU
    machine gives the real ones): every config and budget runs and is recorded."""
    out = tmp_path / "moe.json"
    done = subprocess.run(
        [sys.executable, "bench/moe_speed.py", "--model", str(moe_tiny), "--llama-server",
         llama_server, "--budgets", "100,50", "--rounds", "1", "--prompt-tokens", "32",
         "--decode-tokens", "4", "--reps", "1", "--gpu-free-mib", "100000", "--json", str(out),
         "--logs", str(tmp_path / "logs")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    runs = {(s["config"], s["budget_pct"]) for s in data["samples"]}
    assert runs == {(c, b) for c in ("plan", "fit", "fit-default") for b in (100, 50)} | {
        ("cpu-moe", 50)}
    assert data["plan_at_fit_left_out"] == 2  # no nvidia-smi here: fit's GPU memory is unknown
    assert all(min(s["decode_tps"]) > 0 and min(s["prompt_tps"]) > 0 for s in data["samples"])
    fit = next(s for s in data["samples"] if s["config"] == "fit" and s["budget_pct"] == 50)
    assert fit["fit_target_mib"] == 100000 - data["meta"]["budgets_mib"]["50"]
    # llama.cpp's own margin on a card of the budget's size
    fit = next(s for s in data["samples"] if s["config"] == "fit-default" and s["budget_pct"] == 50)
    assert fit["fit_target_mib"] == 100000 - data["meta"]["budgets_mib"]["50"] + 1024
    assert fit["argv"][-2:] == ["--fit-target", str(fit["fit_target_mib"])]
    plan = next(s for s in data["samples"] if s["config"] == "plan" and s["budget_pct"] == 50)
    assert "--n-cpu-moe" in plan["argv"] and plan["planned"]["resident_fraction"] == 0.5
    assert "| experts resident (budget) |" in done.stdout


def test_plan_at_fits_memory_is_paired_with_fit_round_by_round():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import moe_speed
    finally:
        sys.path.remove(str(ROOT / "bench"))

    def sample(config, round_no, decode, budget_mib=8265, used=None):
        return {"config": config, "round": round_no, "budget_pct": 75, "budget_mib": budget_mib,
                "decode_tps": [decode], "prompt_tps": [1000.0], "experts_resident": 0.8,
                "experts_from_ram_mib_per_token": 100.0, "gpu_used_mib": used,
                "within_budget": used is None or used <= budget_mib}

    samples = [sample("fit", 0, 200.0, used=8396), sample("plan-at-fit", 0, 210.0, 8396, 8300),
               sample("plan", 0, 180.0, used=7858), sample("fit", 1, 220.0, used=8396),
               sample("plan-at-fit", 1, 209.0, 8396, 8350), sample("plan", 1, 190.0, used=7858),
               sample("plan-nohost", 0, 230.0, used=7858), sample("plan-nohost", 1, 242.0, used=7858)]
    row = moe_speed.summary(samples)[0]
    assert row["budget_mib"] == 8265  # the budget's, not fit's memory
    assert row["plan_at_fit_vs_fit_decode_tps"] == round((210 / 200 + 209 / 220) / 2, 4)
    assert row["plan_vs_fit_decode_tps"] == round((180 / 200 + 190 / 220) / 2, 4)
    assert row["plan_nohost_vs_fit_decode_tps"] == round((230 / 200 + 242 / 220) / 2, 4)
    flags = ("--n-cpu-moe", "6", "--load-mode", "mlock")
    argv = moe_speed.argv_for("plan-nohost", "ls", Path("m.gguf"), 1, 4096, None, flags, None)
    assert argv[-7:] == ["-ngl", "99", *flags, "--no-host"]  # the plan's flags, then --no-host
    argv = moe_speed.argv_for("plan-t8", "ls", Path("m.gguf"), 1, 4096, None, flags, None)
    assert argv[-8:] == ["-ngl", "99", *flags, "-t", "8"]
    samples += [sample("plan-t8", 0, 220.0, used=7858), sample("plan-t8", 1, 231.0, used=7858)]
    assert moe_speed.summary(samples)[0]["plan_t8_vs_fit_decode_tps"] == 1.075
    samples += [sample("fit-default", 0, 150.0, used=7100), sample("fit-default", 1, 160.0, used=7100)]
    row = moe_speed.summary(samples)[0]
    assert row["plan_vs_fit_default_decode_tps"] == round((180 / 150 + 190 / 160) / 2, 4)
    assert "plan_at_fit_vs_fit_default_decode_tps" not in row  # it ran at fit's memory
    # without the GPU's free memory, each fit config keeps its own margin
    assert moe_speed.argv_for("fit-default", "ls", Path("m.gguf"), 1, 4096, None, (), None)[-1] \
        == "1024"
    assert moe_speed.argv_for("fit", "ls", Path("m.gguf"), 1, 4096, None, (), None)[-1] == "0"
    lines = {line.split(" | ")[2]: line for line in moe_speed.table([row]).splitlines()[2:]}
    assert set(lines) == {"plan", "fit", "fit-default", "plan-at-fit", "plan-nohost", "plan-t8"}
    assert lines["plan"] == (f"| 75% | 8,265 | plan | 185.0 | 1,000 | 80% | 7,858 | yes | 100 | "
                             f"{row['plan_vs_fit_decode_tps']} | 1.0 | "
                             f"{row['plan_vs_fit_default_decode_tps']} | 1.0 |")
    # in the row's budget: plan-at-fit ran at fit's memory, over the budget
    assert lines["plan-at-fit"].split(" | ")[7] == "**no**"
    assert lines["fit"].endswith("| **no** | 100 |  |  |  |  |")
