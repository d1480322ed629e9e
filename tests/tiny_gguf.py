"""Tiny deterministic llama / qwen2 / qwen3 GGUFs with SmolLM2's tokenizer, and a numpy forward
pass over such a file (float64), for the model-file transforms' tests.

The weights are random but scaled so that the logits are peaked (the output head has std 1):
two models that differ anywhere give visibly different logits. Norm gains are random in
[0.5, 1.5], so folding them is tested too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    arch: str = "llama"
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    tied: bool = True
    eps: float = 1e-5


def tokenizer_fields(reader) -> list[tuple[str, object, object, object]]:
    """(key, value, type, sub type) of every tokenizer.* field of a GGUFReader's file."""
    from gguf.constants import GGUFValueType as V

    fields = []
    for key, f in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = f.types[0]
        if kind == V.ARRAY:
            sub = f.types[-1]
            items = [bytes(f.parts[i]) if sub == V.STRING else f.parts[i].tolist()[0]
                     for i in f.data]
            fields.append((key, items, kind, sub))
        elif kind == V.STRING:
            fields.append((key, bytes(f.parts[-1]), kind, None))
        else:
            fields.append((key, f.parts[-1].tolist()[0], kind, None))
    return fields


def tensors(shape: Shape, n_vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    e, hd = shape.n_embd, shape.head_dim
    q, kv = shape.n_head * hd, shape.n_head_kv * hd

    def mat(rows: int, cols: int, std: float | None = None) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (std or cols ** -0.5)).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        return rng.uniform(0.5, 1.5, n).astype(np.float32)

    out = {"token_embd.weight": mat(n_vocab, e, 1.0), "output_norm.weight": gain(e)}
    if not shape.tied:
        out["output.weight"] = mat(n_vocab, e, 1.0)
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        out[b + "attn_norm.weight"] = gain(e)
        out[b + "attn_q.weight"] = mat(q, e)
        out[b + "attn_k.weight"] = mat(kv, e)
        out[b + "attn_v.weight"] = mat(kv, e)
        if shape.arch == "qwen2":
            for name, n in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
                out[b + name + ".bias"] = (rng.standard_normal(n) * 0.1).astype(np.float32)
        if shape.arch == "qwen3":
            out[b + "attn_q_norm.weight"] = gain(hd)
            out[b + "attn_k_norm.weight"] = gain(hd)
        out[b + "attn_output.weight"] = mat(e, q)
        out[b + "ffn_norm.weight"] = gain(e)
        out[b + "ffn_gate.weight"] = mat(shape.n_ff, e)
        out[b + "ffn_up.weight"] = mat(shape.n_ff, e)
        out[b + "ffn_down.weight"] = mat(e, shape.n_ff)
    return out


def write(path: Path, shape: Shape, tokenizer: list, seed: int = 0, qtype: str = "F32",
          quantise: tuple[str, ...] = ()) -> Path:
    """A GGUF of `shape`. Matrices whose name ends with one of `quantise` are stored as `qtype`
    (a type gguf.quants can quantise, e.g. TQ2_0); the rest as F32."""
    import gguf
    from gguf.constants import GGMLQuantizationType as T

    n_vocab = len(next(v for k, v, *_ in tokenizer if k == "tokenizer.ggml.tokens"))
    writer = gguf.GGUFWriter(str(path), shape.arch)
    writer.add_name(f"tiny {shape.arch}")
    for key, value, kind, sub in tokenizer:
        writer.add_key_value(key, value, kind, sub_type=sub)
    writer.add_context_length(256)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(shape.eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for name, data in tensors(shape, n_vocab, seed).items():
        if data.ndim == 2 and name.endswith(quantise) and name != "token_embd.weight":
            qt = T[qtype]
            writer.add_tensor(name, gguf.quants.quantize(data, qt), raw_dtype=qt)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def weights(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path)
    w = {t.name: dequantize(t.data, t.tensor_type).reshape(tuple(reversed(t.shape.tolist())))
         .astype(np.float64) for t in reader.tensors}
    arch = reader.fields["general.architecture"].contents()
    meta = {k[len(arch) + 1:]: f.contents() for k, f in reader.fields.items()
            if k.startswith(arch + ".")}
    meta["arch"] = arch
    return w, meta


def forward(path: Path, tokens: list[int]) -> np.ndarray:
    """Logits (len(tokens), n_vocab) of a llama / qwen2 / qwen3 GGUF, float64, causal, with
    grouped-query attention, RoPE (llama: adjacent pairs; qwen: halves), SwiGLU. One numpy
    function serves the original and the transformed file alike, so their outputs compare the
    function the weights compute."""
    return forward_weights(*weights(path), tokens)


def forward_weights(w: dict[str, np.ndarray], meta: dict, tokens: list[int],
                    hook=None) -> np.ndarray:
    """forward() over weights already read (and perhaps changed) by weights(). `hook(name, x)`
    sees each normalised input before its gain (name: blk.N.attn_norm, blk.N.ffn_norm)."""
    n_head, n_kv = meta["attention.head_count"], meta["attention.head_count_kv"]
    eps = meta["attention.layer_norm_rms_epsilon"]
    hd = meta.get("attention.key_length") or meta["embedding_length"] // n_head
    n, positions = len(tokens), np.arange(len(tokens))

    def norm(x, g, name=None):
        x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
        if hook is not None and name is not None:
            hook(name, x)
        return x * g

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    base = meta.get("rope.freq_base", 10000.0)

    def rope(x):  # (n, heads, hd): llama rotates adjacent pairs, qwen2/qwen3 the two halves
        half = hd // 2
        freq = base ** (-np.arange(half) / half)
        ang = positions[:, None] * freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if meta["arch"] == "llama":
            a, b = x[..., 0::2], x[..., 1::2]
            return np.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    h = w["token_embd.weight"][tokens]
    for i in range(meta["block_count"]):
        b = f"blk.{i}."
        x = norm(h, w[b + "attn_norm.weight"], b + "attn_norm")
        q = lin(x, b + "attn_q").reshape(n, n_head, hd)
        k = lin(x, b + "attn_k").reshape(n, n_kv, hd)
        v = lin(x, b + "attn_v").reshape(n, n_kv, -1)
        if b + "attn_q_norm.weight" in w:
            q, k = norm(q, w[b + "attn_q_norm.weight"]), norm(k, w[b + "attn_k_norm.weight"])
        q, k = rope(q), rope(k)
        group = n_head // n_kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
        scores = np.where(np.tril(np.ones((n, n), bool))[None], scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        att = np.einsum("hqk,khd->qhd", p, v).reshape(n, -1)
        h = h + lin(att, b + "attn_output")
        x = norm(h, w[b + "ffn_norm.weight"], b + "ffn_norm")
        gate = lin(x, b + "ffn_gate")
        h = h + lin(gate / (1 + np.exp(-gate)) * lin(x, b + "ffn_up"), b + "ffn_down")
    head = w.get("output.weight", w["token_embd.weight"])
    return norm(h, w["output_norm.weight"]) @ head.T
