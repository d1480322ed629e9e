"""Many streams at once: aggregate decode tok/s, per-stream tok/s and time to first token by the
number of concurrent streams.

At each level N, a burst sends N streamed completions at once and waits for all of them. Each
prompt is exactly `prompt_tokens` tokens (tokenized by the executor, like `--e2e`), a different
window of one fixed text per stream so no two prompts share more than the first token; generation
runs to `decode_tokens` (`ignore_eos`), without prompt cache. A warm-up burst at each level, not
counted, comes first (it lets CUDA capture its graphs for that batch size and opens the
connections). The streams go over aiohttp on one event loop, as serve's own client does; a stream
is timed from its send to the arrival of each event that carries text.

- aggregate decode tok/s: every stream's tokens after its first, over the span from the first
  stream's first token to the last stream's last token (llama-batched-bench's S_TG as the clients
  see it, with the later streams' prefill and the last streams' tail inside the span);
- steady decode tok/s: the tokens that arrived while every stream of the burst was generating
  (from the last stream's first token to the first stream's last), over that span: the rate with
  no prompt being prefilled beside the decode, as llama-batched-bench's S_TG has none (its prompts
  are all processed before its decode is timed). None where that span is empty;
- aggregate tok/s: every generated token over the burst's wall time, prefill and queueing
  included;
- per-stream tok/s: a stream's tokens after its first over its own first-to-last span (median
  over the streams);
- TTFT: send to first token of every stream of the level (p50 and p95 over all bursts).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

from lemonade_onebit import httpclient
from lemonade_onebit.bench.common import COMMON, Config, Progress, shown_args
from lemonade_onebit.bench.e2e import prompt_ids
from lemonade_onebit.errors import RunError

WARMUP_TOKENS = 8


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def prompts(ids: list[int], length: int, count: int) -> list[list[int]]:
    """`count` prompts of `length` tokens: the first token (BOS where the model has one), then
    a window of the text shifted by one token per stream."""
    if len(ids) < length + count:
        raise RunError(f"the prompt text has {len(ids)} tokens, fewer than {length + count}")
    return [[ids[0], *ids[1 + k:length + k]] for k in range(count)]


async def _stream(session, url: str, ids: list[int], max_tokens: int,
                  sampling: dict | None = None) -> dict:
    body = {"prompt": ids, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **COMMON,
            **(sampling or {})}
    sent = time.perf_counter()
    arrivals: list[float] = []  # of each event that carries text
    usage: dict = {}
    buf = b""
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise RunError(f"/v1/completions answered {resp.status}: {(await resp.read())[:200]!r}")
        if not body["stream"]:  # one reply: its time is the whole request's, no decode span
            reply = await resp.json()
            end = time.perf_counter()
            return {"sent": sent, "first": end, "last": end, "end": end, "streamed": False,
                    "tokens": reply["usage"]["completion_tokens"], "ttft_ms": (end - sent) * 1000,
                    "tps": None}
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            buf += chunk
            *events, buf = buf.split(b"\n\n")
            for event in events:
                data = event.strip()
                if not data.startswith(b"data:") or data[5:].strip() == b"[DONE]":
                    continue
                payload = json.loads(data[5:])
                choices = payload.get("choices") or []
                if choices and choices[0].get("text"):
                    arrivals.append(now)
                usage = payload.get("usage") or usage
    end = time.perf_counter()
    if not arrivals:
        raise RunError("a stream carried no token")
    first, last = arrivals[0], arrivals[-1]
    tokens = usage.get("completion_tokens", len(arrivals))
    span = last - first
    return {"sent": sent, "first": first, "last": last, "end": end, "tokens": tokens,
            "arrivals": arrivals, "streamed": True, "ttft_ms": (first - sent) * 1000,
            "tps": (tokens - 1) / span if tokens > 1 and span > 0 else None}


def steady_rate(streams: list[dict]) -> float | None:
    """Tokens per second while every stream was generating: those that arrived after the last
    stream's first token and up to the first stream's last one. An event may carry more than one
    token (or a token none), so each stream's events count as its tokens over its events."""
    if not all(s["streamed"] for s in streams):
        return None
    all_on, one_done = max(s["first"] for s in streams), min(s["last"] for s in streams)
    if one_done <= all_on:
        return None
    inside = sum(s["tokens"] / len(s["arrivals"]) * sum(all_on < t <= one_done for t in s["arrivals"])
                 for s in streams)
    return inside / (one_done - all_on)


async def _burst(session, urls: list[str], batch: list[list[int]], max_tokens: int,
                 sampling: dict | None = None) -> dict:
    """Stream k of the burst goes to urls[k % len(urls)]."""
    start = time.perf_counter()
    streams = await asyncio.gather(*(_stream(session, urls[k % len(urls)], ids, max_tokens,
                                             sampling) for k, ids in enumerate(batch)))
    first = min(s["first"] for s in streams)
    last = max(s["last"] for s in streams)
    after_first = sum(s["tokens"] - 1 for s in streams)
    wall = max(s["end"] for s in streams) - start
    return {
        "streams": len(batch), "tokens": sum(s["tokens"] for s in streams),
        "wall_s": wall, "aggregate_tps": sum(s["tokens"] for s in streams) / wall,
        "decode_tps": after_first / (last - first)
        if last > first and all(s["streamed"] for s in streams) else None,
        "steady_tps": steady_rate(streams),
        "stream_tps": [s["tps"] for s in streams], "ttft_ms": [s["ttft_ms"] for s in streams],
    }


