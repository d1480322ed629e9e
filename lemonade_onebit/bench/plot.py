"""`1bit bench --plot FILE.png`: bars per config with min-max whiskers; TTFT by prompt length;
rate and TTFT by concurrent streams."""

from __future__ import annotations

import statistics
from pathlib import Path

from lemonade_onebit.bench.common import Config
from lemonade_onebit.errors import RunError


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RunError("--plot needs matplotlib: pip install 'lemonade-onebit[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, names: list[str], groups: list[list[float]], title: str, ylabel: str,
          offset: float = 0.0, width: float = 0.8, label: str | None = None) -> None:
    """Median bars with min-max whiskers, the median written on each bar."""
    meds = [statistics.median(g) for g in groups]
    lo = [m - min(g) for m, g in zip(meds, groups)]
    hi = [max(g) - m for m, g in zip(meds, groups)]
    xs = [i + offset for i in range(len(names))]
    bars = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=4, label=label)
    ax.bar_label(bars, labels=[f"{m:.0f}" if m >= 100 else f"{m:.1f}" for m in meds],
                 label_type="center", fontsize=8, color="white")
    ax.set_xticks(range(len(names)), names, rotation=30 if len(names) > 4 else 0, ha="right"
                  if len(names) > 4 else "center")
    ax.set_title(title)
    ax.set_ylabel(ylabel)


def _p95(values: list[float]) -> float:
    from lemonade_onebit.bench.concurrency import percentile

    return percentile(values, 0.95)


def plot(mode: str, configs: list[Config], model: str, path: str) -> None:
    plt = _pyplot()
    names = [c.name for c in configs]
    if mode == "ab":
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        _bars(axes[0], names, [c.data["prompt_tps"] for c in configs], "prompt", "tok/s")
        _bars(axes[1], names, [c.data["decode_tps"] for c in configs], "decode", "tok/s")
    elif mode == "e2e":
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for c in configs:
            lengths = sorted({r["prompt_tokens"] for r in c.data["runs"]})
            for ax, key in ((axes[0], "ttft_ms"), (axes[1], "effective_tps")):
                vals = [[r[key] for r in c.data["runs"] if r["prompt_tokens"] == n]
                        for n in lengths]
                meds = [statistics.median(v) for v in vals]
                ax.errorbar(lengths, meds, marker="o", capsize=4, label=c.name,
                            yerr=[[m - min(v) for m, v in zip(meds, vals)],
                                  [max(v) - m for m, v in zip(meds, vals)]])
        lengths = sorted({r["prompt_tokens"] for c in configs for r in c.data["runs"]})
        for ax, title, ylabel in ((axes[0], "time to first token", "ms"),
                                  (axes[1], "effective rate", "tok/s")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths, [str(n) for n in lengths])
            ax.minorticks_off()
            ax.set_xlabel("prompt tokens")
            ax.set_title(title)
            ax.set_ylabel(ylabel)
            ax.legend()
    elif mode == "concurrency":
        from lemonade_onebit.bench.concurrency import levels_of

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for c in configs:
            levels = levels_of(c)
            for ax, key in ((axes[0], "decode_tps"), (axes[1], "ttft_ms")):
                if key == "decode_tps":
                    vals = [[b[key] for b in c.data["bursts"] if b["streams"] == n
                             and b[key] is not None] for n in levels]
                else:  # every stream's TTFT, p95 drawn
                    vals = [[t for b in c.data["bursts"] if b["streams"] == n for t in b[key]]
                            for n in levels]
                mids = [statistics.median(v) if key == "decode_tps" else _p95(v) for v in vals]
                ax.errorbar(levels, mids, marker="o", capsize=4, label=c.name,
                            yerr=[[max(0.0, m - min(v)) for m, v in zip(mids, vals)],
                                  [max(0.0, max(v) - m) for m, v in zip(mids, vals)]])
        levels = sorted({n for c in configs for n in levels_of(c)})
        for ax, title, ylabel in ((axes[0], "aggregate decode rate (median, min-max)", "tok/s"),
                                  (axes[1], "time to first token (p95, min-max)", "ms")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [str(n) for n in levels])
            ax.minorticks_off()
            ax.set_xlabel("concurrent streams")
            ax.set_title(title)
            ax.set_ylabel(ylabel)
            ax.legend()
    else:  # swap
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, start in zip(axes, ("cold", "warm")):
            for k, side in enumerate(("executor", "serve")):
                groups = [[s["ready_ms"] for s in c.data["starts"]
                           if s["start"] == start and s["side"] == side] for c in configs]
                _bars(ax, names, groups, f"{start} start to ready", "ms", offset=(k - 0.5) * 0.4,
                      width=0.4, label="executor alone" if side == "executor" else "1bit serve")
            ax.legend()
    fig.suptitle(f"1bit bench: {model}")
    fig.tight_layout()
    fig.savefig(Path(path), dpi=110)
    plt.close(fig)
