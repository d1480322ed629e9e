"""`1bit bench`: A/B serve configurations on one model, interleaved, from llama-server's `timings`.

Each round starts a fresh `1bit serve` per config on a free port (configs in order A B A B ...),
sends a warm-up request, then measures prompt speed on a fixed ~8,000-character text (max_tokens 8)
and decode speed on three fixed prompts (code, prose, short; temperature 0). Every request carries
`cache_prompt:false` and `chat_template_kwargs.enable_thinking:false`.
"""

from __future__ import annotations

import fcntl
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from lemonade_onebit.errors import RunError, UsageError

# The upstream prompts, kept so figures compare.
DECODE_PROMPTS = {
    "code": "Write a Python function that parses an ISO-8601 timestamp without using datetime, "
            "with tests.",
    "prose": "Explain how a B-tree insert works, step by step.",
    "short": "Translate to French: The quick brown fox jumps over the lazy dog, and then it goes "
             "home to sleep.",
}
PROMPT_TEXT = " ".join(
    f"Section {i}. The harbour master records each vessel, its cargo, its crew and the hour it "
    f"arrived, then checks the tide tables before assigning berth {i % 17}."
    for i in range(55)
)[:8000]
COMMON = {"cache_prompt": False, "chat_template_kwargs": {"enable_thinking": False}}


@dataclass
class Config:
    name: str
    args: list[str]
    prompt_tps: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)


def parse_configs(specs: list[str]) -> list[Config]:
    configs, seen = [], set()
    for spec in specs:
        name, sep, args = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--config {spec!r}: expected NAME=ARGS (ARGS may be empty)")
        if name in seen:
            raise UsageError(f"--config {name}: the name is used twice")
        seen.add(name)
        configs.append(Config(name, shlex.split(args)))
    if len(configs) < 1:
        raise UsageError("give at least one --config NAME=ARGS")
    return configs


def _post(url: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class ServeRun:
    """One fresh `1bit serve` for one config and round, its log in a file."""

    def __init__(self, model: str, config: Config, log: Path) -> None:
        from lemonade_onebit.serve import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._out = open(log, "wb")
        onebit = [sys.executable, "-m", "lemonade_onebit"]
        self.proc = subprocess.Popen([*onebit, "serve", "-m", model, "--port", str(self.port),
                                      *config.args], stdout=self._out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:]
                raise RunError(f"serve exited {self.proc.returncode}: {' '.join(tail)} "
                               f"(log: {self.log})")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        raise RunError(f"serve not ready in {timeout:g} s (log: {self.log})")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def measure(url: str, prompt_reps: int, decode_reps: int, decode_tokens: int,
            config: Config) -> None:
    _post(url, {"messages": [{"role": "user", "content": "Hello."}], "max_tokens": 4, **COMMON})
    for _ in range(prompt_reps):
        reply = _post(url, {"messages": [{"role": "user", "content": PROMPT_TEXT}],
                            "max_tokens": 8, "temperature": 0, **COMMON})
        config.prompt_tps.append(reply["timings"]["prompt_per_second"])
    for _ in range(decode_reps):
        for text in DECODE_PROMPTS.values():
            reply = _post(url, {"messages": [{"role": "user", "content": text}],
                                "max_tokens": decode_tokens, "temperature": 0, **COMMON})
            config.decode_tps.append(reply["timings"]["predicted_per_second"])


def table(configs: list[Config]) -> str:
    base = configs[0]

    def cell(values: list[float], base_values: list[float], is_base: bool) -> str:
        best, med = max(values), statistics.median(values)
        text = f"{best:.1f} / {med:.1f}"
        if not is_base:
            text += f" ({(med / statistics.median(base_values) - 1) * 100:+.1f}%)"
        return text

    rows = ["| config | args | prompt tok/s (best / median) | decode tok/s (best / median) |",
            "|---|---|---|---|"]
    for c in configs:
        is_base = c is base
        args = f"`{shlex.join(c.args)}`" if c.args else "(none)"
        rows.append(f"| {c.name} | {args} | "
                    f"{cell(c.prompt_tps, base.prompt_tps, is_base)} | "
                    f"{cell(c.decode_tps, base.decode_tps, is_base)} |")
    return "\n".join(rows)


def run_bench(model: str, specs: list[str], rounds: int, prompt_reps: int, decode_reps: int,
              decode_tokens: int, json_path: str | None, lock_path: str | None,
              log_dir: str | None) -> int:
    configs = parse_configs(specs)
    lock = _take_lock(lock_path) if lock_path else None
    logs = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="1bit-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"1bit bench: {len(configs)} configs x {rounds} rounds; logs in {logs}",
          file=sys.stderr, flush=True)
    try:
        for r in range(rounds):
            for c in configs:
                serve = ServeRun(model, c, logs / f"{c.name}-round{r + 1}.log")
                try:
                    serve.wait_ready()
                    measure(serve.url, prompt_reps, decode_reps, decode_tokens, c)
                except (urllib.error.URLError, KeyError, OSError) as exc:
                    raise RunError(f"config {c.name}: {exc} (log: {serve.log})") from exc
                finally:
                    serve.stop()
                print(f"1bit bench: round {r + 1}/{rounds} {c.name}: prompt "
                      f"{statistics.median(c.prompt_tps):.1f} tok/s, decode "
                      f"{statistics.median(c.decode_tps):.1f} tok/s", file=sys.stderr, flush=True)
    finally:
        if lock is not None:
            lock.close()
    print(table(configs))
    if json_path:
        Path(json_path).write_text(json.dumps({
            "model": model, "rounds": rounds, "prompt_reps": prompt_reps,
            "decode_reps": decode_reps, "decode_tokens": decode_tokens,
            "configs": [{"name": c.name, "args": c.args, "prompt_tps": c.prompt_tps,
                         "decode_tps": c.decode_tps} for c in configs],
        }, indent=1))
    return 0


def _take_lock(path: str):
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunError(f"another bench holds the lock {path}: wait for it, or use another --lock")
    return handle
