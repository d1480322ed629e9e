"""Perplexity of SmolLM2-135M quantised plain and Hadamard-rotated, with and without an
importance matrix: what `1bit convert --rotate` buys at each type.

    .venv/bin/python bench/kernels_ppl.py [--types Q4_0,Q3_K,Q2_K] [--work /tmp/kernels-ppl]

The common source is the embedded SmolLM2 GGUF (Q4_1) dequantised once to F32 with the pinned
llama-quantize. The rotated F32 is written once by `1bit convert --rotate --type F32`; each type
is then quantised from it with the llama-quantize call `1bit convert --rotate --type T` makes
(checked byte-identical for the first type). Importance matrices come from the pinned
llama-imatrix over data/kernels/northanger.txt, each on its own model (plain or rotated).
Perplexity: the pinned llama-perplexity over data/kernels/persuasion.txt (8,413 tokens,
context 512, 16 chunks). The JSON goes to bench/results/kernels-ppl.json and the table into
docs/kernels.md between its kernels-ppl markers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.catalog.entries import DEFAULT_MODEL, local_file  # noqa: E402
from lemonade_onebit.kernels import tools  # noqa: E402

EVAL = ROOT / "data/kernels/persuasion.txt"
CALIBRATION = ROOT / "data/kernels/northanger.txt"
CTX = 512
PPL = re.compile(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)")
START, END = "<!-- kernels-ppl:start -->", "<!-- kernels-ppl:end -->"


def sh(argv: list[str], log: Path) -> str:
    start = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(f"{Path(argv[0]).name} exited {code}: see {log}")
    print(f"  {log.name}: {time.perf_counter() - start:.0f} s", flush=True)
    return log.read_text(errors="replace")


def perplexity(model: Path, work: Path, threads: int) -> tuple[float, float]:
    text = sh([tools.tool("llama-perplexity"), "-m", str(model), "-f", str(EVAL), "-c", str(CTX),
               "-t", str(threads)], work / f"{model.stem}.ppl.log")
    found = PPL.search(text)
    if not found:
        raise SystemExit(f"no final PPL in {work / (model.stem + '.ppl.log')}")
    return float(found.group(1)), float(found.group(2))


def quantise(f32: Path, out: Path, qtype: str, imatrix: Path | None, work: Path) -> None:
    argv = [tools.tool("llama-quantize")]
    if imatrix is not None:
        argv += ["--imatrix", str(imatrix)]
    if not out.exists():
        sh([*argv, str(f32), str(out), qtype], work / f"{out.stem}.quantize.log")


def imatrix_of(f32: Path, work: Path, threads: int) -> Path:
    out = work / f"{f32.stem}.imatrix.gguf"
    if not out.exists():
        sh([tools.tool("llama-imatrix"), "-m", str(f32), "-f", str(CALIBRATION), "-o", str(out),
            "-c", str(CTX), "--no-ppl", "-t", str(threads)], work / f"{f32.stem}.imatrix.log")
    return out


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def table(rows: list[dict]) -> str:
    lines = ["| type | imatrix | plain PPL | rotated PPL | rotated − plain | plain MB | rotated MB |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        diff = r["rotated_ppl"] - r["plain_ppl"]
        lines.append(f"| {r['type']} | {'yes' if r['imatrix'] else 'no'} | {r['plain_ppl']:.2f} "
                     f"± {r['plain_err']:.2f} | {r['rotated_ppl']:.2f} ± {r['rotated_err']:.2f} | "
                     f"{diff:+.2f} ({diff / r['plain_ppl']:+.1%}) | {r['plain_mb']:.1f} | "
                     f"{r['rotated_mb']:.1f} |")
    return "\n".join(lines)


def replace_section(doc: Path, body: str) -> None:
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc} has no {START} ... {END} section")
    head, rest = text.split(START, 1)
    doc.write_text(head + START + "\n" + body + "\n" + END + rest.split(END, 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", default="Q4_0,Q3_K,Q2_K")
    parser.add_argument("--work", default="/tmp/kernels-ppl", help="intermediate files (~2 GB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-imatrix", action="store_true", help="only the plain quantisations")
    parser.add_argument("--json", default=str(ROOT / "bench/results/kernels-ppl.json"))
    parser.add_argument("--doc", default=str(ROOT / "docs/kernels.md"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    source = local_file(DEFAULT_MODEL)
    if source is None:
        raise SystemExit("the embedded SmolLM2 is not installed: run `make setup`")

    f32 = work / "smollm2.f32.gguf"
    if not f32.exists():
        sh([tools.tool("llama-quantize"), "--allow-requantize", str(source), str(f32), "F32"],
           work / "f32.quantize.log")
    rot = work / "smollm2-rot.f32.gguf"
    if not rot.exists():
        sh([sys.executable, "-m", "lemonade_onebit", "convert", "--rotate", str(f32), str(rot),
            "--type", "F32", "--seed", str(args.seed), "--device", "cpu", "-q", "--json"],
           work / "rotate.log")
    report: dict = {"source": str(source), "source_sha256": digest(source),
                    "eval_text": str(EVAL.relative_to(ROOT)),
                    "calibration_text": str(CALIBRATION.relative_to(ROOT)), "ctx": CTX,
                    "seed": args.seed, "rotate": json.loads((work / "rotate.log").read_text()
                                                            .strip().splitlines()[-1]),
                    "rows": []}
    ppl, err = perplexity(f32, work, args.threads)
    rppl, rerr = perplexity(rot, work, args.threads)
    report["f32"] = {"plain_ppl": ppl, "plain_err": err, "rotated_ppl": rppl, "rotated_err": rerr}
    print(f"F32: plain {ppl:.4f}, rotated {rppl:.4f}", flush=True)

    types = args.types.split(",")
    for use_imatrix in (False,) if args.no_imatrix else (False, True):
        plain_im = imatrix_of(f32, work, args.threads) if use_imatrix else None
        rot_im = imatrix_of(rot, work, args.threads) if use_imatrix else None
        for qtype in types:
            tag = f"{qtype}{'-imatrix' if use_imatrix else ''}"
            plain, rotated = work / f"smollm2.{tag}.gguf", work / f"smollm2-rot.{tag}.gguf"
            quantise(f32, plain, qtype, plain_im, work)
            quantise(rot, rotated, qtype, rot_im, work)
            row = {"type": qtype, "imatrix": use_imatrix,
                   "plain_mb": plain.stat().st_size / 1e6, "rotated_mb": rotated.stat().st_size / 1e6}
            row["plain_ppl"], row["plain_err"] = perplexity(plain, work, args.threads)
            row["rotated_ppl"], row["rotated_err"] = perplexity(rotated, work, args.threads)
            report["rows"].append(row)
            print(f"{tag}: plain {row['plain_ppl']:.2f}, rotated {row['rotated_ppl']:.2f}",
                  flush=True)
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    # The command a user runs gives the same file as the rotate-once-then-quantise path above.
    first = types[0]
    direct = work / f"direct.{first}.gguf"
    direct.unlink(missing_ok=True)
    sh([sys.executable, "-m", "lemonade_onebit", "convert", "--rotate", str(f32), str(direct),
        "--type", first, "--seed", str(args.seed), "--device", "cpu", "-q"], work / "direct.log")
    report["direct_equals_rotate_then_quantise"] = (
        digest(direct) == digest(work / f"smollm2-rot.{first}.gguf"))
    report["markdown"] = table(report["rows"])
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    replace_section(Path(args.doc), report["markdown"])
    print(report["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
