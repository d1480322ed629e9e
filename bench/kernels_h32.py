"""The numerical check of the H32 format: dequant(Q4_0(W·H)) · (Hᵀ x) against W · x, next to plain
Q4_0, on generated tensors and on every matrix of SmolLM2-135M.

    .venv/bin/python bench/kernels_h32.py

The error of a product is ||ŷ - W x|| / ||W x|| over 16 random Gaussian x per matrix (seed 0).
SmolLM2's weights are those of the embedded Q4_1 file, dequantised (no F16 release is on the
package index); the error is measured against those values. The table goes into docs/kernels.md
between its kernels-h32 markers, the numbers to bench/results/kernels-h32.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gguf.constants import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

from lemonade_onebit.catalog.entries import DEFAULT_MODEL, local_file  # noqa: E402
from lemonade_onebit.kernels import compute, convert, gguffile  # noqa: E402

NP = compute.Numpy()
START, END = "<!-- kernels-h32:start -->", "<!-- kernels-h32:end -->"


def errors(w: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """(plain Q4_0, H32) relative errors of W x for the columns of x."""
    exact = w.astype(np.float64) @ x
    plain = dequantize(quantize(w, T.Q4_0), T.Q4_0).astype(np.float64) @ x
    h32w = dequantize(convert.h32_values(NP, w), T.Q4_0).astype(np.float64)
    h32 = h32w @ compute.wht32(NP, x.T).T  # Hᵀ x per 32-block (H is symmetric)
    size = np.linalg.norm(exact)
    return float(np.linalg.norm(plain - exact) / size), float(np.linalg.norm(h32 - exact) / size)


def generated(rng: np.random.Generator) -> dict[str, np.ndarray]:
    shape = (512, 1024)
    g = rng.standard_normal(shape).astype(np.float32) * 0.02
    outliers = g.copy()
    hot = rng.random(shape) < 0.01
    outliers[hot] *= 25
    heavy = (rng.standard_t(3, shape) * 0.02).astype(np.float32)
    rows = g.copy()
    rows[rng.random(shape[0]) < 0.05] *= 20  # a few rows far larger than the rest
    return {"Gaussian": g, "1% of weights 25x": outliers, "Student-t, 3 dof": heavy,
            "5% of rows 20x": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(ROOT / "bench/results/kernels-h32.json"))
    parser.add_argument("--doc", default=str(ROOT / "docs/kernels.md"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    report: dict = {"generated": {}, "smollm2": {}}
    for name, w in generated(rng).items():
        x = rng.standard_normal((w.shape[1], 16))
        report["generated"][name] = dict(zip(("plain", "h32"), errors(w, x)))
        print(name, report["generated"][name], flush=True)
    path = local_file(DEFAULT_MODEL)
    if path is None:
        raise SystemExit("the embedded SmolLM2 is not installed: run `make setup`")
    src = gguffile.Source(path)
    kinds: dict[str, list[tuple[float, float]]] = {}
    for name, t in src.tensors.items():
        if len(t.shape) != 2 or name == "token_embd.weight":
            continue
        w = t.values()
        x = rng.standard_normal((w.shape[1], 16))
        kind = re.sub(r"^blk\.\d+\.", "", name).removesuffix(".weight")
        kinds.setdefault(kind, []).append(errors(w, x))
    for kind, pairs in kinds.items():
        plain, h32 = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        better = sum(p[1] < p[0] for p in pairs)
        report["smollm2"][kind] = {"matrices": len(pairs), "plain": plain, "h32": h32,
                                   "h32_lower": better}
        print(kind, report["smollm2"][kind], flush=True)
    lines = ["| weights | matrices | plain Q4_0 error | H32 error | H32 / plain | H32 lower in |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in report["generated"].items():
        lines.append(f"| generated: {name} | 1 | {r['plain']:.4f} | {r['h32']:.4f} | "
                     f"{r['h32'] / r['plain']:.2f} | |")
    for kind, r in report["smollm2"].items():
        lines.append(f"| SmolLM2 `{kind}` (median) | {r['matrices']} | {r['plain']:.4f} | "
                     f"{r['h32']:.4f} | {r['h32'] / r['plain']:.2f} | "
                     f"{r['h32_lower']} of {r['matrices']} |")
    report["markdown"] = "\n".join(lines)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    doc = Path(args.doc)
    text = doc.read_text()
    head, rest = text.split(START, 1)
    doc.write_text(head + START + "\n" + report["markdown"] + "\n" + END + rest.split(END, 1)[1])
    print(report["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
