"""The step timings a llama-server built with bench/gpu/patches/step-timings.patch logged, from the
serve logs of a `bench/gpu/concurrency.sh` run (its logs.tar.gz, unpacked): per config and batch
size, the median over rounds of each part of a decode step, as a markdown table (or `--json`).

    python3 bench/gpu/step_timings.py LOGS_DIR [--json]

A log is `CONFIG-roundN.log` (`1bit bench`'s) or `serve-CONFIG-N-I.log` (bench/gpu/step_probe.py's,
round N, replica I: a round's replicas count as one round; run it with `--sides serve` for timings
of the serve side alone). Its lines `step-timings: batch B steps N loop L pre P decode D post Q
sampl S ms` are what the patch prints every 5 seconds and at the end of each burst (several per
round are summed, weighted by their steps).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

LINE = re.compile(r"step-timings: batch (\d+) steps (\d+) loop ([\d.]+) pre ([\d.]+) "
                  r"decode ([\d.]+) post ([\d.]+) sampl ([\d.]+) ms")
LOGS = (re.compile(r"(.+)-round(\d+)\.log"), re.compile(r"serve-(.+)-(\d+)-\d+\.log"))
PARTS = ("loop", "pre", "decode", "post", "sampl")


def read(logs: Path) -> dict[str, dict[int, list[dict[str, float]]]]:
    """config -> batch -> one entry per round (the logs of a round's replicas together): the
    step-weighted mean of each part, in ms."""
    rounds: dict[tuple[str, int], dict[int, list[tuple[int, list[float]]]]] = {}
    for log in sorted(logs.glob("*.log")):
        match = next((m for m in (pattern.fullmatch(log.name) for pattern in LOGS) if m), None)
        if not match:
            continue
        by_batch = rounds.setdefault((match[1], int(match[2])), {})
        for line in log.read_text(errors="replace").splitlines():
            hit = LINE.search(line)
            if hit:
                batch, steps = int(hit[1]), int(hit[2])
                by_batch.setdefault(batch, []).append((steps, [float(x) for x in hit.groups()[2:]]))
    found: dict[str, dict[int, list[dict[str, float]]]] = {}
    for (config, _), by_batch in sorted(rounds.items()):
        for batch, reports in by_batch.items():
            total = sum(steps for steps, _ in reports)
            mean = {part: sum(steps * values[i] for steps, values in reports) / total
                    for i, part in enumerate(PARTS)}
            mean["steps"] = total
            found.setdefault(config, {}).setdefault(batch, []).append(mean)
    return found


def table(found: dict[str, dict[int, list[dict[str, float]]]]) -> str:
    rows = ["| config | batch | rounds | step (loop) ms | building the batch | decode (synchronized) "
            "| after the decode | of which sampling | rest of the loop |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for config, batches in found.items():
        for batch in sorted(batches):
            rounds = batches[batch]
            med = {part: statistics.median(r[part] for r in rounds) for part in PARTS}
            rest = med["loop"] - med["pre"] - med["decode"] - med["post"]
            rows.append(f"| {config} | {batch} | {len(rounds)} | {med['loop']:.2f} | {med['pre']:.3f} "
                        f"| {med['decode']:.2f} | {med['post']:.2f} | {med['sampl']:.2f} | {rest:.2f} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", type=Path, help="the serve logs of a concurrency.sh run")
    parser.add_argument("--json", action="store_true", help="per round, as JSON")
    args = parser.parse_args()
    if not args.logs.is_dir():
        print(f"step_timings.py: {args.logs} is not a folder", file=sys.stderr)
        return 2
    found = read(args.logs)
    if not found:
        print(f"step_timings.py: no step-timings lines in {args.logs}/*-roundN.log or "
              "serve-*-N-I.log (was "
              "llama-server built with bench/gpu/patches/step-timings.patch?)", file=sys.stderr)
        return 1
    print(json.dumps(found, indent=1) if args.json else table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
