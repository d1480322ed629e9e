"""`1bit bench` with the real llama-server: the table, the JSON samples and the lock."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess

from conftest import ONEBIT

QUICK = ["--rounds", "1", "--prompt-reps", "1", "--decode-reps", "1", "--decode-tokens", "8"]


def test_two_config_bench_prints_table_and_json(tmp_path):
    out_json = tmp_path / "bench.json"
    out = subprocess.run(
        [ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config", "base=",
         "--config", "batch64=-- -b 64", *QUICK, "--json", str(out_json),
         "--log-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [l for l in out.stdout.splitlines() if l.startswith("| base") or l.startswith("| batch64")]
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


def test_a_config_whose_serve_fails_stops_with_its_log(tmp_path):
    out = subprocess.run([ONEBIT, "bench", "-m", "SmolLM2-135M-Instruct-1bit", "--config",
                          "broken=--device vulkan", *QUICK], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert "serve exited 1" in out.stderr and "log:" in out.stderr
