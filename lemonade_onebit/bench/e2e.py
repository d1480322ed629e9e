"""Time to first token, decode rate and end-to-end time by prompt length, streamed.

Each prompt is exactly the asked number of tokens: a fixed text is tokenized by the executor
(`/tokenize`, special tokens included) and cut, and the token ids are sent as the prompt of
`/v1/completions`, so nothing is added or merged on the way. Generation runs to `--decode-tokens`
(`ignore_eos`), without prompt cache. The executor's own count of prompt tokens is checked
against the length asked for. Effective tok/s = N / (TTFT + (N - 1) / decode rate).
"""

from __future__ import annotations

import json
import statistics
import time

from lemonade_onebit import httpclient
from lemonade_onebit.bench.common import COMMON, Config, Progress, post, shown_args
from lemonade_onebit.errors import RunError

METRICS = (("ttft_ms", "TTFT ms", "{:.0f}"), ("decode_tps", "decode tok/s", "{:.1f}"),
           ("e2e_ms", "end to end ms", "{:.0f}"), ("effective_tps", "effective tok/s", "{:.1f}"))


def source_text(paragraphs: int) -> str:
    return "\n".join(
        f"Entry {i}. On day {i * 7 % 31 + 1} the harbour master logged vessel number {i}, "
        f"carrying {i * 13 % 97} crates of {('salt', 'timber', 'wool', 'copper')[i % 4]}, "
        f"and assigned it berth {i % 17} after checking the evening tide."
        for i in range(paragraphs))


def prompt_ids(url: str, lengths: list[int], headers: dict | None = None) -> list[int]:
    """Token ids of a fixed text, at least max(lengths) of them, by the executor's tokenizer."""
    need, paragraphs = max(lengths), 64
    while True:
        try:
            tokens = post(url, "/tokenize", {"content": source_text(paragraphs),
                                             "add_special": True}, headers)["tokens"]
        except (OSError, httpclient.HTTPError) as exc:
            raise RunError(
                f"--e2e needs the executor's /tokenize (llama-server routes): {exc}") from None
        if len(tokens) >= need:
            return tokens
        paragraphs *= 2


def context_size(url: str) -> int | None:
    try:
        return httpclient.get_json(url + "/props", timeout=10)["default_generation_settings"]["n_ctx"]
    except (OSError, httpclient.HTTPError, RunError, KeyError, TypeError):
        return None


def stream_once(url: str, ids: list[int], max_tokens: int) -> dict:
    """One streamed completion; client-side times and the executor's counts."""
    body = json.dumps({"prompt": ids, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "ignore_eos": True,
                       "stream_options": {"include_usage": True}, **COMMON}).encode()
    start = time.perf_counter()
    conn, resp = httpclient.open_response("POST", url + "/v1/completions", body,
                                          {"Content-Type": "application/json"}, timeout=600)
    if resp.status != 200:
        raise RunError(f"/v1/completions answered {resp.status}: {resp.read()[:200]!r}")
    first = last = None
    chunks = 0
    timings: dict = {}
    usage: dict = {}
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("choices"):
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
        timings = event.get("timings") or timings
        usage = event.get("usage") or usage
    end = time.perf_counter()
    conn.close()
    if first is None or last is None:
        raise RunError("the stream carried no token")
    prompt_n = timings.get("prompt_n", usage.get("prompt_tokens"))
    generated = timings.get("predicted_n", usage.get("completion_tokens", chunks))
    decode = timings.get("predicted_per_second")
    if not decode:
        decode = (chunks - 1) / (last - first) if chunks > 1 and last > first else float("nan")
    ttft = first - start
    return {"prompt_n": prompt_n, "generated": generated, "ttft_ms": ttft * 1000,
            "decode_tps": decode, "e2e_ms": (end - start) * 1000,
            "effective_tps": generated / (ttft + (generated - 1) / decode)}


def measure(url: str, config: Config, lengths: list[int], reps: int, decode_tokens: int,
            progress: Progress) -> None:
    ids = prompt_ids(url, lengths)
    n_ctx = context_size(url)
    if n_ctx and max(lengths) + decode_tokens > n_ctx:
        raise RunError(f"prompt {max(lengths)} + {decode_tokens} generated tokens do not fit the "
                       f"context of {n_ctx}: pass a larger -c in the config, or shorter lengths")
    stream_once(url, ids[:min(lengths)], 4)  # warm-up
    for length in lengths:
        for i in range(reps):
            sample = stream_once(url, ids[:length], decode_tokens)
            if sample["prompt_n"] is not None and sample["prompt_n"] != length:
                raise RunError(f"asked for a {length}-token prompt, the executor counted "
                               f"{sample['prompt_n']}")
            config.samples("runs").append({"prompt_tokens": length, **sample})
            progress.step(f"{config.name}: {length}-token prompt {i + 1}/{reps}")


def medians(config: Config, length: int) -> dict[str, float]:
    runs = [r for r in config.data["runs"] if r["prompt_tokens"] == length]
    return {key: statistics.median(r[key] for r in runs) for key, _, _ in METRICS}


def summary(config: Config) -> str:
    lengths = sorted({r["prompt_tokens"] for r in config.data["runs"]})
    return ", ".join(f"{n} tokens: TTFT {medians(config, n)['ttft_ms']:.0f} ms" for n in lengths)


def table(configs: list[Config]) -> str:
    head = " | ".join(label for _, label, _ in METRICS)
    rows = [f"| config | args | prompt tokens | {head} |", "|---|---|---:|" + "---:|" * len(METRICS)]
    for c in configs:
        for length in sorted({r["prompt_tokens"] for r in c.data["runs"]}):
            m = medians(c, length)
            cells = " | ".join(fmt.format(m[key]) for key, _, fmt in METRICS)
            rows.append(f"| {c.name} | {shown_args(c.args)} | {length} | {cells} |")
    return "\n".join(rows)
