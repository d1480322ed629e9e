"""Instructions per token of the plain and the rotated Q4_0 SmolLM2 on the cpu route's
llama.cpp, counted by callgrind: a speed comparison that the machine's other load cannot move.

    .venv/bin/python bench/kernels_instructions.py [--work /tmp/kernels-ppl]

For each file the pinned llama-completion runs four times under `valgrind --tool=callgrind`
(one thread, no warm-up, greedy): a 9-token and a 137-token prompt with 1 token generated, and
the short prompt with 9 and 41 tokens generated. Differences of the totals give the instructions
of 128 prompt tokens and of 32 decoded tokens, with loading and start-up cancelled out. The
numbers go to bench/results/kernels-instructions.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.kernels import tools  # noqa: E402

SHORT = "The capital of France is"
LONG = ("It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife. ") * 5
IR = re.compile(r"^summary:\s+(\d+)", re.M)


def instructions(model: Path, prompt: str, n: int, out: Path) -> int:
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            tools.tool("llama-completion"), "-m", str(model), "-p", prompt, "-n", str(n), "-t", "1",
            "--no-warmup", "-no-cnv", "--temp", "0", "--ignore-eos", "-c", "512"]
    subprocess.run(argv, capture_output=True, check=True)
    found = IR.search(out.read_text(errors="replace"))
    if not found:
        raise SystemExit(f"no summary line in {out}")
    return int(found.group(1))


def prompt_tokens(model: Path, prompt: str) -> int:
    out = subprocess.run([tools.tool("llama-tokenize"), "-m", str(model), "-p", prompt,
                          "--show-count", "--log-disable"], capture_output=True, text=True)
    return int(re.search(r"Total number of tokens: (\d+)", out.stdout).group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/kernels-ppl")
    parser.add_argument("--json", default=str(ROOT / "bench/results/kernels-instructions.json"))
    args = parser.parse_args()
    work = Path(args.work)
    models = {"plain": work / "smollm2.Q4_0.gguf", "rotated": work / "smollm2-rot.Q4_0.gguf"}
    report: dict = {"short_prompt_tokens": prompt_tokens(models["plain"], SHORT),
                    "long_prompt_tokens": prompt_tokens(models["plain"], LONG), "models": {}}
    extra = report["long_prompt_tokens"] - report["short_prompt_tokens"]
    for name, model in models.items():
        cg = work / f"{name}.callgrind"
        short1 = instructions(model, SHORT, 1, cg)
        long1 = instructions(model, LONG, 1, cg)
        short9 = instructions(model, SHORT, 9, cg)
        short41 = instructions(model, SHORT, 41, cg)
        report["models"][name] = {
            "file": str(model), "prompt_per_token": (long1 - short1) / extra,
            "decode_per_token": (short41 - short9) / 32, "totals": [short1, long1, short9, short41]}
        print(name, report["models"][name], flush=True)
    plain, rotated = report["models"]["plain"], report["models"]["rotated"]
    for key in ("prompt_per_token", "decode_per_token"):
        report[f"{key}_ratio"] = rotated[key] / plain[key]
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k.endswith("ratio")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
