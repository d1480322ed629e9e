"""Start to first token: the executor started directly against `1bit serve`, cold and warm.

Cold: the model's files are dropped from the page cache first (posix_fadvise DONTNEED, which
needs no privilege for pages no process holds). Warm: the files were just read. Each start is
polled on its readiness path every 5 ms, then a 1-token request is timed. The executor's argv,
environment and private key are the ones `1bit serve` would use (its plan, recipes included), so
serve's share is the difference of the two medians.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from lemonade_onebit.bench.common import Config, Progress, Run, post, shown_args

STARTS = ("cold", "warm")
SIDES = ("executor", "serve")
POLL_S = 0.005
TARGET_MS = 100


def model_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    return [path] if path.is_file() else []


def evict(files: list[Path]) -> None:
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(files: list[Path]) -> None:
    for f in files:
        with open(f, "rb") as handle:
            while handle.read(1 << 24):
                pass


def one_start(model: str, config: Config, side: str, log: Path) -> dict:
    """Start one side, time readiness and the first token, stop it."""
    if side == "serve":
        run = Run.serve(model, config.args, log)
        headers = {}
    else:
        from lemonade_onebit.serve import plan
        from lemonade_onebit.serve.options import parse_serve_args

        p = plan(parse_serve_args(model, config.args), say=lambda _: None)
        run = Run(p.spec.argv, p.spec.port, log, env=p.spec.env, ready_path=p.spec.readiness)
        headers = {"Authorization": f"Bearer {p.upstream_key}"}
    try:
        ready = run.wait_ready(interval=POLL_S)
        post(run.url, "/v1/chat/completions",
             {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}, headers)
        first = time.perf_counter() - run.started
    finally:
        run.stop()
    return {"ready_ms": ready * 1000, "first_token_ms": first * 1000}


def measure(model: str, config: Config, files: list[Path], round_index: int, logs: Path,
            progress: Progress) -> None:
    sides = SIDES if round_index % 2 == 0 else SIDES[::-1]
    for start in STARTS:
        for side in sides:
            if start == "cold":
                evict(files)
            else:
                warm(files)
            log = logs / f"{config.name}-round{round_index + 1}-{start}-{side}.log"
            sample = one_start(model, config, side, log)
            config.samples("starts").append({"start": start, "side": side, **sample})
            progress.step(f"{config.name}: {start} start, {side}")


def median(config: Config, start: str, side: str, key: str) -> float:
    return statistics.median(s[key] for s in config.data["starts"]
                             if s["start"] == start and s["side"] == side)


def share(config: Config, start: str, key: str = "ready_ms") -> float:
    """What serve adds to the executor's own time, in ms (difference of the medians)."""
    return median(config, start, "serve", key) - median(config, start, "executor", key)


def summary(config: Config) -> str:
    return ", ".join(f"{start}: serve's share {share(config, start):+.0f} ms" for start in STARTS)


def table(configs: list[Config]) -> str:
    rows = ["| config | args | start | executor ready ms | `1bit serve` ready ms | serve's share ms "
            "| executor first token ms | `1bit serve` first token ms |",
            "|---|---|---|---:|---:|---:|---:|---:|"]
    for c in configs:
        for start in STARTS:
            m = {(side, key): median(c, start, side, key)
                 for side in SIDES for key in ("ready_ms", "first_token_ms")}
            rows.append(f"| {c.name} | {shown_args(c.args)} | {start} | "
                        f"{m['executor', 'ready_ms']:.0f} | {m['serve', 'ready_ms']:.0f} | "
                        f"{share(c, start):+.0f} | {m['executor', 'first_token_ms']:.0f} | "
                        f"{m['serve', 'first_token_ms']:.0f} |")
    return "\n".join(rows)
