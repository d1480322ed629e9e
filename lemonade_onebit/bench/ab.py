"""Prompt and decode speed per config, from llama-server's `timings`.

A warm-up request, then prompt speed on a fixed ~8,000-character text (max_tokens 8) and decode
speed on three fixed prompts (code, prose, short; temperature 0).
"""

from __future__ import annotations

import statistics

from lemonade_onebit.bench.common import COMMON, Config, Progress, post, shown_args

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
METRICS = (("prompt_tps", "prompt tok/s"), ("decode_tps", "decode tok/s"))


def steps(prompt_reps: int, decode_reps: int) -> int:
    return prompt_reps + decode_reps * len(DECODE_PROMPTS)


def chat(url: str, text: str, max_tokens: int) -> dict:
    return post(url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
        "temperature": 0, **COMMON})


def measure(url: str, config: Config, prompt_reps: int, decode_reps: int, decode_tokens: int,
            progress: Progress) -> None:
    chat(url, "Hello.", 4)
    for i in range(prompt_reps):
        reply = chat(url, PROMPT_TEXT, 8)
        config.samples("prompt_tps").append(reply["timings"]["prompt_per_second"])
        progress.step(f"{config.name}: prompt {i + 1}/{prompt_reps}")
    n = decode_reps * len(DECODE_PROMPTS)
    for i in range(n):
        text = list(DECODE_PROMPTS.values())[i % len(DECODE_PROMPTS)]
        reply = chat(url, text, decode_tokens)
        config.samples("decode_tps").append(reply["timings"]["predicted_per_second"])
        progress.step(f"{config.name}: decode {i + 1}/{n}")


def summary(config: Config) -> str:
    return (f"prompt {statistics.median(config.data['prompt_tps']):.1f} tok/s, decode "
            f"{statistics.median(config.data['decode_tps']):.1f} tok/s")


def cell(values: list[float], base_values: list[float] | None) -> str:
    """`best / median`, and the median's change against the baseline's median."""
    text = f"{max(values):.1f} / {statistics.median(values):.1f}"
    if base_values is not None:
        text += f" ({(statistics.median(values) / statistics.median(base_values) - 1) * 100:+.1f}%)"
    return text


def table(configs: list[Config]) -> str:
    base = configs[0]
    head = " | ".join(f"{label} (best / median)" for _, label in METRICS)
    rows = [f"| config | args | {head} |", "|---|---|" + "---|" * len(METRICS)]
    for c in configs:
        cells = " | ".join(cell(c.data[key], None if c is base else base.data[key])
                           for key, _ in METRICS)
        rows.append(f"| {c.name} | {shown_args(c.args)} | {cells} |")
    return "\n".join(rows)
