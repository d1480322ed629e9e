"""`1bit bench` with the real llama-server: the table, the JSON samples and the lock."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess

import pytest
from conftest import ONEBIT

QUICK = ["--rounds", "1", "--prompt-reps", "1", "--decode-reps", "1", "--decode-tokens", "8"]


@pytest.mark.executor
@pytest.mark.slow
def test_two_config_bench_prints_table_and_json(tmp_path):
    out_json = tmp_path / "bench.json"
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "base=",
         "--config", "batch64=-- -b 64", *QUICK, "--json", str(out_json),
         "--log-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [row for row in out.stdout.splitlines()
            if row.startswith("| base") or row.startswith("| batch64")]
    assert len(rows) == 2
    assert re.search(r"\| base \| \(none\) \| [\d.]+ / [\d.]+ \| [\d.]+ / [\d.]+ \|", rows[0])
    assert re.search(r"\| batch64 \| `-- -b 64` \| [\d.]+ / [\d.]+ \([+-]\d+\.\d%\) \| "
                     r"[\d.]+ / [\d.]+ \([+-]\d+\.\d%\) \|", rows[1])
    data = json.loads(out_json.read_text())
    assert [c["name"] for c in data["configs"]] == ["base", "batch64"]
    for config in data["configs"]:
        assert len(config["prompt_tps"]) == 1 and len(config["decode_tps"]) == 3
        assert all(v > 0 for v in config["prompt_tps"] + config["decode_tps"])
    for name in ("base", "batch64"):
        assert "1bit serve: ready on" in (tmp_path / "logs" / f"{name}-round1.log").read_text()
    assert "round 1/1 batch64" in out.stderr


def test_lock_refuses_a_second_bench(tmp_path):
    lock = tmp_path / "bench.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out = subprocess.run([ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config",
                              "base=", *QUICK, "--lock", str(lock)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"another bench holds the lock {lock}" in out.stderr


def test_bad_config_is_a_usage_error():
    out = subprocess.run([ONEBIT, "bench", "-m", "x", "--config", "no-equals-sign"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "expected NAME=ARGS" in out.stderr


def test_a_config_whose_serve_fails_stops_with_its_log(fake_sysfs):
    out = subprocess.run([ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config",
                          "broken=--device vulkan", *QUICK], capture_output=True, text=True,
                         timeout=60, env=fake_sysfs())  # a host with no Vulkan device
    assert out.returncode == 1
    assert "serve exited 1" in out.stderr and "log:" in out.stderr
    assert "--device vulkan: this machine has no vulkan or amd-gpu" in out.stderr


@pytest.mark.executor
def test_e2e_measures_the_exact_prompt_lengths_asked_for(tmp_path):
    out_json = tmp_path / "e2e.json"
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "base=", "--e2e",
         "--prompt-tokens", "7,64,300", "--e2e-reps", "2", "--decode-tokens", "16", "--rounds",
         "1", "--json", str(out_json)],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out_json.read_text())
    runs = data["configs"][0]["runs"]
    assert [r["prompt_tokens"] for r in runs] == [7, 7, 64, 64, 300, 300]
    for r in runs:
        assert r["prompt_n"] == r["prompt_tokens"]  # the executor's own count
        assert r["generated"] == 16
        assert 0 < r["ttft_ms"] < r["e2e_ms"]
        expected = 16 / (r["ttft_ms"] / 1000 + 15 / r["decode_tps"])
        assert abs(r["effective_tps"] - expected) < 1e-6 * expected
    rows = [row for row in out.stdout.splitlines() if row.startswith("| base")]
    assert [row.split("|")[3].strip() for row in rows] == ["7", "64", "300"]


@pytest.mark.executor
def test_e2e_refuses_a_prompt_longer_than_the_context(tmp_path):
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "small=-c 256",
         "--e2e", "--prompt-tokens", "300", "--rounds", "1"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert "do not fit the context of 256" in out.stderr


@pytest.mark.executor
@pytest.mark.slow
def test_swap_times_cold_and_warm_starts_against_the_executor_alone(tmp_path):
    out_json = tmp_path / "swap.json"
    plot = tmp_path / "swap.png"
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "base=", "--swap",
         "--rounds", "1", "--json", str(out_json), "--plot", str(plot),
         "--log-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    starts = json.loads(out_json.read_text())["configs"][0]["starts"]
    assert sorted((s["start"], s["side"]) for s in starts) == [
        ("cold", "executor"), ("cold", "serve"), ("warm", "executor"), ("warm", "serve")]
    for s in starts:
        assert 0 < s["ready_ms"] < s["first_token_ms"]
    # The executor side ran llama-server itself, with the argv serve plans.
    executor_log = (tmp_path / "logs" / "base-round1-warm-executor.log").read_text()
    assert "1bit serve:" not in executor_log and "llama" in executor_log.lower()
    assert "1bit serve: ready on" in (tmp_path / "logs" / "base-round1-warm-serve.log").read_text()
    assert re.search(r"\| base \| \(none\) \| cold \| \d+ \| \d+ \| [+-]\d+ \|", out.stdout)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.executor
@pytest.mark.slow
def test_plot_draws_the_ab_table(tmp_path):
    plot = tmp_path / "ab.png"
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "base=", *QUICK,
         "--plot", str(plot)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert plot.stat().st_size > 5000


def test_bad_bench_flags_are_usage_errors():
    for args, message in ((["--e2e", "--swap"], "not allowed with"),
                          (["--e2e", "--prompt-tokens", "12,x"], "is not a list"),
                          (["--e2e", "--prompt-tokens", "0"], "greater than 0"),
                          (["--plot", "out.svg"], "give a .png file")):
        out = subprocess.run([ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config",
                              "base=", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)


@pytest.mark.executor
@pytest.mark.slow
def test_concurrency_measures_every_level_of_every_config_interleaved(tmp_path):
    out_json, plot = tmp_path / "concurrency.json", tmp_path / "concurrency.png"
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "base=",
         "--config", "two=--parallel 2", "--concurrency", "1,2", "--bursts", "2",
         "--decode-tokens", "8", "--prompt-tokens", "32", "--rounds", "1",
         "--json", str(out_json), "--plot", str(plot)],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out_json.read_text())
    assert (data["mode"], data["concurrency"], data["rounds_done"]) == ("concurrency", [1, 2], 1)
    slots = {}
    for config in data["configs"]:
        assert [b["streams"] for b in config["bursts"]] == [1, 1, 2, 2]
        for burst in config["bursts"]:
            assert burst["tokens"] == 8 * burst["streams"]
            assert len(burst["ttft_ms"]) == len(burst["stream_tps"]) == burst["streams"]
            assert 0 < min(burst["ttft_ms"]) and burst["decode_tps"] > 0
            assert burst["steady_tps"] > 0
            assert burst["wall_s"] * 1000 > max(burst["ttft_ms"])
            assert burst["aggregate_tps"] == pytest.approx(burst["tokens"] / burst["wall_s"])
        slots[config["name"]] = config["servers"][0]["slots"]
    assert slots == {"base": 4, "two": 2}  # llama-server's own default, and --parallel 2
    rows = [row for row in out.stdout.splitlines() if row.startswith(("| base", "| two"))]
    assert [row.split("|")[4].strip() for row in rows] == ["1", "2", "1", "2"]
    assert re.search(r"\| two \| `--parallel 2` \| 2 x \d+ \| 2 \| [\d.]+ \| \d+\.\d\d \|", rows[3])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_steady_rate_counts_only_what_arrived_while_every_stream_was_generating():
    from lemonade_onebit.bench.concurrency import steady_rate

    def stream(times, tokens=None):
        return {"streamed": True, "first": times[0], "last": times[-1], "arrivals": times,
                "tokens": tokens or len(times)}
    # b starts at 2.0 (a was alone before), a ends at 6.0 (b alone after): 4 s with both on
    a = stream([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    b = stream([2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 8.0])
    assert steady_rate([a, b]) == (4 + 8) / 4.0
    # events that each carried two tokens count twice
    assert steady_rate([a, stream(b["arrivals"], tokens=22)]) == (4 + 16) / 4.0
    # one stream: its own rate after its first token
    assert steady_rate([a]) == 6 / 6.0
    # no moment with both on, or a whole reply: none
    assert steady_rate([stream([0.0, 1.0]), stream([2.0, 3.0])]) is None
    assert steady_rate([a, {**b, "streamed": False}]) is None


def test_concurrency_prompts_are_exact_lengths_sharing_only_the_first_token():
    from lemonade_onebit.bench.concurrency import percentile, prompts

    batch = prompts(list(range(100)), 10, 4)
    assert [len(p) for p in batch] == [10] * 4
    assert {p[0] for p in batch} == {0} and len({tuple(p[1:]) for p in batch}) == 4
    assert percentile([1, 2, 3, 4, 5], 0.95) == pytest.approx(4.8)
    with pytest.raises(Exception, match="fewer than 110"):
        prompts(list(range(100)), 100, 10)


def test_concurrency_needs_two_tokens_a_stream():
    out = subprocess.run([ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "b=",
                          "--concurrency", "1", "--decode-tokens", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--concurrency needs --decode-tokens 2 or more" in out.stderr
