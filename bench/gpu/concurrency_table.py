"""The tables of `docs/cuda-route.md` from a `1bit bench --concurrency` JSON file and the
`llama-batched-bench --output-format jsonl` output of the same build and file (the ceiling):

    python bench/gpu/concurrency_table.py concurrency.json --ceiling batched-bench.jsonl \
        [--ceiling-kvu batched-bench-kvu.jsonl] [--base defaults]

Prints markdown: aggregate decode tok/s by streams for every config against the ceiling; the
targets (32 streams at >= 0.9 of the ceiling's batch 32, one stream at >= 0.98 of the base
config); and every config's row per level (per-stream tok/s, TTFT p50/p95, slots).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.bench.common import Config, shown_args  # noqa: E402
from lemonade_onebit.bench.concurrency import levels_of, slots_seen, stats  # noqa: E402

TARGET_CEILING = 0.9  # 32 streams: this share of llama-batched-bench's batch-32 decode
TARGET_SINGLE = 0.98  # 1 stream: this share of the base config's


def ceiling(path: Path | None) -> dict[int, float]:
    """llama-batched-bench's decode tok/s (S_TG) by batch size, from its jsonl lines."""
    if path is None or not path.is_file():
        return {}
    found = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            row = json.loads(line)
            found[int(row["pl"])] = float(row["speed_tg"])
    return found


def load(path: Path) -> tuple[dict, list[Config]]:
    data = json.loads(path.read_text())
    configs = []
    for c in data["configs"]:
        config = Config(c["name"], c["args"])
        config.data = {k: v for k, v in c.items() if k not in ("name", "args")}
        configs.append(config)
    return data, configs


def _n(x: float) -> str:
    return f"{x:,.0f}" if x == x else "-"


def rate_table(configs: list[Config], top: dict[int, float], top_kvu: dict[int, float]) -> str:
    levels = sorted({n for c in configs for n in levels_of(c)})
    head = ["streams", "llama-batched-bench"] + (["batched-bench -kvu"] if top_kvu else [])
    head += [c.name for c in configs]
    rows = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for n in levels:
        cells = [str(n), _n(top.get(n, float("nan")))]
        if top_kvu:
            cells.append(_n(top_kvu.get(n, float("nan"))))
        for c in configs:
            if n not in levels_of(c):
                cells.append("-")
                continue
            rate = stats(c, n)["decode_tps"]
            share = f" ({rate / top[n]:.2f})" if n in top else ""
            cells.append(f"{_n(rate)}{share}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def target_table(configs: list[Config], base: Config, top: dict[int, float]) -> str:
    rows = ["| config | 32 streams / batched-bench batch 32 (>= 0.9) | 32 streams / "
            f"{base.name} | 1 stream / {base.name} (>= 0.98) | TTFT p95 at 32 streams ms |",
            "|---|---:|---:|---:|---:|"]

    def ratio(c: Config, n: int, other: float | None, goal: float | None) -> str:
        if n not in levels_of(c) or not other:
            return "-"
        value = stats(c, n)["decode_tps"] / other
        return f"{value:.2f}" + ("" if goal is None else " met" if value >= goal else " missed")

    for c in configs:
        base32 = stats(base, 32)["decode_tps"] if 32 in levels_of(base) else None
        base1 = stats(base, 1)["decode_tps"] if 1 in levels_of(base) else None
        ttft = f"{stats(c, 32)['ttft_p95_ms']:.0f}" if 32 in levels_of(c) else "-"
        rows.append(f"| {c.name} | {ratio(c, 32, top.get(32), TARGET_CEILING)} | "
                    f"{ratio(c, 32, base32, None) if c is not base else '1.00'} | "
                    f"{ratio(c, 1, base1, TARGET_SINGLE) if c is not base else '1.00'} | {ttft} |")
    return "\n".join(rows)


def detail_table(configs: list[Config]) -> str:
    rows = ["| config | args after the route's | slots x ctx | streams | aggregate decode tok/s | "
            "per-stream tok/s | TTFT p50 ms | TTFT p95 ms | aggregate tok/s (prefill included) |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for c in configs:
        for n in levels_of(c):
            m = stats(c, n)
            rows.append(f"| {c.name} | {shown_args(_own(c.args))} | {slots_seen(c)} | {n} | "
                        f"{_n(m['decode_tps'])} | {m['stream_tps']:.1f} | {m['ttft_p50_ms']:.0f} "
                        f"| {m['ttft_p95_ms']:.0f} | {_n(m['aggregate_tps'])} |")
    return "\n".join(rows)


def _own(args: list[str]) -> list[str]:
    """A config's arguments without the `--device cuda --llama-server PATH` every one shares."""
    out, skip = [], 0
    for arg in args:
        if skip:
            skip -= 1
        elif arg in ("--device", "--llama-server"):
            skip = 1
        else:
            out.append(arg)
    return out


def render(path: Path, top: dict[int, float], top_kvu: dict[int, float], base_name: str) -> str:
    data, configs = load(path)
    configs = [c for c in configs if c.data.get("bursts")]
    if not configs:
        raise SystemExit(f"{path}: no config has a measured burst")
    base = next((c for c in configs if c.name == base_name), configs[0])
    bursts = data.get("bursts")
    head = (f"{data.get('rounds_done', data.get('rounds'))} rounds interleaved, {bursts} bursts per "
            f"level and round after a warm-up burst; each stream a {data.get('prompt_tokens')}-"
            f"token prompt and {data.get('decode_tokens')} generated tokens. Aggregate decode "
            "tok/s: median over bursts (in brackets: its share of llama-batched-bench's S_TG at "
            f"that batch, `-fa on -npp {data.get('prompt_tokens')} -ntg "
            f"{data.get('decode_tokens')}`, same file and build).")
    return "\n\n".join([head, rate_table(configs, top, top_kvu), target_table(configs, base, top),
                        detail_table(configs)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", type=Path, help="the `1bit bench --concurrency --json` file")
    parser.add_argument("--ceiling", type=Path, help="llama-batched-bench's jsonl output")
    parser.add_argument("--ceiling-kvu", type=Path, help="the same with -kvu")
    parser.add_argument("--base", default="defaults", help="the config the others compare to")
    args = parser.parse_args()
    print(render(args.json, ceiling(args.ceiling), ceiling(args.ceiling_kvu), args.base))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
