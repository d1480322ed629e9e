"""The onnx route's server against plain ONNX Runtime GenAI: same model, same prompt, one run.

Plain generation is the library's own loop (append the prompt, generate and decode token by token)
in this process; the server is `1bit serve --device onnx` (our `onebit-onnx-server` behind serve),
streamed. Rounds interleave the two. Reports decode tok/s (first to last token) for both, the
server's own `timings.predicted_per_second`, and the ratios. Usage:

    .venv/bin/python bench/onnx_speed.py MODEL_DIR [--rounds 7] [--tokens 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from overhead import free_port, wait_health  # noqa: E402

from lemonade_onebit import httpclient  # noqa: E402
from lemonade_onebit.bench.common import exit_on_sigterm, start, stop  # noqa: E402

PROMPT = [{"role": "user", "content": "Explain how a B-tree insert works, step by step."}]


def plain(og, model, tokenizer, n: int) -> float:
    ids = tokenizer.encode(tokenizer.apply_chat_template(json.dumps(PROMPT),
                                                         add_generation_prompt=True))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + n, min_length=len(ids) + n, do_sample=False)
    generator = og.Generator(model, params)
    stream = tokenizer.create_stream()
    generator.append_tokens(ids)
    stamps = []
    while not generator.is_done():
        generator.generate_next_token()
        stream.decode(generator.get_next_tokens()[0])
        stamps.append(time.perf_counter())
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def served(url: str, n: int) -> tuple[float, float]:
    body = json.dumps({"messages": PROMPT, "max_tokens": n, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    stamps, timings = [], None
    conn, resp = httpclient.open_response("POST", url + "/v1/chat/completions", body,
                                          {"Content-Type": "application/json"}, timeout=600)
    with closing(conn):
        for line in resp:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if "timings" in event:
                timings = event["timings"]
            elif event["choices"] and event["choices"][0]["delta"].get("content"):
                stamps.append(time.perf_counter())
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), timings["predicted_per_second"]


def main() -> int:
    import onnxruntime_genai as og

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    model = og.Model(args.model)
    tokenizer = og.Tokenizer(model)
    port = free_port()
    exit_on_sigterm()
    serve = start([str(Path(sys.executable).parent / "1bit"), "serve", "-m", args.model,
                   "--device", "onnx", "--port", str(port)], subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, serve)
        plain(og, model, tokenizer, 8), served(url, 8)  # warm-up
        rows = []
        for r in range(args.rounds):
            pair = {}
            for side in (("plain", "serve") if r % 2 == 0 else ("serve", "plain")):
                if side == "plain":
                    pair["plain"] = plain(og, model, tokenizer, args.tokens)
                else:
                    pair["serve"], pair["server_timings"] = served(url, args.tokens)
            rows.append(pair)
            print(f"round {r + 1}: plain {pair['plain']:.1f}, served {pair['serve']:.1f}, "
                  f"server timings {pair['server_timings']:.1f} tok/s", file=sys.stderr)
    finally:
        stop(serve)
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    ratio = statistics.median(row["serve"] / row["plain"] for row in rows)
    inner = statistics.median(row["server_timings"] / row["plain"] for row in rows)
    print(f"| model | plain onnxruntime_genai | through `1bit serve` (client) | server's own timings "
          f"| ratio client/plain | ratio server/plain |\n|---|---|---|---|---|---|\n"
          f"| `{Path(args.model).name}` | {med['plain']:.1f} | {med['serve']:.1f} | "
          f"{med['server_timings']:.1f} | {ratio:.3f} | {inner:.3f} |")
    print(f"\n{args.rounds} rounds, {args.tokens}-token greedy decodes, medians; ratios are medians "
          "of per-round pairs.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
