"""Expert placement against the GPU budget: this package's plan vs llama.cpp's own `--fit` vs the
naive `--cpu-moe`, decode and prompt tok/s, interleaved.

A budget emulates a smaller card: the GPU memory at which the planner keeps that share of the
routed experts on the GPU (`moe.plan.budget_for`: dense weights, KV cache, compute buffers and
the runtime's reserve, plus the share). Each config then gets the same budget:

- plan: `-ngl 99` and the flags `moe.plan.plan` gives for a GPU of that many bytes;
- fit: llama.cpp's fitting (`--fit on`, no `-ngl`), with `--fit-target` set to the GPU's free
  MiB minus the budget, so that what llama.cpp may use is the budget (fit-target is the memory
  it leaves free on the device): fit with no margin of its own;
- fit-default: llama.cpp's fitting as it runs on a card of the budget's size, with its default
  margin: `--fit-target` = the GPU's free MiB minus the budget plus 1024 (`fit_params_target` in
  the pinned `common/common.h`);
- cpu-moe: `-ngl 99 --cpu-moe`, every routed expert in RAM whatever the budget (run once a
  round);
- plan-at-fit: the plan for the GPU memory fit really used in the same round (nvidia-smi), for a
  like-for-like comparison where fit oversteps the budget (run after fit; left out, and counted,
  where that memory is unknown);
- plan-nohost (by name only): the plan with `--no-host`, so the experts in RAM go to llama.cpp's
  CPU buffers with weight repacking (interleaved rows for the CPU's vector units) instead of the
  GPU's pinned host buffers, where they are kept as in the file;
- plan-tN (by name only, e.g. plan-t8): the plan with `-t N`, N CPU threads for the experts in
  RAM (llama-server's default is its count of the CPU's cores).

Every run is a fresh llama-server (127.0.0.1, one slot, fixed `-c`); the order of budgets and of
configs turns each round. A run records load time, the prompt tok/s of an uncached prompt of
`--prompt-tokens` tokens and the decode tok/s of `--decode-tokens` greedy tokens (llama-server's
own timings), the GPU memory the process used (nvidia-smi) and llama.cpp's buffer sizes from its
log, so the share of experts each config really kept on the GPU, and whether it stayed in the
budget, are in the results. Usage (bench/gpu/moe.sh runs it on the H200):

    python bench/moe_speed.py --model M.gguf --llama-server build/bin/llama-server \
        --budgets 100,75,50,25 --rounds 3 --json moe.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.moe.inspect import MoeIndex, read_index  # noqa: E402
from lemonade_onebit.moe.memory import lockable_bytes, ram_available  # noqa: E402
from lemonade_onebit.moe.plan import Memory, MiB, Workload, budget_for, plan  # noqa: E402

CONFIGS = ("plan", "fit", "fit-default", "cpu-moe", "plan-at-fit", "plan-nohost")
DEFAULT_CONFIGS = CONFIGS[:5]
FITS = {"fit": 0, "fit-default": 1024}  # each fit config's margin in MiB, on a card of the budget
PLAN_THREADS = re.compile(r"plan-t([1-9]\d*)")


def plan_extra(config: str) -> list[str] | None:
    """What a config that runs the plan adds to the plan's flags; None for one that does not."""
    if config in ("plan", "plan-at-fit"):
        return []
    if config == "plan-nohost":
        return ["--no-host"]
    if m := PLAN_THREADS.fullmatch(config):
        return ["-t", m[1]]
    return None


def is_plan(config: str) -> bool:
    return plan_extra(config) is not None


def ratio_key(config: str, fit: str, what: str) -> str:
    """The summary row's key of config's paired ratio to a fit config (plan_vs_fit_decode_tps)."""
    return f"{config}_vs_{fit}_{what}".replace("-", "_")


BUFFER = re.compile(r"(\S+) (model|KV|compute|output) buffer size =\s*([\d.]+) MiB")


# Only the planner is imported from the package: the GPU machine's python3 runs this with numpy
# and gguf-py alone.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def start(argv: list[str], out) -> subprocess.Popen:
    """llama-server in its own process group, so stopping it takes what it started too."""
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, grace: float = 20) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_health(url: str, proc: subprocess.Popen, timeout: float, log: Path, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = " ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise SystemExit(f"{what} exited {proc.returncode}: {tail} (log: {log})")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} not ready in {timeout:g} s (log: {log})")


