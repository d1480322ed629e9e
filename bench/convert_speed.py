"""How long `1bit convert` takes by model size, numpy (CPU) against torch (GPU), and whether both
write the same bytes.

    python bench/convert_speed.py --layers 2,8 [--devices cpu,cuda] [--json OUT.json]

Writes a random-weight F16 GGUF in a Qwen3-4B-class shape (n_embd 2560, ffn 9728, 32/8 heads of
128, vocabulary 151,936, tied head) with the given numbers of layers (36 is the whole 4.0 B
model), then times, per size, `--rotate --type F32` (the rotation: what runs on the GPU; the
llama-quantize step after it is the same program either way) and `--hadamard-q4-0` on each device,
in alternating order, and compares the sha256 of the files. The weights' values do not change the
time. The tokenizer is a placeholder (the transforms never read it), so the files are for timing,
not for serving. Runs from the repo root without installing the package: it needs numpy, gguf,
tqdm, and torch for cuda.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.kernels import convert  # noqa: E402

SHAPE = dict(n_embd=2560, n_ff=9728, n_head=32, n_head_kv=8, head_dim=128, vocab=151936)


def write_model(path: Path, layers: int, seed: int = 0) -> int:
    """A qwen3-layout F16 GGUF, written tensor by tensor; returns its parameter count."""
    import gguf

    s = SHAPE
    e, q, kv = s["n_embd"], s["n_head"] * s["head_dim"], s["n_head_kv"] * s["head_dim"]
    names = [("token_embd.weight", (s["vocab"], e)), ("output_norm.weight", (e,))]
    for i in range(layers):
        b = f"blk.{i}."
        names += [(b + "attn_norm.weight", (e,)), (b + "attn_q.weight", (q, e)),
                  (b + "attn_k.weight", (kv, e)), (b + "attn_v.weight", (kv, e)),
                  (b + "attn_output.weight", (e, q)), (b + "attn_q_norm.weight", (s["head_dim"],)),
                  (b + "attn_k_norm.weight", (s["head_dim"],)), (b + "ffn_norm.weight", (e,)),
                  (b + "ffn_gate.weight", (s["n_ff"], e)), (b + "ffn_up.weight", (s["n_ff"], e)),
                  (b + "ffn_down.weight", (e, s["n_ff"]))]
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name(f"random qwen3 shape, {layers} layers")
    w.add_array("tokenizer.ggml.tokens", ["<unk>"])
    w.add_embedding_length(e)
    w.add_block_count(layers)
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for name, shape in names:
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(1 << 24) * 0.02).astype(np.float16)  # values repeat: speed only
    for _, shape in names:
        n = int(np.prod(shape))
        if len(shape) == 1:
            w.write_tensor_data(rng.uniform(0.5, 1.5, shape).astype(np.float32))
        else:
            start = int(rng.integers(0, pool.size))
            w.write_tensor_data(np.resize(np.roll(pool, -start), n).reshape(shape))
    w.close()
    return sum(int(np.prod(shape)) for _, shape in names)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="2,8", help="model sizes, as layer counts (36: 4.0 B)")
    parser.add_argument("--devices", default="cpu,cuda",
                        help="cpu (numpy), cuda (torch), torch-cpu (torch on the CPU)")
    parser.add_argument("--transforms", default="rotate,hadamard-q4-0")
    parser.add_argument("--vocab", type=int, help="a smaller vocabulary, for a quick check")
    parser.add_argument("--work", default="/tmp/convert-speed")
    parser.add_argument("--json", default=str(ROOT / "bench/results/convert-speed.json"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    devices = args.devices.split(",")
    if args.vocab:
        SHAPE["vocab"] = args.vocab
    report: dict = {"shape": SHAPE, "devices": devices, "cpu_count": os.cpu_count(), "runs": []}
    try:
        import torch

        report["torch"] = torch.__version__
        if torch.cuda.is_available():
            report["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    for layers in (int(x) for x in args.layers.split(",")):
        model = work / f"qwen3-{layers}l.f16.gguf"
        start = time.perf_counter()
        params = write_model(model, layers)
        print(f"{layers} layers: {params / 1e9:.2f} B params, {model.stat().st_size / 1e9:.2f} GB "
              f"written in {time.perf_counter() - start:.0f} s", flush=True)
        for transform in args.transforms.split(","):
            digests = {}
            order = devices if layers % 2 == 0 else devices[::-1]  # alternate who goes first
            for device in order:
                out = work / f"out-{device}.gguf"
                start = time.perf_counter()
                if transform == "rotate":
                    r = convert.rotate(model, out, "F32", seed=0, device=device, quiet=True)
                else:
                    r = convert.hadamard_q4_0(model, out, device=device, quiet=True)
                wall = time.perf_counter() - start
                digests[device] = sha256(out)
                out.unlink()
                run = {"layers": layers, "params": params, "source_bytes": model.stat().st_size,
                       "transform": transform, "device": device, "backend": r.backend,
                       "seconds": round(wall, 2), "phases": r.seconds, "out_bytes": r.out_bytes,
                       "sha256": digests[device]}
                report["runs"].append(run)
                print(f"  {transform} {device} ({r.backend}): {wall:.1f} s {r.seconds}", flush=True)
                Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
            same = len(set(digests.values())) == 1
            report.setdefault("same_bytes", []).append({"layers": layers, "transform": transform,
                                                        "same": same})
            print(f"  {transform}: same bytes on {', '.join(digests)}: {same}", flush=True)
        model.unlink()
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
