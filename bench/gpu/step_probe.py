"""Where llama-server's decode step goes with many slots busy, after `bench/gpu/concurrency.sh`
built llama.cpp and wrote the model (`PROBE=step bash bench/gpu/concurrency.sh`).

Per config, one fresh `1bit serve --device cuda` (serve's `--parallel auto`) per round; in it, the
same bursts of N concurrent streams (`lemonade_onebit.bench.concurrency`) go to the executor
directly (its own port, read from its command line) and through serve, interleaved burst by burst
(the side that goes first alternates). Each burst records the CPU seconds of llama-server's
busiest thread (its main loop: slots, sampling, results) over the burst's wall time, so a step
bound by the CPU shows as a thread near 1.0. Both sides open a new connection per stream (llama-server
may close a kept-alive connection just as a client reuses it).

Each serve runs with `--no-recipes`, so a config's flags are all its executor gets (the shipped
cuda recipe would add `-bs` to every one). Configs: `auto` (no executor flags) and `auto` plus
each of `-bs` (llama.cpp's backend sampling: the sampler chain runs in the model's graph on the
GPU instead of per slot on the CPU), `--no-cache-idle-slots`, `-cram 0` (no prompt cache in RAM),
and `-bs -cram 0`; `repK`: K serves of the model at once (each `--parallel 64/K -- -bs -cram 0`,
so each executor has its own main loop), a burst's streams round-robin over them (measured
through serve only); `bs-t0.8*`: sampled requests (temperature 0.8) under `-bs`, with
llama-server's default filters, without top-k, and with min-p alone; `bs-whole`: whole replies
(`"stream": false`), whose TTFT is the whole request's time and whose aggregate rate (prefill
included) is the one to compare; `bs-eos`: greedy streams without `ignore_eos` (no logit bias on
the end-of-generation tokens in any slot's chain). Under `-bs` serve sends greedy requests
without top-k, top-p and min-p (`backends/llamacpp.py`, NO_FILTERS), so in every `-bs` config
with greedy requests the direct side has the filters and the serve side has not.
`CONFIG@NAME` runs CONFIG with `llama-server-NAME` (a patched build of `concurrency.sh`'s
`PATCHES=NAME`, e.g. `bs-eos@server-wakeup+greedy-draw`) in place of the build's llama-server.
`--sides serve` sends the bursts through serve only, so that what a llama-server built with
`step-timings` logs (serve's log, `serve-CONFIG-ROUND-I.log`; `bench/gpu/step_timings.py`) is
the serve side's alone.

    python3 bench/gpu/step_probe.py --bin BUILD/bin --model M.gguf --out OUT \
        [--levels 1,32] [--rounds 2] [--bursts 3] [--tokens 128] [--configs auto,bs,bs@NAME,...]
        [--sides direct,serve] [--deadline EPOCH_S]

Writes OUT/step-probe.json after every config and round, and a table on stdout and in
OUT/step-probe.md. Everything it starts is stopped however it is stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.bench import concurrency  # noqa: E402
from lemonade_onebit.bench.common import Config, Progress, Run, exit_on_sigterm  # noqa: E402

CONFIGS = {  # name: (llama-server flags after serve's, request fields over greedy)
    "auto": ([], {}),
    "bs": (["-bs"], {}),
    "no-idle-cache": (["--no-cache-idle-slots"], {}),
    "cram-0": (["-cram", "0"], {}),
    "bs+cram-0": (["-bs", "-cram", "0"], {}),
    **{f"rep{k}": (["-bs", "-cram", "0"], {}) for k in (2, 4, 8)},
    # Sampled requests under -bs: llama-server's default filters (top-k 40, top-p 0.95, min-p
    # 0.05), then without top-k, then min-p alone (no sort of the vocabulary left).
    "bs-t0.8": (["-bs"], {"temperature": 0.8}),
    "bs-t0.8-k0": (["-bs"], {"temperature": 0.8, "top_k": 0}),
    "bs-t0.8-minp": (["-bs"], {"temperature": 0.8, "top_k": 0, "top_p": 1.0}),
    # Whole replies instead of streams: no partial result per token and slot, so no wakeup of
    # the HTTP threads per token (compare the aggregate rate, prefill included, with `bs`).
    "bs-whole": (["-bs"], {"stream": False}),
    # Greedy streams without ignore_eos: the bench's requests ask for it so that every stream
    # gives its tokens, and llama-server adds a logit bias on the end-of-generation tokens for it,
    # which is per-slot work in every step (its inputs copied to the GPU, three nodes over the
    # vocabulary). Random weights rarely end a stream early; the rate counts the tokens received.
    "bs-eos": (["-bs"], {"ignore_eos": False}),
}


def split(name: str, bin_dir: Path) -> tuple[str, Path]:
    """`CONFIG[@PATCH]`: the config of CONFIGS and the llama-server it runs."""
    base, at, patch = name.partition("@")
    if at and not patch.strip():
        raise ValueError(f"{name}: no patch name after @")
    if base not in CONFIGS:
        raise ValueError(f"no config {base}; known: {', '.join(CONFIGS)}")
    server = bin_dir / (f"llama-server-{patch}" if patch else "llama-server")
    if patch and not server.is_file():
        raise ValueError(f"{name}: no {server} (build it with PATCHES={patch})")
    return base, server


def executor_of(serve: Run) -> psutil.Process:
    """serve's llama-server child."""
    for child in psutil.Process(serve.proc.pid).children(recursive=True):
        if "llama-server" in child.name() or any("llama-server" in a for a in child.cmdline()[:1]):
            return child
    raise SystemExit("no llama-server under serve")


