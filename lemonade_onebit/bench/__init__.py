"""`1bit bench`: A/B `1bit serve` configurations on one model, interleaved.

Each round starts a fresh `1bit serve` per config on a free port (configs in order A B A B ...).
Four modes: prompt and decode speed from llama-server's `timings` (the default, `ab.py`); time to
first token and end-to-end time by prompt length (`--e2e`, `e2e.py`); start to first token, cold
and warm, against the executor started alone (`--swap`, `swap.py`); aggregate and per-stream
decode rate and TTFT by the number of concurrent streams (`--concurrency`, `concurrency.py`).
The JSON file is rewritten after every round, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.bench import ab, concurrency, e2e, swap
from lemonade_onebit.bench.common import (
    RUN_ERRORS,
    Progress,
    Run,
    exit_on_sigterm,
    parse_configs,
    take_lock,
)
from lemonade_onebit.errors import RunError, UsageError


@dataclass(frozen=True)
class BenchOptions:
    model: str
    configs: list[str]
    mode: str = "ab"  # ab | e2e | swap | concurrency
    rounds: int = 3
    prompt_reps: int = 5
    decode_reps: int = 3
    decode_tokens: int = 256
    prompt_tokens: tuple[int, ...] = (128, 512, 2048)
    e2e_reps: int = 3
    concurrency: tuple[int, ...] = (1, 8, 32)  # --concurrency: streams at once, per level
    bursts: int = 3  # --concurrency: measured bursts per level per run
    json: str | None = None
    lock: str | None = None
    log_dir: str | None = None
    plot: str | None = None


def run_bench(opts: BenchOptions) -> int:
    configs = parse_configs(opts.configs)
    if opts.plot and not opts.plot.lower().endswith(".png"):
        raise UsageError(f"--plot {opts.plot}: give a .png file")
    if opts.mode == "concurrency" and opts.decode_tokens < 2:
        raise UsageError("--concurrency needs --decode-tokens 2 or more: a decode rate is timed "
                         "from a stream's first token to its last")
    files = []
    if opts.mode == "swap":
        from lemonade_onebit.catalog.resolve import resolve_model

        files = swap.model_files(resolve_model(opts.model).path)
    steps = {"ab": ab.steps(opts.prompt_reps, opts.decode_reps),
             "e2e": len(opts.prompt_tokens) * opts.e2e_reps,
             "swap": len(swap.STARTS) * len(swap.SIDES),
             "concurrency": len(opts.concurrency) * opts.bursts}[opts.mode]
    mode = {"ab": ab, "e2e": e2e, "swap": swap, "concurrency": concurrency}[opts.mode]
    lock = take_lock(opts.lock) if opts.lock else None
    logs = Path(opts.log_dir) if opts.log_dir else Path(tempfile.mkdtemp(prefix="1bit-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    progress = Progress(opts.rounds * len(configs) * steps)
    progress.note(f"{len(configs)} configs x {opts.rounds} rounds; logs in {logs}")
    exit_on_sigterm()  # a SIGTERM stops the serve in progress, as Ctrl-C does
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
            if opts.json:
                _write_json(opts, configs, r + 1)
    finally:
        progress.close()
        if lock is not None:
            lock.close()
    print(mode.table(configs))
    if opts.plot:
        from lemonade_onebit.bench.plot import plot

        plot(opts.mode, configs, opts.model, opts.plot)
    return 0


def _measure_one(opts: BenchOptions, config, round_index: int, logs: Path,
                 progress: Progress) -> None:
    run = Run.serve(opts.model, config.args, logs / f"{config.name}-round{round_index + 1}.log")
    try:
        run.wait_ready()
        if opts.mode == "concurrency":
            concurrency.measure(run.url, config, list(opts.concurrency), opts.bursts,
                                opts.prompt_tokens[0], opts.decode_tokens, round_index, progress)
        elif opts.mode == "e2e":
            e2e.measure(run.url, config, list(opts.prompt_tokens), opts.e2e_reps,
                        opts.decode_tokens, progress)
        else:
            ab.measure(run.url, config, opts.prompt_reps, opts.decode_reps, opts.decode_tokens,
                       progress)
    finally:
        run.stop()


def _write_json(opts: BenchOptions, configs, rounds_done: int) -> None:
    assert opts.json is not None
    Path(opts.json).write_text(json.dumps({
        "model": opts.model, "mode": opts.mode, "rounds": opts.rounds, "rounds_done": rounds_done,
        **_settings(opts), "configs": [c.as_json() for c in configs]}, indent=1))


def _settings(opts: BenchOptions) -> dict:
    if opts.mode == "ab":
        return {"prompt_reps": opts.prompt_reps, "decode_reps": opts.decode_reps,
                "decode_tokens": opts.decode_tokens}
    if opts.mode == "concurrency":
        return {"concurrency": list(opts.concurrency), "bursts": opts.bursts,
                "prompt_tokens": opts.prompt_tokens[0], "decode_tokens": opts.decode_tokens}
    if opts.mode == "e2e":
        return {"prompt_tokens": list(opts.prompt_tokens), "e2e_reps": opts.e2e_reps,
                "decode_tokens": opts.decode_tokens}
    return {"poll_ms": swap.POLL_S * 1000}