def gpu_free_mib() -> int | None:
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def settled_free_mib() -> int | None:
    """The GPU's free MiB once the last run's memory is back (two equal reads, 5 s at most)."""
    last = gpu_free_mib()
    for _ in range(10):
        time.sleep(0.5)
        now = gpu_free_mib()
        if now == last:
            break
        last = now
    return last


def gpu_used_mib(pid: int) -> int | None:
    """The GPU memory the process holds (its CUDA context included)."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    for row in out.splitlines():
        parts = [p.strip() for p in row.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            return int(parts[1])
    return None


def buffers(log: str) -> dict[str, float]:
    """llama.cpp's last reported size of each buffer, MiB: {'CUDA0 model': 1234.5, ...}."""
    found: dict[str, float] = {}
    for name, kind, mib in BUFFER.findall(log):
        found[f"{name} {kind}"] = float(mib)
    return found


def argv_for(config: str, server: str, model: Path, port: int, ctx: int, threads: int | None,
             flags: tuple[str, ...], fit_target_mib: int | None) -> list[str]:
    argv = [server, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx),
            "-np", "1", "--no-webui",
            # verbosity 4 (trace) writes libllama's `model buffer size` lines the resident and
            # RAM columns read; it logs per request, not per token
            "-lv", "4"]
    if threads and not PLAN_THREADS.fullmatch(config):  # plan-tN sets its own
        argv += ["-t", str(threads)]
    extra = plan_extra(config)
    if extra is not None:
        return argv + ["-ngl", "99", *flags, *extra]
    if config in FITS:  # without the GPU's free memory, the config's own margin
        target = FITS[config] if fit_target_mib is None else fit_target_mib
        return argv + ["--fit", "on", "--fit-target", str(max(target, 0))]
    return argv + ["-ngl", "99", "--cpu-moe"]


def measure(url: str, n_vocab: int, prompt_tokens: int, decode_tokens: int, reps: int) -> dict:
    """Prompt tok/s of an uncached prompt and decode tok/s of greedy tokens, from llama-server's
    timings (after one warm-up request)."""
    def completion(body: dict) -> dict:
        body = {"cache_prompt": False, "temperature": 0, **body}
        return post(url + "/completion", body)

    completion({"prompt": "Hello", "n_predict": 4})
    prompt = [(1000 + 7919 * i) % max(n_vocab - 1000, 1) + 500 for i in range(prompt_tokens)]
    pp, tg = [], []
    for _ in range(reps):
        pp.append(completion({"prompt": prompt, "n_predict": 1})["timings"]["prompt_per_second"])
        done = completion({"prompt": "Once upon a time", "n_predict": decode_tokens,
                           "ignore_eos": True})
        tg.append(done["timings"]["predicted_per_second"])
    return {"prompt_tps": pp, "decode_tps": tg}