def port_of(proc: psutil.Process) -> int:
    argv = proc.cmdline()
    return int(argv[argv.index("--port") + 1])


def busiest(before: dict[int, float], after: dict[int, float]) -> float:
    return max((after[t] - before.get(t, 0.0) for t in after), default=0.0)


def thread_cpu(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def one_burst(urls: list[str], config: Config, level: int, args, round_index: int,
              llamas: list[psutil.Process], headers: dict | None, sampling: dict) -> None:
    """One measured burst at `level` (after concurrency.measure's warm-up), its streams spread
    over `urls`, with the busiest executor thread's CPU share."""
    before, began = [thread_cpu(p) for p in llamas], time.perf_counter()
    concurrency.measure(urls[0], config, [level], 1, args.tokens, args.tokens, round_index,
                        Progress(1, stream=open("/dev/null", "w")), headers, force_close=True,
                        spread=urls[1:], sampling=sampling)
    wall = time.perf_counter() - began
    share = max(busiest(b, thread_cpu(p)) for b, p in zip(before, llamas)) / wall
    config.samples("main_thread").append(
        {"round": round_index + 1, "streams": level, "cpu_share": share})


def replicas_of(name: str) -> int:
    """`repK`: K serves of the model, each with 64/K slots, streams spread over them."""
    return int(name[3:]) if name.startswith("rep") else 1


def table(results: dict[str, Config]) -> str:
    rows = ["| config | side | streams | aggregate decode tok/s | steady decode tok/s "
            "| per-stream tok/s | TTFT p50 ms | TTFT p95 ms | aggregate tok/s (prefill included) "
            "| busiest llama-server thread, CPU share |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, config in results.items():
        name, side = key.split("/")
        for level in concurrency.levels_of(config):
            m = concurrency.stats(config, level)
            cpu = [s["cpu_share"] for s in config.data.get("main_thread", [])
                   if s["streams"] == level]
            rows.append(f"| {name} | {side} | {level} | {m['decode_tps']:,.0f} | "
                        f"{m['steady_tps']:,.0f} | "
                        f"{m['stream_tps']:.1f} | {m['ttft_p50_ms']:.0f} | "
                        f"{m['ttft_p95_ms']:.0f} | {m['aggregate_tps']:,.0f} | "
                        f"{statistics.median(cpu) if cpu else float('nan'):.2f} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, type=Path, help="llama.cpp's build/bin")
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--levels", default="1,32")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--sides", default="direct,serve",
                        help="direct (to llama-server's own port) and/or serve")
    parser.add_argument("--deadline", type=float)
    parser.add_argument("--device", default="cuda", help="serve's route (cpu: to try it here)")
    args = parser.parse_args()
    exit_on_sigterm()
    names = args.configs.split(",")
    asked = set(args.sides.split(","))
    if asked - {"direct", "serve"}:  # "" too
        raise SystemExit(f"--sides {args.sides}: give direct, serve or direct,serve")
    sides_asked = [side for side in ("direct", "serve") if side in asked]
    try:
        chosen = {n: split(n, args.bin) for n in names}
    except ValueError as e:
        raise SystemExit(f"--configs: {e}") from None
    if "serve" not in sides_asked and any(replicas_of(chosen[n][0]) > 1 for n in names):
        raise SystemExit("--configs: repK is measured through serve only; add serve to --sides")
    args.out.mkdir(parents=True, exist_ok=True)
    levels = [int(n) for n in args.levels.split(",")]
    results = {f"{n}/{side}": Config(n, CONFIGS[chosen[n][0]][0]) for n in names
               for side in sides_asked}
    out = args.out / "step-probe.json"
    k = 0
    try:
        for r in range(args.rounds):
            for name in names:
                if args.deadline and time.time() > args.deadline - 60:
                    raise TimeoutError
                base, server = chosen[name]
                extra, replicas = CONFIGS[base][0], replicas_of(base)
                own = ["--parallel", str(64 // replicas)] if replicas > 1 else []
                serves = [Run.serve(args.model, ["--device", args.device, "--llama-server",
                                                 str(server), "--no-recipes",
                                                 *own,
                                                 *(["--", *extra] if extra else [])],
                                    args.out / f"serve-{name}-{r + 1}-{i}.log")
                          for i in range(replicas)]
                try:
                    for serve in serves:
                        serve.wait_ready()
                    llamas = [executor_of(serve) for serve in serves]
                    urls = {"direct": [f"http://127.0.0.1:{port_of(p)}" for p in llamas],
                            "serve": [serve.url for serve in serves]}
                    key = llamas[0].environ().get("LLAMA_API_KEY")  # serve's key for its executor
                    headers = {"direct": {"Authorization": f"Bearer {key}"} if key else None,
                               "serve": None}
                    for level in levels:
                        for _ in range(args.bursts):
                            sides = sides_asked if (k % 2 == 0) else sides_asked[::-1]
                            k += 1
                            for side in sides if replicas == 1 else ["serve"]:
                                one_burst(urls[side], results[f"{name}/{side}"], level, args, r,
                                          llamas, headers[side], CONFIGS[base][1])
                finally:
                    for serve in serves:
                        serve.stop()
                out.write_text(json.dumps({key: c.as_json() for key, c in results.items()},
                                          indent=1))
                print(f"round {r + 1}: {name} done", flush=True)
    except (TimeoutError, KeyboardInterrupt):
        print("deadline: tables from the rounds finished", flush=True)
    done = {key: c for key, c in results.items() if c.data.get("bursts")}
    text = table(done)
    (args.out / "step-probe.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
