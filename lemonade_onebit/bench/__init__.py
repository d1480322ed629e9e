"""`1bit bench`: A/B `1bit serve` configurations on one model, interleaved.

Each round starts a fresh `1bit serve` per config on a free port (configs in order A B A B ...).
Three modes: prompt and decode speed from llama-server's `timings` (the default, `ab.py`); time to
first token and end-to-end time by prompt length (`--e2e`, `e2e.py`); start to first token, cold
and warm, against the executor started alone (`--swap`, `swap.py`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.bench import ab, e2e, swap
from lemonade_onebit.bench.common import RUN_ERRORS, Progress, Run, parse_configs, take_lock
from lemonade_onebit.errors import RunError, UsageError


@dataclass(frozen=True)
class BenchOptions:
    model: str
    configs: list[str]
    mode: str = "ab"  # ab | e2e | swap
    rounds: int = 3
    prompt_reps: int = 5
    decode_reps: int = 3
    decode_tokens: int = 256
    prompt_tokens: tuple[int, ...] = (128, 512, 2048)
    e2e_reps: int = 3
    json: str | None = None
    lock: str | None = None
    log_dir: str | None = None
    plot: str | None = None


def run_bench(opts: BenchOptions) -> int:
    configs = parse_configs(opts.configs)
    if opts.plot and not opts.plot.lower().endswith(".png"):
        raise UsageError(f"--plot {opts.plot}: give a .png file")
    files = []
    if opts.mode == "swap":
        from lemonade_onebit.catalog.resolve import resolve_model

        files = swap.model_files(resolve_model(opts.model).path)
    steps = {"ab": ab.steps(opts.prompt_reps, opts.decode_reps),
             "e2e": len(opts.prompt_tokens) * opts.e2e_reps,
             "swap": len(swap.STARTS) * len(swap.SIDES)}[opts.mode]
    mode = {"ab": ab, "e2e": e2e, "swap": swap}[opts.mode]
    lock = take_lock(opts.lock) if opts.lock else None
    logs = Path(opts.log_dir) if opts.log_dir else Path(tempfile.mkdtemp(prefix="1bit-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    progress = Progress(opts.rounds * len(configs) * steps)
    progress.note(f"{len(configs)} configs x {opts.rounds} rounds; logs in {logs}")
    try:
        for r in range(opts.rounds):
            for c in configs:
                try:
                    if opts.mode == "swap":
                        swap.measure(opts.model, c, files, r, logs, progress)
                    else:
                        _measure_one(opts, c, r, logs, progress)
                except RUN_ERRORS as exc:
                    raise RunError(f"config {c.name}: {exc} (logs: {logs})") from exc
                progress.note(f"round {r + 1}/{opts.rounds} {c.name}: {mode.summary(c)}")
    finally:
        progress.close()
        if lock is not None:
            lock.close()
    print(mode.table(configs))
    if opts.json:
        Path(opts.json).write_text(json.dumps({
            "model": opts.model, "mode": opts.mode, "rounds": opts.rounds,
            **_settings(opts), "configs": [c.as_json() for c in configs]}, indent=1))
    if opts.plot:
        from lemonade_onebit.bench.plot import plot

        plot(opts.mode, configs, opts.model, opts.plot)
    return 0


def _measure_one(opts: BenchOptions, config, round_index: int, logs: Path,
                 progress: Progress) -> None:
    run = Run.serve(opts.model, config.args, logs / f"{config.name}-round{round_index + 1}.log")
    try:
        run.wait_ready()
        if opts.mode == "e2e":
            e2e.measure(run.url, config, list(opts.prompt_tokens), opts.e2e_reps,
                        opts.decode_tokens, progress)
        else:
            ab.measure(run.url, config, opts.prompt_reps, opts.decode_reps, opts.decode_tokens,
                       progress)
    finally:
        run.stop()


def _settings(opts: BenchOptions) -> dict:
    if opts.mode == "ab":
        return {"prompt_reps": opts.prompt_reps, "decode_reps": opts.decode_reps,
                "decode_tokens": opts.decode_tokens}
    if opts.mode == "e2e":
        return {"prompt_tokens": list(opts.prompt_tokens), "e2e_reps": opts.e2e_reps,
                "decode_tokens": opts.decode_tokens}
    return {"poll_ms": swap.POLL_S * 1000}
