"""Time from start to first token: llama-server started directly against `1bit serve`, interleaved.

Both with the model file in the page cache. Each start is polled on `/health` every 5 ms, then one
1-token chat request is sent. Serve's share is the difference of the medians. Usage:

    .venv/bin/python bench/start_to_first_token.py [--model M] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from lemonade_onebit.backends.llamacpp import CpuLauncher  # noqa: E402
from lemonade_onebit.config import ServeConfig  # noqa: E402
from lemonade_onebit.modelref import resolve_model  # noqa: E402
from lemonade_onebit.serve import free_port  # noqa: E402
from overhead import wait_health  # noqa: E402


def start_to_first_token(argv: list[str], port: int) -> tuple[float, float]:
    url = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_health(url, proc, interval=0.005)
        ready = time.perf_counter()
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req).read()
        first = time.perf_counter()
    finally:
        proc.terminate()
        proc.wait()
    return (ready - start) * 1000, (first - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="SmolLM2-135M-Instruct-1bit")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    model = resolve_model(args.model)
    launcher = CpuLauncher()
    executor = launcher.installed_executor()
    onebit = str(Path(sys.executable).parent / "1bit")
    samples: dict[str, list[tuple[float, float]]] = {"direct": [], "serve": []}
    for r in range(args.rounds):
        for side in (("direct", "serve") if r % 2 == 0 else ("serve", "direct")):
            port = free_port()
            argv = (launcher.argv(executor, model, port, ServeConfig(model=args.model))
                    if side == "direct" else
                    [onebit, "serve", "-m", args.model, "--port", str(port)])
            samples[side].append(start_to_first_token(argv, port))
    med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for s, v in samples.items()}
    print("| start (page cache warm) | llama-server direct | `1bit serve` | serve's share |")
    print("|---|---|---|---|")
    print(f"| to `/health` 200 (ms) | {med['direct'][0]:.0f} | {med['serve'][0]:.0f} | "
          f"+{med['serve'][0] - med['direct'][0]:.0f} |")
    print(f"| to first token (ms) | {med['direct'][1]:.0f} | {med['serve'][1]:.0f} | "
          f"+{med['serve'][1] - med['direct'][1]:.0f} |")
    print(f"\n{args.model}, {args.rounds} rounds interleaved, medians.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
