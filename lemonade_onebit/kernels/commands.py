"""`1bit convert`: the model-file transforms. The command line is built here; cli.py mounts it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lemonade_onebit.errors import UsageError

DESCRIPTION = (
    "Transform a GGUF model file. --rotate: rotate the residual stream by a randomised Hadamard "
    "matrix folded into the weights (the full-precision model computes the same function; "
    "llama, qwen2, qwen3), then quantise with the pinned llama-quantize: 4-bit and lower files "
    "lose less, and run on every stock llama-server. --hadamard-q4-0: Q4_0 of each matrix "
    "rotated by the 32-point Walsh-Hadamard transform along its rows, stamped "
    "onebit.hadamard_q4_0 = 32 for the lean ROCm route, which rotates the activations to match. "
    "--ternary-q4-0: TQ1_0/TQ2_0 (ternary) tensors as Q4_0, losslessly, for executors without "
    "ternary kernels. The source is read tensor by tensor and the result written under a "
    "temporary name, renamed when complete. Measurements: docs/kernels.md.")


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r}: a seed is from 0 to 2^63 - 1")
    return value


def add_convert_parser(sub) -> None:
    p = sub.add_parser("convert", help="model-file transforms: Hadamard rotation, H32, ternary "
                       "to Q4_0", description=DESCRIPTION,
                       epilog="examples: 1bit convert --rotate model-f16.gguf model-rot-Q4_0.gguf "
                       "--type Q4_0; 1bit convert --hadamard-q4-0 model-f16.gguf model-H32.gguf; "
                       "1bit convert --ternary-q4-0 bitnet-TQ2_0.gguf bitnet-Q4_0.gguf")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--rotate", action="store_true",
                      help="randomised Hadamard rotation, then llama-quantize --type")
    what.add_argument("--hadamard-q4-0", action="store_true",
                      help="Q4_0 of W·H32, stamped for the lean ROCm route")
    what.add_argument("--ternary-q4-0", action="store_true",
                      help="TQ1_0/TQ2_0 tensors as Q4_0, losslessly")
    p.add_argument("source", metavar="IN.gguf", help="a GGUF file, or a downloaded catalog name")
    p.add_argument("out", metavar="OUT.gguf")
    p.add_argument("--type", metavar="T",
                   help="--rotate: the llama-quantize type (Q4_0, Q4_K_M, Q3_K, Q2_K, ...; F32 "
                   "keeps the rotated weights unquantised) (Q4_0)")
    p.add_argument("--imatrix", metavar="TEXT",
                   help="--rotate: quantise with an importance matrix that llama-imatrix computes "
                   "on the rotated model over this calibration text")
    p.add_argument("--seed", type=_seed, metavar="N", help="--rotate: the random signs (0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the arithmetic runs: cpu (numpy), cuda (torch on the GPU), auto "
                   "(cuda when torch sees a GPU); the bytes written are the same")
    p.add_argument("--force", action="store_true", help="replace OUT.gguf if it exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print what was done as JSON")


def _source(spec: str) -> Path:
    """A .gguf path, or a downloaded catalog model's file."""
    path = Path(spec)
    if path.is_file():
        return path
    from lemonade_onebit.catalog.entries import find_entry, local_file

    if find_entry(spec) is not None:
        file = local_file(spec)
        if file is None:
            raise UsageError(f"{spec} is not downloaded: `1bit pull {spec}` first")
        return Path(file)
    raise UsageError(f"{spec}: no such file (give a .gguf path or a downloaded catalog name)")


def _paths(ns: argparse.Namespace) -> tuple[Path, Path]:
    source, out = _source(ns.source), Path(ns.out)
    if not out.parent.is_dir():
        raise UsageError(f"{out}: no folder {out.parent}")
    if out.exists():
        if out.resolve() == source.resolve():
            raise UsageError(f"{out} is the source: write the result to another file")
        if not ns.force:
            raise UsageError(f"{out} exists: pass --force to replace it, or choose another name")
        if out.is_dir():
            raise UsageError(f"{out} is a folder: give the output file's name")
    return source, out


def run(ns: argparse.Namespace) -> int:
    from lemonade_onebit.console import line
    from lemonade_onebit.kernels import convert

    if not ns.rotate:
        given = [flag for flag, value in (("--type", ns.type), ("--imatrix", ns.imatrix),
                                          ("--seed", ns.seed)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} is for --rotate only")
    if ns.ternary_q4_0 and ns.device == "cuda":
        raise UsageError("--ternary-q4-0 only repacks bits: it runs on the cpu")
    source, out = _paths(ns)
    if ns.imatrix is not None and not Path(ns.imatrix).is_file():
        raise UsageError(f"--imatrix {ns.imatrix}: no such file (give a calibration text)")
    if ns.device == "cuda":
        _need_cuda()
    if ns.rotate:
        report = convert.rotate(source, out, (ns.type or "Q4_0").upper(),
                                Path(ns.imatrix) if ns.imatrix else None,
                                ns.seed if ns.seed is not None else 0, ns.device, ns.quiet)
    elif ns.hadamard_q4_0:
        report = convert.hadamard_q4_0(source, out, ns.device, ns.quiet)
    else:
        report = convert.ternary_q4_0(source, out, ns.quiet)
    for note in report.notes:
        line(f"1bit convert: note: {note}")
    print(json.dumps(report.as_json()) if ns.json else report.summary())
    return 0


def _need_cuda() -> None:
    try:
        import torch
    except ImportError:
        raise UsageError("--device cuda needs torch (pip install 'lemonade-onebit[convert-gpu]'); "
                         "--device cpu runs without it") from None
    if not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA GPU here; use --device cpu")
