"""Route facts read from GGUF metadata, fast, and the Hadamard stamp that forces the lean route."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time

import numpy as np
import pytest
from conftest import ONEBIT
from gguf.constants import GGUF_MAGIC, GGUFValueType

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
    assert facts == ggufmeta.GgufFacts(
        "llama", 0, None, block_count=30, embedding_length=576, head_count=9, head_count_kv=3,
        key_length=None, value_length=None, context_length=8192)


def test_a_shape_value_that_is_no_count_is_left_out(tmp_path):
    """Per-layer KV head counts (an array) and a zero say nothing; the other counts are read."""
    import gguf

    path = tmp_path / "per-layer.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("llama.attention.head_count_kv", [2, 4, 2])
    writer.add_uint32("llama.attention.key_length", 0)
    writer.add_uint32("llama.block_count", 3)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    facts = ggufmeta.read_facts(path)
    assert (facts.block_count, facts.head_count_kv, facts.key_length) == (3, None, None)


def test_cache_entries_of_an_older_version_are_read_again(tmp_path, monkeypatch):
    path = _write(tmp_path / "a.gguf", **{"llama.block_count": 7})
    stat = path.stat()
    old = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"  # version 1's key: no shape
    cache = ggufmeta._cache_path()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({old: {"architecture": "llama", "expert_count": 0,
                                       "hadamard_q4_0": None}}))
    assert ggufmeta.read_facts(path).block_count == 7
    assert old not in json.loads(cache.read_text())


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


def _kv(key: str, kind: int, payload: bytes) -> bytes:
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", kind) + payload


def _str(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def _array(item: int, count: int) -> bytes:
    return struct.pack("<IQ", item, count)


T = GGUFValueType
ARCH = _kv("general.architecture", T.STRING, _str("llama"))
CRAFTED = {  # name → (metadata entries, the entry count the header claims or None)
    "an array of 2^40 float32 values": ([ARCH, _kv("s", T.ARRAY, _array(T.FLOAT32, 1 << 40))],
                                        None),
    "an array of 2^40 strings": ([ARCH, _kv("t", T.ARRAY, _array(T.STRING, 1 << 40) + _str("a"))],
                                 None),
    "an array of 2^40 arrays": ([ARCH, _kv("n", T.ARRAY, _array(T.ARRAY, 1 << 40)
                                        + _array(T.UINT8, 0))], None),
    "arrays nested 5,000 deep": ([ARCH, _kv("n", T.ARRAY, _array(T.ARRAY, 1) * 5000
                                         + _array(T.UINT8, 0))], None),
    "an array of strings running past the end": (
        [ARCH, _kv("t", T.ARRAY, _array(T.STRING, 3) + _str("a") + struct.pack("<Q", 1 << 62))],
        None),
    "a string of 2^62 bytes": ([_kv("general.architecture", T.STRING,
                                    struct.pack("<Q", 1 << 62) + b"llama")], None),
    "a key of 2^40 bytes": ([struct.pack("<Q", 1 << 40) + b"general.architecture"], None),
    "2^40 metadata entries": ([ARCH], 1 << 40),
    "an unknown value type": ([_kv("x", 99, b"\0" * 8), ARCH], None),
}


def _crafted(path, entries: list[bytes], count: int | None):
    """A GGUF v3 header with no tensors, from raw bytes (the layout of gguf.constants)."""
    header = struct.pack("<IIQQ", GGUF_MAGIC, 3, 0, len(entries) if count is None else count)
    path.write_bytes(header + b"".join(entries) + b"\0" * 64)
    return path


@pytest.mark.parametrize("name", list(CRAFTED))
def test_a_crafted_header_is_a_value_error_at_once(tmp_path, name):
    path = _crafted(tmp_path / "crafted.gguf", *CRAFTED[name])
    started = time.perf_counter()
    with pytest.raises(ValueError, match="not a readable GGUF header: .* download it again"):
        ggufmeta.read_facts(path)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("data", [b"", b"GGUF", b"GGUF\x03\x00\x00\x00\x00",
                                  b"GGUF\x01\x00\x00\x00" + b"\0" * 16])
def test_a_truncated_or_old_header_is_a_value_error(tmp_path, data):
    path = tmp_path / "short.gguf"
    path.write_bytes(data)
    with pytest.raises(ValueError):
        ggufmeta.read_facts(path)


def test_a_big_endian_file_is_read(tmp_path):
    import gguf

    path = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen3moe", endianess=gguf.GGUFEndian.BIG)
    writer.add_array("tokenizer.ggml.tokens", ["a", "bc"])
    writer.add_uint32("qwen3moe.expert_count", 8)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert ggufmeta.read_facts(path) == ggufmeta.GgufFacts("qwen3moe", 8, None)


@pytest.mark.executor
@pytest.mark.parametrize("name", ["an array of 2^40 strings", "arrays nested 5,000 deep"])
def test_serve_of_a_crafted_header_fails_in_one_line(tmp_path, llama_server, name):
    path = _crafted(tmp_path / "crafted.gguf", *CRAFTED[name])
    out = _serve("-m", str(path), "--device", "cpu", env={**os.environ,
                                                          "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr, out.stderr
    errors = [row for row in out.stderr.splitlines() if row.startswith("1bit serve: error:")]
    assert len(errors) == 1, out.stderr
