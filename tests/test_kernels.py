"""`1bit convert`: the Hadamard rotation keeps the model's function, H32 and ternary Q4_0 are
exact where they must be, the files record what was done, and failures leave nothing behind."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_gguf
from conftest import ONEBIT, free_port, http, wait_for
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

from lemonade_onebit import ggufmeta
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.kernels import compute, convert, gguffile, hadamard, plan
from lemonade_onebit.kernels.ternary import q4_0_from_ternary
from lemonade_onebit.route import stamp_route

NP = compute.Numpy()
VOCAB = 2048  # SmolLM2's first tokens (specials, bytes, the first merges): a small real BPE


@pytest.fixture(scope="session")
def smol_source(smollm2):
    """The embedded SmolLM2, opened once (its vocabulary takes seconds to parse)."""
    return gguffile.Source(smollm2)


@pytest.fixture(scope="session")
def tokenizer(smol_source):
    """SmolLM2's tokenizer cut to its first VOCAB tokens and the merges among them."""
    fields = {k: (v, kind, sub)
              for k, v, kind, sub in tiny_gguf.tokenizer_fields(smol_source.reader)}
    tokens = fields["tokenizer.ggml.tokens"][0][:VOCAB]
    known = set(tokens)
    out = []
    for key, (value, kind, sub) in fields.items():
        if key == "tokenizer.ggml.merges":
            value = [m for m in value if m.replace(b" ", b"", 1) in known
                     and all(p in known for p in m.split(b" ", 1))]
        elif isinstance(value, list) and len(value) == len(fields["tokenizer.ggml.tokens"][0]):
            value = value[:VOCAB]
        out.append((key, value, kind, sub))
    return out


@pytest.fixture(scope="session")
def models(tmp_path_factory, tokenizer):
    """tiny llama (tied head), qwen2 (biases, untied) and qwen3 (q/k norms) files, F32."""
    folder = tmp_path_factory.mktemp("tiny")
    shapes = {"llama": tiny_gguf.Shape(), "qwen2": tiny_gguf.Shape("qwen2", tied=False),
              "qwen3": tiny_gguf.Shape("qwen3", n_embd=96, head_dim=32, n_head=3, n_head_kv=1)}
    return {name: tiny_gguf.write(folder / f"{name}.gguf", s, tokenizer)
            for name, s in shapes.items()}


def fields(path: Path) -> dict:
    return {k: f.contents() for k, f in GGUFReader(path).fields.items()}


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# --- Hadamard matrices and the rotation's arithmetic ------------------------------------------


@pytest.mark.parametrize("order", [12, 20, 28, 36, 44, 60, 108])
def test_paley_matrices_are_hadamard(order):
    h = hadamard.paley(order).astype(np.int64)
    assert set(np.unique(h)) == {-1, 1}
    assert (h @ h.T == order * np.eye(order, dtype=np.int64)).all()


@pytest.mark.parametrize("n", [64, 576, 896, 1536, 2560])
def test_the_fast_rotation_is_the_orthogonal_matrix(n):
    rot = hadamard.Rotation.build(n, np.random.default_rng(7))
    q = rot.dense()
    assert np.abs(q[:16] @ q.T - np.eye(n)[:16]).max() < 1e-12
    x = np.random.default_rng(1).standard_normal((5, n))
    assert np.abs(compute.rotate(NP, x, rot) - x @ q).max() < 1e-12
    assert np.abs(compute.rotate_columns(NP, x.T, rot) - (x @ q).T).max() < 1e-12


def test_a_width_without_a_hadamard_matrix_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="no Hadamard matrix of order 100"):
        hadamard.Rotation.build(100)


# --- --rotate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_the_rotated_f32_model_computes_the_same_logits(models, tmp_path, arch):
    out = tmp_path / "rot.gguf"
    report = convert.rotate(models[arch], out, "F32", seed=3, device="cpu", quiet=True)
    tokens = [1, 200, 17, 900, 55, 1500, 3, 42]
    want = tiny_gguf.forward(models[arch], tokens)
    got = tiny_gguf.forward(out, tokens)
    assert relative(got, want) < 1e-5  # float32 weights: the function is the same
    # ... and the weights did change: the gains are folded, the matrices rotated.
    before, after = GGUFReader(models[arch]), GGUFReader(out)
    q0 = {t.name: np.array(t.data) for t in before.tensors}["blk.0.attn_q.weight"]
    q1 = {t.name: np.array(t.data) for t in after.tensors}["blk.0.attn_q.weight"]
    assert np.abs(q0 - q1).max() > 0.1
    norms = {t.name: np.array(t.data) for t in after.tensors if t.name.endswith("attn_norm.weight")}
    assert all((v == 1).all() for v in norms.values())
    if arch == "llama":  # a tied head is written out
        assert "output.weight" in {t.name for t in after.tensors}
        assert report.rotation == "residual walsh(64) + head walsh(16)"


