"""Route facts read from GGUF metadata, fast, and the Hadamard stamp that forces the lean route."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from conftest import ONEBIT

from lemonade_onebit import ggufmeta
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import UsageError
from lemonade_onebit.route import stamp_route


def _write(path, arch="llama", **kv):
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(5000)])
    writer.add_array("tokenizer.ggml.scores", [0.0] * 5000)
    for key, value in kv.items():
        writer.add_uint32(key, value)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_facts_of_the_embedded_model(smollm2):
    facts = ggufmeta.read_facts(smollm2)
    assert facts == ggufmeta.GgufFacts("llama", 0, None)


def test_skipping_arrays_keeps_the_fields_after_them(tmp_path):
    path = _write(tmp_path / "moe.gguf", "qwen3moe", **{"qwen3moe.expert_count": 128,
                                                        "onebit.hadamard_q4_0": 32})
    facts = ggufmeta.read_facts(path)
    assert facts.architecture == "qwen3moe" and facts.moe and facts.expert_count == 128
    assert facts.hadamard_q4_0 == 32


def test_facts_are_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    path = _write(tmp_path / "a.gguf")
    first = ggufmeta.read_facts(path)
    monkeypatch.setattr(ggufmeta, "_read", lambda p: pytest.fail("read twice"))
    assert ggufmeta.read_facts(path) == first


def test_not_a_gguf_is_a_value_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 10)
    with pytest.raises(ValueError):
        ggufmeta.read_facts(bad)


def test_stamp_forces_lean_rocm_and_refuses_other_devices():
    config, why = stamp_route(ServeConfig(model="m"), 32)
    assert (config.device, config.lean) == ("rocm", True) and "hadamard_q4_0=32" in why
    assert stamp_route(ServeConfig(model="m", device="cpu"), None)[0].device == "cpu"
    with pytest.raises(UsageError, match="runs only on --device rocm --lean"):
        stamp_route(ServeConfig(model="m", device="cpu"), 32)


def _serve(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, "serve", *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_serve_follows_the_stamp_and_refuses_other_devices(tmp_path, fake_sysfs):
    path = _write(tmp_path / "stamped.gguf", **{"onebit.hadamard_q4_0": 32})
    env = fake_sysfs()
    out = _serve("-m", str(path), env=env)
    assert out.returncode == 1
    assert "hadamard_q4_0=32 stamp: rocm --lean" in out.stderr
    assert "--device rocm: this machine has no amd-gpu" in out.stderr
    out = _serve("-m", str(path), "--device", "cpu", env=env)
    assert out.returncode == 2 and "runs only on --device rocm --lean" in out.stderr


def test_a_stamped_file_on_an_amd_gpu_goes_to_rocm_and_asks_for_its_build(tmp_path, fake_sysfs):
    path = _write(tmp_path / "stamped.gguf", **{"onebit.hadamard_q4_0": 32})
    (tmp_path / "empty-bin").mkdir()
    env = {**fake_sysfs("amd-gpu"), "PATH": str(tmp_path / "empty-bin"), "ONEBIT_LLAMA_SERVER": ""}
    out = _serve("-m", str(path), env=env)
    assert out.returncode == 1
    assert "hadamard_q4_0=32 stamp: rocm --lean" in out.stderr
    assert "no llama-server found for the rocm route" in out.stderr
