"""`1bit pull` against `curl` from the same local hub server, interleaved.

A generated 100 MB GGUF is served by `tests/hubserver.py` (the local Hugging Face-compatible hub
the tests use). Each round downloads it with `curl -o FILE` and with `1bit pull` into an empty
cache, in alternating order. Reported: the transfer rate (curl's `speed_download`; pull's bytes
over the time of its transfers, which includes the sha256 it computes as the bytes arrive) and
the whole command's time (pull's includes Python's start, listing the repo and resolving the file).
Usage:

    .venv/bin/python bench/pull_speed.py [--mb 100] [--rounds 7] [--rate-mb 200] [--json F]
        [--pull-tree NAME=DIR]   # also `1bit pull` from another checkout, e.g. an earlier commit
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hubserver import Hub  # noqa: E402

REPO, FILE = "bench/speed-GGUF", "speed-Q4_0.gguf"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rate-mb", type=float, metavar="MB/S",
                        help="limit the server to this rate, like a network link")
    parser.add_argument("--json", metavar="F")
    parser.add_argument("--pull-tree", action="append", default=[], metavar="NAME=DIR",
                        help="another side: `1bit pull` from the checkout DIR (e.g. a `git "
                             "worktree` of an earlier commit), measured in the same run")
    args = parser.parse_args()
    trees = {"pull": None}
    for spec in args.pull_tree:
        name, _, tree = spec.partition("=")
        trees[name] = Path(tree).resolve()
    sides = ["curl", *trees]
    work = Path(tempfile.mkdtemp(prefix="1bit-pull-speed-"))
    source = work / FILE
    with open(source, "wb") as out:
        out.write(b"GGUF\x03\x00\x00\x00")
        out.write(os.urandom(args.mb * 1_000_000 - 8))
    hub = Hub(work / "hub").start()
    hub.rate = args.rate_mb * 1e6 if args.rate_mb else None
    hub.add(REPO, FILE, source)
    size = source.stat().st_size
    url = f"{hub.url}/{REPO}/resolve/main/{FILE}"
    onebit = str(Path(sys.executable).parent / "1bit")
    samples: dict[str, list[dict]] = {side: [] for side in sides}
    try:
        for r in range(args.rounds):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                cache = work / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir()
                start = time.perf_counter()
                if side == "curl":
                    out = subprocess.run(["curl", "-sS", "-o", str(cache / FILE), "-w",
                                          "%{speed_download}", url], capture_output=True,
                                         text=True, check=True)
                    wall = time.perf_counter() - start
                    rate = float(out.stdout)
                else:
                    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache),
                           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}
                    argv = [onebit]
                    if trees[side] is not None:
                        argv = [sys.executable, "-m", "lemonade_onebit"]
                        env["PYTHONPATH"] = os.pathsep.join(
                            filter(None, [str(trees[side]), os.environ.get("PYTHONPATH")]))
                    out = subprocess.run([*argv, "pull", f"{REPO}:Q4_0", "--json"],
                                         capture_output=True, text=True, env=env, check=True,
                                         cwd=trees[side])
                    wall = time.perf_counter() - start
                    report = json.loads(out.stdout)
                    assert report["downloaded_bytes"] == size
                    rate = size / report["download_seconds"]
                samples[side].append({"rate_mb_s": rate / 1e6, "wall_s": wall})
    finally:
        hub.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {s: {k: statistics.median(x[k] for x in v) for k in ("rate_mb_s", "wall_s")}
           for s, v in samples.items()}
    pulls = sides[1:]
    names = {"pull": "`1bit pull`"}
    link = f", server limited to {args.rate_mb:g} MB/s" if args.rate_mb else ""
    print(f"| download of a {args.mb} MB file{link} | curl | "
          + " | ".join(names.get(p, p) for p in pulls) + " | "
          + " | ".join(f"{p} / curl" for p in pulls) + " |")
    print("|---|" + "---:|" * (1 + 2 * len(pulls)))
    for key, label, fmt in (("rate_mb_s", "transfer rate (MB/s)", "{:.0f}"),
                            ("wall_s", "whole command (s)", "{:.2f}")):
        print(f"| {label} | " + " | ".join(fmt.format(med[s][key]) for s in sides) + " | "
              + " | ".join(f"{med[p][key] / med['curl'][key]:.2f}" for p in pulls) + " |")
    for p in pulls:
        paired = statistics.median(a["rate_mb_s"] / c["rate_mb_s"]
                                   for a, c in zip(samples[p], samples["curl"]))
        print(f"\n{names.get(p, p)}: the median of each round's transfer rate over curl's is "
              f"{paired:.2f}.")
    print(f"\n{args.rounds} rounds interleaved, medians.")
    if args.json:
        Path(args.json).write_text(json.dumps({"mb": args.mb, "rounds": args.rounds,
                                               "rate_mb_s": args.rate_mb,
                                               "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
