"""Where the rotated SmolLM2 loses at Q4_0: the KL divergence from the F32 model of variants that
differ in one step each, with every matrix but the embeddings quantised to Q4_0 (gguf's Q4_0,
llama.cpp's reference quantiser).

    .venv/bin/python bench/kernels_fold.py [--work /tmp/kernels-ppl] [--tokens 200]

Needs the F32 source and the rotated F32 file that bench/kernels_ppl.py leaves in --work. The
forward pass is tests/tiny_gguf.py's numpy one (float64), over the first --tokens tokens of
data/kernels/persuasion.txt; the channel energies come from data/kernels/northanger.txt. The
numbers go to bench/results/kernels-fold.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import tiny_gguf  # noqa: E402
from gguf.constants import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

from lemonade_onebit.kernels import tools  # noqa: E402
from lemonade_onebit.kernels.hadamard import Rotation  # noqa: E402

READS = (("attn_q", "attn_norm"), ("attn_k", "attn_norm"), ("attn_v", "attn_norm"),
         ("ffn_gate", "ffn_norm"), ("ffn_up", "ffn_norm"))


def token_ids(model: Path, text: Path, n: int) -> list[int]:
    out = subprocess.run([tools.tool("llama-tokenize"), "-m", str(model), "-f", str(text), "--ids",
                          "--log-disable"], capture_output=True, text=True, check=True).stdout
    return [int(x) for x in re.findall(r"\d+", out.strip().splitlines()[-1])][:n]


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def q4_0(w: np.ndarray) -> np.ndarray:
    return dequantize(quantize(w.astype(np.float32), T.Q4_0), T.Q4_0).astype(np.float64)


def folded(w: dict, n_layer: int, q: np.ndarray | None = None) -> dict:
    """Every norm gain folded into the matrices that read it; with q, the residual rotated too."""
    n = w["output_norm.weight"].shape[0]
    q = np.eye(n) if q is None else q
    out = dict(w)
    out["token_embd.weight"] = w["token_embd.weight"] @ q
    out["output.weight"] = (w.get("output.weight", w["token_embd.weight"])
                            * w["output_norm.weight"]) @ q
    out["output_norm.weight"] = np.ones(n)
    for i in range(n_layer):
        b = f"blk.{i}."
        for matrix, norm in READS:
            out[b + matrix + ".weight"] = (w[b + matrix + ".weight"] * w[b + norm + ".weight"]) @ q
        out[b + "attn_norm.weight"] = out[b + "ffn_norm.weight"] = np.ones(n)
        for matrix in ("attn_output", "ffn_down"):
            out[b + matrix + ".weight"] = q.T @ w[b + matrix + ".weight"]
    return out


def per_head(w: dict, n_layer: int, head: int) -> dict:
    """Only the per-head rotation between V and the attention output (no gain is folded)."""
    r = Rotation.build(head, np.random.default_rng(1)).dense()
    out = dict(w)
    for i in range(n_layer):
        b = f"blk.{i}."
        v, o = w[b + "attn_v.weight"], w[b + "attn_output.weight"]
        out[b + "attn_v.weight"] = np.concatenate(
            [r.T @ v[h:h + head] for h in range(0, v.shape[0], head)])
        out[b + "attn_output.weight"] = np.concatenate(
            [o[:, h:h + head] @ r for h in range(0, o.shape[1], head)], axis=1)
    return out


def channel_energy(w: dict, meta: dict, tokens: list[int]) -> np.ndarray:
    """The mean square of each channel of the normalised residual stream, the largest over the
    layers' inputs."""
    seen = []

    def hook(name: str, x: np.ndarray) -> None:
        if name.endswith("attn_norm"):
            seen.append(np.mean(x * x, axis=0))

    tiny_gguf.forward_weights(w, meta, tokens, hook)
    return np.max(seen, axis=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/kernels-ppl")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--keep", type=int, default=16, help="channels kept out of the rotation")
    parser.add_argument("--json", default=str(ROOT / "bench/results/kernels-fold.json"))
    args = parser.parse_args()
    f32, rot = Path(args.work) / "smollm2.f32.gguf", Path(args.work) / "smollm2-rot.f32.gguf"
    ids = token_ids(f32, ROOT / "data/kernels/persuasion.txt", args.tokens)
    w, meta = tiny_gguf.weights(f32)
    n_layer, n = meta["block_count"], meta["embedding_length"]
    head = n // meta["attention.head_count"]
    ref = log_softmax(tiny_gguf.forward_weights(w, meta, ids))

    def kl(weights: dict) -> float:
        quantised = {k: q4_0(v) if v.ndim == 2 and k not in ("token_embd.weight", "output.weight")
                     else v for k, v in weights.items()}
        lp = log_softmax(tiny_gguf.forward_weights(quantised, meta, ids))
        return float(np.mean(np.sum(np.exp(ref) * (ref - lp), axis=-1)))

    energy = channel_energy(w, meta, token_ids(f32, ROOT / "data/kernels/northanger.txt", 256))
    keep = np.argsort(energy)[::-1][:args.keep]
    rest = np.setdiff1d(np.arange(n), keep)
    rng = np.random.default_rng(0)
    a, r = np.linalg.qr(rng.standard_normal((rest.size, rest.size)))
    partial = np.eye(n)
    partial[np.ix_(rest, rest)] = a * np.sign(np.diag(r))
    variants = {
        "plain": w,
        "gains folded, no rotation": folded(w, n_layer),
        "per-head rotation only (V, attention output)": per_head(w, n_layer, head),
        "1bit convert --rotate (the file)": tiny_gguf.weights(rot)[0],
        f"gains folded, residual rotated except its {args.keep} highest-energy channels "
        "(random orthogonal)": folded(w, n_layer, partial),
    }
    report = {"tokens": len(ids), "energy_top": [float(e) for e in np.sort(energy)[::-1][:8]],
              "kl": {}}
    for name, weights in variants.items():
        report["kl"][name] = kl(weights)
        print(f"{name}: KL {report['kl'][name]:.4f}", flush=True)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
