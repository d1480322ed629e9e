"""Concurrent streams on the cuda route, after `bench/gpu/concurrency.sh` built llama.cpp and
wrote the model: the ceiling, then `1bit bench --concurrency` over the configs, interleaved.

1. `llama-batched-bench -fa on -npp 128 -ntg 128 -npl LEVELS` (and the same with `-kvu`): the
   executor's own decode rate at each batch size, on the same file and build.
2. `1bit bench --concurrency LEVELS` with these configs, each a fresh `1bit serve --device cuda`
   per round, in this order every round:
   - `defaults`: llama-server's own slots and flags (`--no-recipes -- -np -1`, what serve passed
     before `--parallel auto`: 4 slots sharing the trained context);
   - `auto`: `--parallel auto`, serve's default on the cuda route, without recipes;
   - `auto+ID` for each candidate of `cuda_candidates.json` (on `auto`, without recipes);
   - `serve`: what a user gets (auto and the shipped cuda recipes);
   - `set`: `serve` with the candidates the file's `set` names, together;
   - by name only: `serve-c1024`, `serve-np32`, and `serve+NAME` for each llama-server-NAME
     beside llama-server: one `bench/gpu/patched.sh NAME` built (a patch of llama.cpp, measured;
     not shipped), or one concurrency.sh's WRAPS wrote (llama-server with environment variables).
3. The tables (`concurrency_table.py`) on stdout and in OUT/cuda-concurrency.md.

    python3 bench/gpu/concurrency.py --bin BUILD/bin --model M.gguf --out OUT \
        [--levels 1,8,32,64] [--rounds 2] [--bursts 2] [--tokens 128] [--configs defaults,auto,...]
        [--deadline EPOCH_S]

With `--deadline`, the bench is stopped (SIGTERM: it stops the serve it runs) when that time
comes, and the tables are made from the rounds it finished: its JSON is written after each round.
Everything it starts is stopped however it is stopped (its children die with it, by the kernel's
parent-death signal, even on SIGKILL).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from concurrency_table import ceiling, render  # noqa: E402

from lemonade_onebit.bench.common import exit_on_sigterm, start, stop  # noqa: E402

CANDIDATES = Path(__file__).with_name("cuda_candidates.json")


def configs(llama_server: str, names: list[str] | None) -> list[str]:
    """`--config NAME=ARGS` values, in measuring order."""
    serve = f"--device cuda --llama-server {llama_server}"
    route = f"{serve} --no-recipes"
    data = json.loads(CANDIDATES.read_text())
    found = {"defaults": f"{route} -- -np -1", "auto": route}
    by_id = {c["id"]: c for c in data["candidates"]}
    for cid, c in by_id.items():
        found[f"auto+{cid.removeprefix('cuda-')}"] = f"{route} -- {' '.join(c['args'])}"
    found["serve"] = serve
    together = [arg for cid in data["set"] for arg in by_id[cid]["args"]]
    found["set"] = f"{serve} -- {' '.join(together)}"
    default = list(found)
    # asked for by name only: what a user gets with a smaller slot context (so --parallel auto
    # plans 1,024-cell slots) and with 32 slots instead of auto's count
    found["serve-c1024"] = f"{serve} -c 1024"
    found["serve-np32"] = f"{serve} -- -np 32"
    # llama-server with a patch of bench/gpu/patches/ (bench/gpu/patched.sh built it) or with
    # environment variables (concurrency.sh's WRAPS), else as serve
    for patched in sorted(Path(llama_server).parent.glob("llama-server-*")):
        name = patched.name.removeprefix("llama-server-")
        found[f"serve+{name}"] = serve.replace(llama_server, str(patched))
    chosen = names or default
    unknown = [n for n in chosen if n not in found]
    if unknown:
        raise SystemExit(f"--configs: no config {', '.join(unknown)}; known: {', '.join(found)}")
    return [f"{name}={found[name]}" for name in chosen]


def run_until(argv: list[str], log: Path, deadline: float | None) -> int:
    """Run a child with its output in `log`; SIGTERM it (then SIGKILL after its grace) at the
    deadline. Its exit status (negative: the signal that ended it)."""
    with open(log, "ab") as out:
        proc = start(argv, out)
        try:
            while proc.poll() is None:
                if deadline is not None and time.time() > deadline:
                    print(f"deadline: stopping {Path(argv[0]).name}", file=sys.stderr, flush=True)
                    break
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                stop(proc, grace=30)
    return proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, type=Path, help="llama.cpp's build/bin")
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--work", type=Path, help="serve logs (default: OUT/../logs)")
    parser.add_argument("--levels", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bursts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128, help="prompt and generated tokens")
    parser.add_argument("--configs", help="comma-separated config names (all)")
    parser.add_argument("--deadline", type=float, help="epoch seconds at which to stop")
    args = parser.parse_args()
    exit_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or args.out.parent / "onebit-concurrency-logs"
    work.mkdir(parents=True, exist_ok=True)
    chosen = configs(str(args.bin / "llama-server"), args.configs.split(",") if args.configs else None)

    top_batch = max(int(n) for n in args.levels.split(","))
    batched = [str(args.bin / "llama-batched-bench"), "-m", args.model, "-ngl", "99", "-fa", "on",
               "-c", str(top_batch * 2 * args.tokens), "-npp", str(args.tokens),
               "-ntg", str(args.tokens), "-npl", args.levels, "--output-format", "jsonl"]
    for name, extra in (("batched-bench.jsonl", []), ("batched-bench-kvu.jsonl", ["-kvu"])):
        began = time.time()
        rc = run_until([*batched, *extra], args.out / name, args.deadline)
        print(f"{name}: exit {rc}, {time.time() - began:.0f} s", flush=True)

    result = args.out / "concurrency.json"
    bench = [sys.executable, "-m", "lemonade_onebit", "bench", "-m", args.model,
             *[arg for spec in chosen for arg in ("--config", spec)],
             "--concurrency", args.levels, "--rounds", str(args.rounds), "--bursts",
             str(args.bursts), "--prompt-tokens", str(args.tokens), "--decode-tokens",
             str(args.tokens), "--json", str(result), "--plot", str(args.out / "concurrency.png"),
             "--log-dir", str(work)]
    began = time.time()
    rc = run_until(bench, work / "bench.log", args.deadline)
    print(f"1bit bench: exit {rc}, {time.time() - began:.0f} s", flush=True)
    if not result.is_file():
        print((work / "bench.log").read_text(errors="replace")[-3000:], file=sys.stderr)
        return 1
    table = render(result, ceiling(args.out / "batched-bench.jsonl"),
                   ceiling(args.out / "batched-bench-kvu.jsonl"), "defaults")
    (args.out / "cuda-concurrency.md").write_text(table + "\n")
    print(table)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