def one_run(config: str, pct: int, budget: int, args, index: MoeIndex, logs: Path,
            round_no: int) -> dict:
    free = args.gpu_free_mib or settled_free_mib()
    flags: tuple[str, ...] = ()
    planned = None
    if is_plan(config):
        memory = Memory(budget, ram_available(), lockable_bytes(), "of GPU budget")
        placement = plan(index, memory, Workload(ctx=args.ctx, parallel=1), "cuda")
        flags, planned = placement.flags, placement.as_json()
    fit_target = (free - budget // MiB + FITS.get(config, 0)) if free is not None else None
    port = free_port()
    argv = argv_for(config, args.llama_server, args.model, port, args.ctx, args.threads, flags,
                    fit_target)
    log_path = logs / f"r{round_no}-{config}-{pct}.log"
    started = time.monotonic()
    with open(log_path, "wb") as out:
        proc = start(argv, out)
        try:
            wait_health(f"http://127.0.0.1:{port}", proc, timeout=args.load_timeout,
                        log=log_path, what=f"llama-server ({config}, {pct}%)")
            load_s = time.monotonic() - started
            used = gpu_used_mib(proc.pid)
            result = measure(f"http://127.0.0.1:{port}", index.n_vocab, args.prompt_tokens,
                             args.decode_tokens, args.reps)
            used = max(filter(None, (used, gpu_used_mib(proc.pid))), default=None)
        finally:
            stop(proc)
    log = log_path.read_text(errors="replace")
    sizes = buffers(log)
    gpu_model = sum(v for k, v in sizes.items() if k.startswith("CUDA") and k.endswith(" model")
                    and not k.startswith("CUDA_Host"))
    dense_gpu = (index.dense_bytes - index.input_bytes) / MiB
    resident = (max(gpu_model - dense_gpu, 0) / (index.routed_bytes / MiB)
                if sizes and index.routed_bytes else None)
    ram_per_token = (None if resident is None else
                     (1 - min(resident, 1.0)) * index.routed_bytes * index.used_fraction / MiB)
    return {"round": round_no, "budget_pct": pct, "budget_mib": budget // MiB, "config": config,
            "argv": argv[1:], "fit_target_mib": fit_target if config in FITS else None,
            "load_s": round(load_s, 2), **result,
            "gpu_used_mib": used, "within_budget": None if used is None else used <= budget // MiB,
            "buffers_mib": sizes, "experts_resident": None if resident is None else round(resident, 4),
            "experts_from_ram_mib_per_token": None if ram_per_token is None else round(ram_per_token, 2),
            "planned": planned}


def summary(samples: list[dict]) -> list[dict]:
    rows = []
    names = (*CONFIGS, *sorted({s["config"] for s in samples} - set(CONFIGS)))  # plan-tN last
    for pct in sorted({s["budget_pct"] for s in samples}, reverse=True):
        row: dict = {"budget_pct": pct}
        for config in names:
            mine = [s for s in samples if s["config"] == config
                    and (s["budget_pct"] == pct or config == "cpu-moe")]
            if not mine:
                continue
            row[config] = {
                "decode_tps": statistics.median(x for s in mine for x in s["decode_tps"]),
                "prompt_tps": statistics.median(x for s in mine for x in s["prompt_tps"]),
                "experts_resident": statistics.median(s["experts_resident"] for s in mine)
                if all(s["experts_resident"] is not None for s in mine) else None,
                "experts_from_ram_mib_per_token": statistics.median(
                    s["experts_from_ram_mib_per_token"] for s in mine)
                if all(s["experts_from_ram_mib_per_token"] is not None for s in mine) else None,
                "gpu_used_mib": max((s["gpu_used_mib"] for s in mine if s["gpu_used_mib"]),
                                    default=None),
                "within_budget": all(s["within_budget"] is not False for s in mine),
                "runs": len(mine)}
        for mine in filter(is_plan, names):
            for fit in FITS:
                if mine not in row or fit not in row or (mine == "plan-at-fit" and fit != "fit"):
                    continue  # plan-at-fit ran at fit's memory: paired with fit alone
                # paired ratios, round by round, then their median
                pairs = [(p, f) for p in samples for f in samples
                         if p["config"] == mine and f["config"] == fit and p["round"] == f["round"]
                         and p["budget_pct"] == f["budget_pct"] == pct]
                for key in ("decode_tps", "prompt_tps"):
                    ratios = [statistics.median(p[key]) / statistics.median(f[key])
                              for p, f in pairs]
                    row[ratio_key(mine, fit, key)] = (round(statistics.median(ratios), 4)
                                                      if ratios else None)
        row["budget_mib"] = next(s["budget_mib"] for s in samples
                                 if s["budget_pct"] == pct and s["config"] != "plan-at-fit")
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """One line per budget and config; cpu-moe (run once a round, whatever the budget) repeats."""
    def cell(value, fmt: str) -> str:
        return "" if value is None else format(value, fmt)

    # judged against the row's budget, so plan-at-fit (planned for the memory fit used) shows
    # "no" where fit overstepped; the summary's within_budget is against each run's own budget
    in_budget = {True: "yes", False: "**no**"}

    lines = ["| experts resident (budget) | MiB | config | decode tok/s | prompt tok/s | resident | "
             "GPU MiB used | in budget | experts from RAM per token (MiB) | "
             "decode / fit | prompt / fit | decode / fit-default | prompt / fit-default |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for config, got in row.items():
            if not isinstance(got, dict):
                continue
            used = got["gpu_used_mib"]
            lines.append(
                f"| {row['budget_pct']}% | {row.get('budget_mib', 0):,} | {config} | "
                f"{cell(got['decode_tps'], '.1f')} | {cell(got['prompt_tps'], ',.0f')} | "
                f"{cell(got['experts_resident'], '.0%')} | {cell(used, ',')} | "
                f"{'' if used is None else in_budget[used <= row['budget_mib']]} | "
                f"{cell(got['experts_from_ram_mib_per_token'], '.0f')} | "
                + " | ".join(cell(row.get(ratio_key(config, fit, what)), "")
                             for fit in FITS for what in ("decode_tps", "prompt_tps")) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--llama-server", required=True)
    parser.add_argument("--budgets", default="100,75,50,25",
                        help="shares of the routed experts resident, in %% (100,75,50,25)")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help=f"of {', '.join(CONFIGS)}, plan-tN ({','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--prompt-tokens", type=int, default=2048)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=2, help="prompt and decode requests per run")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--gpu-free-mib", type=int,
                        help="the GPU's free MiB for --fit-target (else nvidia-smi's)")
    parser.add_argument("--deadline", type=float,
                        help="start no run after this many seconds; what is done is written")
    parser.add_argument("--load-timeout", type=float, default=300)
    parser.add_argument("--json", type=Path, help="every sample and the summary")
    parser.add_argument("--logs", type=Path, help="folder for the llama-server logs")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    began = time.monotonic()
    index = read_index(args.model)
    if not index.moe:
        raise SystemExit(f"{args.model}: not a mixture of experts")
    configs = [c for c in args.configs.split(",") if c]
    if any(c not in CONFIGS and not is_plan(c) for c in configs):
        raise SystemExit(f"--configs: each one of {', '.join(CONFIGS)}, plan-tN")
    work = Workload(ctx=args.ctx, parallel=1)
    budgets = {int(p): budget_for(index, work, int(p) / 100) for p in args.budgets.split(",")}
    logs = args.logs or Path(tempfile.mkdtemp(prefix="moe-speed-"))
    logs.mkdir(parents=True, exist_ok=True)
    meta = {"model": args.model.name, "index": {k: v for k, v in index.as_json().items()
                                                  if k != "layers"},
            "budgets_mib": {p: b // MiB for p, b in budgets.items()}, "ctx": args.ctx,
            "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
            "reps": args.reps, "gpu_free_mib_at_start": args.gpu_free_mib or gpu_free_mib(),
            "cpu_count": os.cpu_count(), "llama_server": args.llama_server}
    samples: list[dict] = []
    skipped = 0
    no_fit_memory = 0  # plan-at-fit runs left out: fit's GPU memory unknown (no nvidia-smi)

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "samples": samples,
                                             "summary": summary(samples),
                                             "skipped_for_deadline": skipped,
                                             "plan_at_fit_left_out": no_fit_memory}, indent=1))

    order = sorted(budgets, reverse=True)
    for r in range(args.rounds):
        turn = order[r % len(order):] + order[:r % len(order)]
        runs = []
        for i, pct in enumerate(turn):
            names = [c for c in configs if c not in ("cpu-moe", "plan-at-fit")]
            runs += [(c, pct) for c in (names if (r + i) % 2 == 0 else names[::-1])]
        if "cpu-moe" in configs:
            runs.insert(r % (len(runs) + 1), ("cpu-moe", min(budgets)))
        while runs:
            config, pct = runs.pop(0)
            if args.deadline and time.monotonic() - began > args.deadline:
                skipped += 1
                continue
            if config == "plan-at-fit":
                used = next(s["gpu_used_mib"] for s in samples if s["config"] == "fit"
                            and s["round"] == r and s["budget_pct"] == pct)
                sample = one_run(config, pct, used * MiB, args, index, logs, r)
            else:
                sample = one_run(config, pct, budgets[pct], args, index, logs, r)
            samples.append(sample)
            if config == "fit" and "plan-at-fit" in configs:
                if sample["gpu_used_mib"]:
                    runs.insert(0, ("plan-at-fit", pct))  # next, while the machine is as fit left it
                else:
                    no_fit_memory += 1
            print(f"round {r} {config:8} {pct:3}%: decode {statistics.median(sample['decode_tps']):.1f}"
                  f" tok/s, prompt {statistics.median(sample['prompt_tps']):.0f} tok/s, resident "
                  f"{sample['experts_resident']}, GPU {sample['gpu_used_mib']} of "
                  f"{sample['budget_mib']} MiB", flush=True)
            save()
    save()
    print(table(summary(samples)))
    if skipped:
        print(f"{skipped} runs left out: --deadline {args.deadline:g} s reached")
    if no_fit_memory:
        print(f"{no_fit_memory} plan-at-fit runs left out: fit's GPU memory is unknown here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