def test_the_rotated_file_records_transform_seed_and_source_hash(models, tmp_path):
    out = tmp_path / "rot.gguf"
    convert.rotate(models["qwen2"], out, "F32", seed=11, device="cpu", quiet=True)
    meta = fields(out)
    assert meta["onebit.transform"] == "rotate"
    assert meta["onebit.rotation"].startswith("randomized-hadamard residual walsh(64)")
    assert meta["onebit.rotation_seed"] == 11
    assert meta["onebit.source_sha256"] == hashlib.sha256(models["qwen2"].read_bytes()).hexdigest()
    assert meta["general.file_type"] == 0
    source = fields(models["qwen2"])
    assert meta["tokenizer.ggml.merges"] == source["tokenizer.ggml.merges"]
    assert meta["qwen2.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)


def test_the_seed_decides_the_bytes(models, tmp_path):
    paths = []
    for i, seed in enumerate((5, 5, 6)):
        paths.append(tmp_path / f"r{i}.gguf")
        convert.rotate(models["llama"], paths[-1], "F32", seed=seed, device="cpu", quiet=True)
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b and a != c


def test_architectures_it_cannot_rotate_exactly_are_refused_with_the_reason():
    with pytest.raises(plan.Unsupported, match="gemma2.*inside the residual branch.*llama, qwen2"):
        plan.check_architecture("gemma2")
    with pytest.raises(plan.Unsupported, match="blk.0.attn_qkv.weight"):
        plan.rotation_plan("llama", ["token_embd.weight", "output_norm.weight",
                                     "blk.0.attn_qkv.weight"], True)


def test_an_unsupported_file_exits_1_with_one_line_and_writes_nothing(tmp_path, tokenizer):
    src = tiny_gguf.write(tmp_path / "gemma.gguf", tiny_gguf.Shape("gemma"), tokenizer)
    out = tmp_path / "out.gguf"
    run = subprocess.run([ONEBIT, "convert", "--rotate", str(src), str(out), "--type", "F32"],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip().count("\n") == 0 and "architecture 'gemma'" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gemma.gguf"]


@pytest.mark.parametrize("args, says", [
    (["--hadamard-q4-0", "--type", "Q4_0"], "--type is for --rotate only"),
    (["--ternary-q4-0", "--seed", "1"], "--seed is for --rotate only"),
    (["--rotate", "--imatrix", "/nonexistent.txt"], "--imatrix /nonexistent.txt: no such file"),
    (["--rotate", "--type", "Q9_9"], "--type Q9_9: the installed llama-quantize does not know"),
    (["--rotate", "--hadamard-q4-0"], "not allowed with argument"),
])
def test_usage_errors_exit_2_with_one_line(models, tmp_path, args, says):
    run = subprocess.run([ONEBIT, "convert", *args, str(models["llama"]), str(tmp_path / "o.gguf")],
                         capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert says in run.stderr
    assert not (tmp_path / "o.gguf").exists()


def test_an_existing_output_is_kept_without_force(models, tmp_path):
    out = tmp_path / "o.gguf"
    out.write_bytes(b"mine")
    run = subprocess.run([ONEBIT, "convert", "--hadamard-q4-0", str(models["llama"]), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "pass --force" in run.stderr
    assert out.read_bytes() == b"mine"
    run = subprocess.run([ONEBIT, "convert", "--hadamard-q4-0", str(models["llama"]), str(out),
                          "--force", "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["transform"] == "hadamard-q4_0"


def test_a_failure_mid_write_leaves_no_file_under_either_name(models, tmp_path, monkeypatch):
    calls = []

    def failing(*args):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return original(*args)

    original = convert.rotated_values
    monkeypatch.setattr(convert, "rotated_values", failing)
    with pytest.raises(KeyboardInterrupt):
        convert.rotate(models["llama"], tmp_path / "o.gguf", "F32", device="cpu", quiet=True)
    assert list(tmp_path.iterdir()) == []


# --- H32 (--hadamard-q4-0) --------------------------------------------------------------------


def h32_product(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """What the lean route computes: dequant(Q4_0(W·H)) · (Hᵀ x), H per 32-block."""
    wq = dequantize(convert.h32_values(NP, w), T.Q4_0).astype(np.float64)
    return wq @ compute.wht32(NP, x[None, :])[0]


def plain_product(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return dequantize(quantize(w, T.Q4_0), T.Q4_0).astype(np.float64) @ x


def test_h32_of_a_unit_vector_is_flat():
    """Golden: e0·H32/√32 is 32 equal values 1/√32; Q4_0 stores them as d = -1/(8√32), q = 0."""
    w = np.zeros((1, 32), dtype=np.float32)
    w[0, 0] = 1
    block = convert.h32_values(NP, w)[0]
    d = np.float16(-1 / (8 * np.sqrt(32)))
    assert block[:2].tobytes() == d.tobytes()
    assert (block[2:] == 0).all()
    assert np.allclose(dequantize(block[None], T.Q4_0), 1 / np.sqrt(32), rtol=1e-3)


# The H32 bytes of a seeded tensor: the format the lean route reads must not drift
# (`python tests/test_kernels.py` prints the digest after a deliberate change).
GOLDEN_H32 = "f40f3acb021317e72986cd21372742f89dac8e69f4f6fdc9e34a93942502ddc1"


def test_h32_bytes_of_a_seeded_tensor_are_fixed():
    w = np.random.default_rng(2024).standard_normal((8, 64)).astype(np.float32)
    digest = hashlib.sha256(convert.h32_values(NP, w).tobytes()).hexdigest()
    assert digest == GOLDEN_H32



def test_h32_product_matches_w_x_within_q4_0_error():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 512)).astype(np.float32) * 0.02
    x = rng.standard_normal(512)
    exact = w.astype(np.float64) @ x
    h32, plain = h32_product(w, x), plain_product(w, x)
    # Q4_0's error on Gaussian rows: the rotation neither helps nor hurts much.
    assert relative(h32, exact) < 0.1 and relative(plain, exact) < 0.1
    assert 0.8 < np.linalg.norm(h32 - exact) / np.linalg.norm(plain - exact) < 1.25


def test_h32_beats_plain_q4_0_on_outlier_rows():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((256, 512)).astype(np.float32) * 0.02
    hot = rng.random(w.shape) < 0.01  # one weight in a hundred 25x the rest
    w[hot] *= 25
    x = rng.standard_normal(512)
    exact = w.astype(np.float64) @ x
    h32_err = np.linalg.norm(h32_product(w, x) - exact)
    plain_err = np.linalg.norm(plain_product(w, x) - exact)
    assert h32_err < 0.6 * plain_err


def test_h32_on_real_weights_is_no_worse_than_plain(smol_source):
    src = smol_source
    rng = np.random.default_rng(3)
    for name in ("blk.0.attn_q.weight", "blk.10.ffn_up.weight", "blk.29.ffn_down.weight"):
        w = src.tensors[name].values()
        x = rng.standard_normal(w.shape[1])
        exact = w.astype(np.float64) @ x
        h32_err = np.linalg.norm(h32_product(w, x) - exact)
        assert h32_err < 1.1 * np.linalg.norm(plain_product(w, x) - exact), name


def test_the_h32_file_is_stamped_and_routed_to_lean_rocm(models, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "m-H32.gguf"
    report = convert.hadamard_q4_0(models["llama"], out, device="cpu", quiet=True)
    assert report.transformed == 2 * 7 + 1  # 7 matrices a layer and the (untied) head
    meta = fields(out)
    assert meta["onebit.hadamard_q4_0"] == 32 and meta["onebit.rotation"] == "walsh-hadamard-32"
    assert meta["general.file_type"] == 2
    types = {t.name: t.tensor_type for t in GGUFReader(out).tensors}
    assert types["blk.1.ffn_down.weight"] == T.Q4_0 and types["output_norm.weight"] == T.F32
    facts = ggufmeta.read_facts(out)
    assert facts.hadamard_q4_0 == 32
    config, why = stamp_route(ServeConfig(model=str(out)), facts.hadamard_q4_0)
    assert config.device == "rocm" and config.lean and "stamp" in why


# --- --ternary-q4-0 ---------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", [T.TQ1_0, T.TQ2_0])
def test_ternary_blocks_become_q4_0_bit_exactly(qtype):
    rng = np.random.default_rng(int(qtype))
    w = rng.integers(-1, 2, size=(6, 512)).astype(np.float32)
    w *= rng.uniform(-0.1, 0.1, size=(6, 1)).astype(np.float32)  # negative scales too
    w[0] = 0  # a zero scale
    data = quantize(w, qtype)
    if qtype == T.TQ2_0:  # TQ2_0 can also hold +2: kept exactly too
        data[1, 5] |= 0xFF
    q4 = q4_0_from_ternary(data, qtype)
    want = dequantize(data, qtype)
    assert q4.shape == (6, 512 // 32 * 18)
    assert (dequantize(q4, T.Q4_0).view(np.uint32) == want.view(np.uint32)).all()


def test_a_ternary_model_converts_losslessly_and_keeps_the_rest(tmp_path, tokenizer):
    shape = tiny_gguf.Shape(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512)
    src = tiny_gguf.write(tmp_path / "tq.gguf", shape, tokenizer, qtype="TQ2_0",
                          quantise=("attn_q.weight", "attn_k.weight", "attn_v.weight",
                                    "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                                    "ffn_down.weight"))
    out = tmp_path / "q4.gguf"
    report = convert.ternary_q4_0(src, out, quiet=True)
    assert report.transformed == 14 and report.tensors == len(GGUFReader(src).tensors)
    before = {t.name: t for t in GGUFReader(src).tensors}
    for t in GGUFReader(out).tensors:
        b = before[t.name]
        if b.tensor_type == T.TQ2_0:
            assert t.tensor_type == T.Q4_0
            got = dequantize(t.data, T.Q4_0).view(np.uint32)
            assert (got == dequantize(b.data, T.TQ2_0).view(np.uint32)).all(), t.name
        else:
            assert t.tensor_type == b.tensor_type and bytes(t.data) == bytes(b.data), t.name
    assert fields(out)["onebit.transform"] == "ternary-q4_0"


def test_a_file_without_ternary_tensors_is_refused(models, tmp_path):
    run = subprocess.run([ONEBIT, "convert", "--ternary-q4-0", str(models["llama"]),
                          str(tmp_path / "o.gguf")], capture_output=True, text=True)
    assert run.returncode == 1 and "no ternary tensor" in run.stderr


# --- the GPU path: the same bytes -------------------------------------------------------------


def test_torch_writes_the_same_bytes_as_numpy(models, tmp_path):
    pytest.importorskip("torch")
    th = compute.Torch("cpu")
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((40, 576)) * np.where(rng.random((40, 576)) < 0.02, 30, 1))
    w = w.astype(np.float32)
    w[0, :64] = 0.25  # ties for the largest magnitude: the first one wins on both
    w[1, :32] = np.where(np.arange(32) % 2, 1.0, -1.0)
    assert (convert.h32_values(th, w) == convert.h32_values(NP, w)).all()
    rot = hadamard.Rotation.build(576, np.random.default_rng(0))
    a = NP.float32(compute.rotate(NP, NP.load(w), rot))
    b = th.float32(compute.rotate(th, th.load(w), rot))
    assert (a.view(np.uint32) == b.view(np.uint32)).all()
    for arch in ("llama", "qwen2"):
        src = gguffile.Source(models[arch])
        rots, steps = convert.rotation_for(src, 9)
        for step in steps:
            a = convert.rotated_values(NP, src, step, rots)
            b = convert.rotated_values(th, src, step, rots)
            assert (a.view(np.uint32) == b.view(np.uint32)).all(), step.name


# --- with llama.cpp's own tools and server ------------------------------------------------------


def completion_logprobs(llama_server: str, model: Path, tmp_path: Path, prompt: str) -> list:
    port = free_port()
    log = open(tmp_path / f"llama-{port}.log", "wb")
    proc = subprocess.Popen([llama_server, "-m", str(model), "--host", "127.0.0.1", "--port",
                             str(port), "-c", "256", "-t", "2", "--no-warmup",
                             # all in F32: the F16 KV cache and flash attention's F16 Q would
                             # round the rotated and the original values differently
                             "-ctk", "f32", "-ctv", "f32", "-fa", "off"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"

        def ready():
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited: {(tmp_path / log.name).read_text()[-2000:]}")
            try:
                return http("GET", url + "/health", timeout=2)[0] == 200
            except OSError:
                return False

        wait_for(ready, "llama-server ready", timeout=60)
        status, body = http("POST", url + "/completion", {
            "prompt": prompt, "n_predict": 4, "n_probs": 5, "temperature": 0,
            "post_sampling_probs": False, "cache_prompt": False})
        assert status == 200, body
        return json.loads(body)["completion_probabilities"]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


@pytest.mark.executor
def test_llama_server_gives_the_rotated_f32_file_the_same_logits(models, tmp_path, llama_server):
    out = tmp_path / "rot.gguf"
    convert.rotate(models["llama"], out, "F32", seed=1, device="cpu", quiet=True)
    want = completion_logprobs(llama_server, models["llama"], tmp_path, "The cat sat on")
    got = completion_logprobs(llama_server, out, tmp_path, "The cat sat on")
    assert [s["id"] for s in got] == [s["id"] for s in want]
    for a, b in zip(got, want):
        assert [t["id"] for t in a["top_logprobs"]] == [t["id"] for t in b["top_logprobs"]]
        for ta, tb in zip(a["top_logprobs"], b["top_logprobs"]):
            assert ta["logprob"] == pytest.approx(tb["logprob"], abs=2e-5)
    # the top logprobs are informative: the tiny model's distribution is peaked
    assert max(t["logprob"] for t in want[0]["top_logprobs"]) > -3


@pytest.mark.executor
def test_h32_bytes_are_llama_quantize_q4_0_of_the_rotated_weights(models, tmp_path):
    """Q4_0 here is llama.cpp's own: quantising W·H32 with llama-quantize --pure gives the bytes
    --hadamard-q4-0 writes."""
    from lemonade_onebit.kernels import tools

    src = gguffile.Source(models["qwen2"])
    rotated = []
    for t in src.tensors.values():
        w = t.values()
        if w.ndim == 2 and t.name != "token_embd.weight":
            w = NP.float32(compute.wht32(NP, NP.load(w)))
        rotated.append(gguffile.OutTensor(t.name, t.shape, T.F32, lambda w=w: w))
    f32 = tmp_path / "wh.f32.gguf"
    gguffile.write(f32, src, rotated, {}, 0)
    theirs = tmp_path / "wh.q4_0.gguf"
    tools.run([tools.tool("llama-quantize"), "--pure", str(f32), str(theirs), "Q4_0"],
              tmp_path / "quantize.log")
    ours = tmp_path / "h32.gguf"
    convert.hadamard_q4_0(models["qwen2"], ours, device="cpu", quiet=True)
    mine = {t.name: t for t in GGUFReader(ours).tensors}
    compared = 0
    for t in GGUFReader(theirs).tensors:
        if t.tensor_type == T.Q4_0 and t.name != "token_embd.weight":
            assert bytes(t.data) == bytes(mine[t.name].data), t.name
            compared += 1
    assert compared == 2 * 7 + 1  # the matrices of 2 layers and the head


@pytest.mark.executor
def test_rotate_quantises_with_an_importance_matrix_and_keeps_the_record(models, tmp_path):
    text = tmp_path / "calibration.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 60)
    out = tmp_path / "rot.Q4_0.gguf"
    run = subprocess.run([ONEBIT, "convert", "--rotate", str(models["qwen3"]), str(out),
                          "--type", "Q4_0", "--imatrix", str(text), "--seed", "2", "--json",
                          "--device", "cpu"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert set(report["seconds"]) == {"sha256", "rotate", "imatrix", "quantize"}
    meta = fields(out)
    assert meta["onebit.rotation_seed"] == 2 and meta["general.file_type"] == 2
    assert {t.tensor_type for t in GGUFReader(out).tensors} >= {T.Q4_0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.txt", "rot.Q4_0.gguf"]


@pytest.mark.executor
@pytest.mark.slow
def test_a_rotated_smollm2_answers_paris_on_the_cpu_route(smollm2, tmp_path, start_serve):
    out = tmp_path / "smollm2-rot.Q4_0.gguf"
    run = subprocess.run([ONEBIT, "convert", "--rotate", str(smollm2), str(out), "--type",
                          "Q4_0", "-q", "--device", "cpu"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert fields(out)["onebit.transform"] == "rotate"
    serve = start_serve("-m", str(out), "--device", "cpu").wait_ready(timeout=120)
    status, body = http("POST", serve.url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 16, "temperature": 0})
    assert status == 200, body
    assert "Paris" in json.loads(body)["choices"][0]["message"]["content"]


if __name__ == "__main__":  # print the golden digest for a deliberate format change
    w = np.random.default_rng(2024).standard_normal((8, 64)).astype(np.float32)
    print(hashlib.sha256(convert.h32_values(NP, w).tobytes()).hexdigest())
    sys.exit(0)