async def _levels(urls: list[str], config: Config, batches: dict[int, list[list[int]]],
                  bursts: int, decode_tokens: int, round_index: int, progress: Progress,
                  headers: dict | None = None, force_close: bool = False,
                  sampling: dict | None = None) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    connector = aiohttp.TCPConnector(limit=0, force_close=force_close)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers=headers) as session:
        for level, batch in batches.items():
            await _burst(session, urls, batch, min(decode_tokens, WARMUP_TOKENS), sampling)
            for i in range(bursts):
                sample = await _burst(session, urls, batch, decode_tokens, sampling)
                config.samples("bursts").append({"round": round_index + 1, **sample})
                progress.step(f"{config.name}: {level} streams, burst {i + 1}/{bursts}")


def slots_of(url: str, headers: dict | None = None) -> dict:
    """The executor's slots and the context of each, as llama-server's `/props` reports them."""
    try:
        props = httpclient.get_json(url + "/props", timeout=10, headers=headers)
        return {"slots": props.get("total_slots"),
                "n_ctx": props["default_generation_settings"]["n_ctx"]}
    except (OSError, httpclient.HTTPError, RunError, KeyError, TypeError):
        return {"slots": None, "n_ctx": None}


def measure(url: str, config: Config, levels: list[int], bursts: int, prompt_tokens: int,
            decode_tokens: int, round_index: int, progress: Progress,
            headers: dict | None = None, force_close: bool = False,
            spread: list[str] | None = None, sampling: dict | None = None) -> None:
    """`spread`: more servers of the same model; a burst's streams go round-robin over `url` and
    these. `sampling`: request fields over the greedy default (e.g. {"temperature": 0.8}).
    `headers` go with every request (e.g. an executor's own key, to measure it directly);
    `force_close`: a new connection per stream (llama-server may close a kept-alive connection
    just as the client reuses it, which aiohttp reports as "Server disconnected")."""
    server = slots_of(url, headers)
    config.samples("servers").append({"round": round_index + 1, **server})
    if server["n_ctx"] and prompt_tokens + decode_tokens > server["n_ctx"]:
        raise RunError(f"prompt {prompt_tokens} + {decode_tokens} generated tokens do not fit a "
                       f"slot's context of {server['n_ctx']}: pass a larger -c in the config, or "
                       "fewer tokens")
    ids = prompt_ids(url, [prompt_tokens + max(levels)], headers)
    batches = {level: prompts(ids, prompt_tokens, level) for level in levels}
    import aiohttp

    try:
        asyncio.run(_levels([url, *(spread or [])], config, batches, bursts, decode_tokens,
                            round_index, progress, headers, force_close, sampling))
    except aiohttp.ClientError as exc:
        raise RunError(f"a stream failed: {exc}") from None


def levels_of(config: Config) -> list[int]:
    return sorted({b["streams"] for b in config.data.get("bursts", [])})


def stats(config: Config, level: int) -> dict[str, float]:
    """Medians over the level's bursts; TTFT percentiles and the per-stream median over all of
    its streams."""
    bursts = [b for b in config.data["bursts"] if b["streams"] == level]
    ttft = [t for b in bursts for t in b["ttft_ms"]]
    per_stream = [t for b in bursts for t in b["stream_tps"] if t is not None]
    decode = [b["decode_tps"] for b in bursts if b["decode_tps"] is not None]
    steady = [b["steady_tps"] for b in bursts if b.get("steady_tps") is not None]
    return {  # None: every stream of the level was one token long
        "decode_tps": statistics.median(decode) if decode else float("nan"),
        "steady_tps": statistics.median(steady) if steady else float("nan"),
        "aggregate_tps": statistics.median(b["aggregate_tps"] for b in bursts),
        "stream_tps": statistics.median(per_stream) if per_stream else float("nan"),
        "ttft_p50_ms": percentile(ttft, 0.5), "ttft_p95_ms": percentile(ttft, 0.95),
        "bursts": len(bursts),
    }


def slots_seen(config: Config) -> str:
    seen = sorted({(s["slots"], s["n_ctx"]) for s in config.data.get("servers", [])},
                  key=lambda pair: (pair[0] or 0, pair[1] or 0))
    return ", ".join(f"{slots} x {n_ctx}" if slots else "?" for slots, n_ctx in seen) or "?"


def summary(config: Config) -> str:
    return ", ".join(f"{level} streams: {stats(config, level)['decode_tps']:.0f} tok/s"
                     for level in levels_of(config))


def table(configs: list[Config]) -> str:
    base = configs[0]
    rows = ["| config | args | slots x ctx | streams | aggregate decode tok/s | vs "
            f"{base.name} | steady decode tok/s | per-stream tok/s | TTFT p50 ms | TTFT p95 ms "
            "| aggregate tok/s |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in configs:
        for level in levels_of(c):
            m = stats(c, level)
            ratio = ""
            if c is not base and level in levels_of(base):
                ratio = f"{m['decode_tps'] / stats(base, level)['decode_tps']:.2f}"
            rows.append(f"| {c.name} | {shown_args(c.args)} | {slots_seen(c)} | {level} | "
                        f"{m['decode_tps']:.1f} | {ratio} | {m['steady_tps']:.1f} | "
                        f"{m['stream_tps']:.1f} | "
                        f"{m['ttft_p50_ms']:.0f} | {m['ttft_p95_ms']:.0f} | "
                        f"{m['aggregate_tps']:.1f} |")
    return "\n".join(rows)
