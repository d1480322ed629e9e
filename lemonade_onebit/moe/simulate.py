"""What an expert cache would hit: routing traces replayed against cache policies.

A trace is what the router chose: for every token, for every MoE layer, the ids of the experts it
used. A cache holds experts (one slot: one expert of one layer); a token's access to an expert
held is a hit, any other access a miss that loads the expert, evicting one when the cache is
full. Within a token the layers are visited in order and a layer's experts in the order given.

Budgets: `slots` per layer, or (`shared`) one budget over all layers. The per-layer policies
(`lru`, `lfu`, `slru`, `belady`) split the budget evenly over the layers, so each layer has its
own cache; the global ones (`g-lru`, `g-lfu`, `g-belady`) share one cache of the whole budget
between layers, so a layer that routes widely can take slots from one that does not. `belady`
evicts the expert used again farthest in the future (Belady's MIN: the fewest misses any policy
could have with that budget, so no per-layer policy beats it); `g-belady` is the same over the
shared cache and bounds every policy.

Trace files (JSON lines, `.jsonl`, or one JSON object, `.json`):

    {"format": "onebit-moe-trace", "version": 1, "n_layer": 48, "n_expert": 128,
     "n_expert_used": 8, "model": "…", "source": "…"}
    {"token": 0, "experts": [[12, 7, 90, …], [3, 55, …], …]}
    {"token": 1, "experts": [[…], …]}

The first line is the header; each next line one token, `experts` holding one list per layer
(n_layer lists, each of distinct ids in 0..n_expert-1). A `.json` file is the header object with
the tokens' `experts` lists under `"tokens"`. Random-weight models route almost uniformly, so
only traces of real models say what a real cache would hit.
"""

from __future__ import annotations

import heapq
import json
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "onebit-moe-trace"
PER_LAYER = ("lru", "lfu", "slru", "belady")
GLOBAL = ("g-lru", "g-lfu", "g-belady")
POLICIES = PER_LAYER + GLOBAL
SLRU_PROTECTED = 0.8  # the share of an SLRU cache kept for experts hit twice


@dataclass(frozen=True)
class Trace:
    n_layer: int
    n_expert: int
    n_expert_used: int
    tokens: tuple[tuple[tuple[int, ...], ...], ...]  # tokens[t][layer] = expert ids
    meta: dict = field(default_factory=dict)

    @property
    def accesses(self) -> int:
        return sum(len(ids) for token in self.tokens for ids in token)


@dataclass(frozen=True)
class Result:
    policy: str
    slots: int  # the whole budget, in expert slots over all layers
    per_layer_slots: int
    accesses: int
    hits: int
    layer_hits: tuple[int, ...]
    layer_accesses: tuple[int, ...]

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    def as_json(self) -> dict:
        return {"policy": self.policy, "slots": self.slots, "per_layer_slots": self.per_layer_slots,
                "accesses": self.accesses, "hits": self.hits, "hit_rate": round(self.hit_rate, 6),
                "layer_hit_rates": [round(h / a, 6) if a else 0.0
                                    for h, a in zip(self.layer_hits, self.layer_accesses)]}


def load_trace(path: Path) -> Trace:
    """A trace file, checked: ValueError naming the first thing wrong."""
    text = Path(path).read_text()
    if str(path).endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        if not rows:
            raise ValueError(f"{path}: empty trace")
        header = rows[0]
        tokens = [row.get("experts") if isinstance(row, dict) else None for row in rows[1:]]
    else:
        header = json.loads(text)
        listed = header.get("tokens") if isinstance(header, dict) else None
        if not isinstance(listed, list):
            raise ValueError(f"{path}: no \"tokens\" list")
        tokens = listed
    return make_trace(header, tokens, str(path))


def make_trace(header: dict, tokens: list, where: str = "trace") -> Trace:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{where}: the first object is not a {FORMAT} header")
    try:
        n_layer, n_expert = int(header["n_layer"]), int(header["n_expert"])
        used = int(header.get("n_expert_used", 0))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: the header needs whole numbers n_layer and n_expert") from None
    if n_layer < 1 or n_expert < 1:
        raise ValueError(f"{where}: n_layer and n_expert must be at least 1")
    out = []
    for t, token in enumerate(tokens):
        if not isinstance(token, list) or len(token) != n_layer:
            raise ValueError(f"{where}: token {t} does not have {n_layer} lists of experts")
        layers = []
        for layer, ids in enumerate(token):
            if (not isinstance(ids, list) or len(set(ids)) != len(ids)
                    or not all(isinstance(i, int) and 0 <= i < n_expert for i in ids)):
                raise ValueError(f"{where}: token {t}, layer {layer}: expected distinct expert "
                                 f"ids in 0..{n_expert - 1}")
            layers.append(tuple(ids))
        out.append(tuple(layers))
    meta = {k: v for k, v in header.items() if k not in ("tokens",)}
    return Trace(n_layer, n_expert, used, tuple(out), meta)


def write_trace(path: Path, trace: Trace) -> None:
    header = {"format": FORMAT, "version": 1, "n_layer": trace.n_layer, "n_expert": trace.n_expert,
              "n_expert_used": trace.n_expert_used,
              **{k: v for k, v in trace.meta.items()
                 if k not in ("format", "version", "n_layer", "n_expert", "n_expert_used")}}
    lines = [json.dumps(header)] + [json.dumps({"token": t, "experts": [list(ids) for ids in tok]})
                                    for t, tok in enumerate(trace.tokens)]
    Path(path).write_text("\n".join(lines) + "\n")


def _stream(trace: Trace) -> list[tuple[int, int]]:
    return [(layer, e) for token in trace.tokens for layer, ids in enumerate(token) for e in ids]


def simulate(trace: Trace, policy: str, slots: int, shared: bool = False) -> Result:
    """Replay `trace` on `policy` with `slots` per layer, or `slots` in all when `shared`."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: one of {', '.join(POLICIES)}")
    total = slots if shared else slots * trace.n_layer
    per_layer = total // trace.n_layer
    stream = _stream(trace)
    if policy in GLOBAL:
        hit = _run(policy[2:], stream, total)
    else:
        hit = [False] * len(stream)
        at: list[list[int]] = [[] for _ in range(trace.n_layer)]
        for i, (layer, _) in enumerate(stream):
            at[layer].append(i)
        for positions in at:
            for i, h in zip(positions, _run(policy, [stream[i] for i in positions], per_layer)):
                hit[i] = h
    layer_hits = [0] * trace.n_layer
    layer_accesses = [0] * trace.n_layer
    for (layer, _), h in zip(stream, hit):
        layer_accesses[layer] += 1
        layer_hits[layer] += h
    return Result(policy, total, per_layer, len(stream), sum(layer_hits), tuple(layer_hits),
                  tuple(layer_accesses))


def _run(kind: str, keys: list, capacity: int) -> list[bool]:
    """Hit or miss of each access to `keys` in a cache of `capacity` entries."""
    if capacity <= 0:
        return [False] * len(keys)
    return {"lru": _lru, "lfu": _lfu, "slru": _slru, "belady": _belady}[kind](keys, capacity)


def _lru(keys: list, capacity: int) -> list[bool]:
    cache: OrderedDict = OrderedDict()
    out = []
    for key in keys:
        if key in cache:
            cache.move_to_end(key)
            out.append(True)
            continue
        out.append(False)
        if len(cache) >= capacity:
            cache.popitem(last=False)
        cache[key] = True
    return out


def _lfu(keys: list, capacity: int) -> list[bool]:
    """Perfect LFU: counts every access since the start, evicted experts' too; ties go to the
    least recently used. A heap of (count, last use) with stale entries skipped."""
    count: dict = {}
    last: dict = {}
    cache: set = set()
    heap: list = []
    out = []
    for step, key in enumerate(keys):
        count[key] = count.get(key, 0) + 1
        last[key] = step
        if key in cache:
            out.append(True)
        else:
            out.append(False)
            if len(cache) >= capacity:
                while True:
                    c, t, victim = heapq.heappop(heap)
                    if victim in cache and count[victim] == c and last[victim] == t:
                        cache.discard(victim)
                        break
            cache.add(key)
        heapq.heappush(heap, (count[key], step, key))
    return out


def _slru(keys: list, capacity: int) -> list[bool]:
    """Segmented LRU: new experts enter a probation segment; a hit there promotes to the
    protected one (its least recent falls back to probation); eviction takes probation's least
    recent first."""
    protected_max = max(1, int(capacity * SLRU_PROTECTED)) if capacity > 1 else 0
    probation: OrderedDict = OrderedDict()
    protected: OrderedDict = OrderedDict()
    out = []
    for key in keys:
        if key in protected:
            protected.move_to_end(key)
            out.append(True)
            continue
        if key in probation:
            out.append(True)
            del probation[key]
            if protected_max:
                protected[key] = True
                if len(protected) > protected_max:
                    old, _ = protected.popitem(last=False)
                    probation[old] = True
            else:
                probation[key] = True
            continue
        out.append(False)
        if len(probation) + len(protected) >= capacity:
            (probation if probation else protected).popitem(last=False)
        probation[key] = True
    return out


def _belady(keys: list, capacity: int) -> list[bool]:
    """Belady's MIN: on a miss with the cache full, evict the entry next used farthest ahead."""
    never = len(keys)
    upcoming = [never] * len(keys)
    seen: dict = {}
    for i in range(len(keys) - 1, -1, -1):
        upcoming[i] = seen.get(keys[i], never)
        seen[keys[i]] = i
    nxt: dict = {}
    heap: list = []  # (-next use, key); stale when nxt[key] differs
    out = []
    for i, key in enumerate(keys):
        if key in nxt:
            out.append(True)
        else:
            out.append(False)
            if len(nxt) >= capacity:
                while True:
                    neg, victim = heapq.heappop(heap)
                    if nxt.get(victim) == -neg:
                        del nxt[victim]
                        break
        nxt[key] = upcoming[i]
        heapq.heappush(heap, (-upcoming[i], key))
    return out


def sweep(trace: Trace, policies: Iterable[str], slots: Iterable[int], shared: bool = False
          ) -> list[Result]:
    return [simulate(trace, p, n, shared) for n in slots for p in policies]


def table(results: list[Result], trace: Trace) -> str:
    """Hit rate per policy (columns) and budget (rows)."""
    policies = list(dict.fromkeys(r.policy for r in results))
    budgets = list(dict.fromkeys(r.slots for r in results))
    by = {(r.policy, r.slots): r for r in results}
    lines = [f"trace: {len(trace.tokens)} tokens x {trace.n_layer} layers, {trace.n_expert} experts"
             f" ({trace.n_expert_used} used), {trace.accesses} accesses",
             "| slots per layer | share of experts | " + " | ".join(policies) + " |",
             "|---|---|" + "---|" * len(policies)]
    for budget in budgets:
        per = budget / trace.n_layer
        cells = [f"{by[(p, budget)].hit_rate:.1%}" if (p, budget) in by else "" for p in policies]
        lines.append(f"| {per:g} | {per / trace.n_expert:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[Result], trace: Trace, path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        from lemonade_onebit.errors import RunError

        raise RunError("--plot needs matplotlib: pip install 'lemonade-onebit[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in dict.fromkeys(r.policy for r in results):
        mine = sorted((r for r in results if r.policy == policy), key=lambda r: r.slots)
        ax.plot([100 * r.slots / (trace.n_layer * trace.n_expert) for r in mine],
                [100 * r.hit_rate for r in mine], marker="o",
                linestyle="--" if "belady" in policy else "-", label=policy)
    ax.set_xlabel("experts resident (% of all)")
    ax.set_ylabel("hit rate (%)")
    ax.set_title(f"expert cache hit rate, {len(trace.tokens)} tokens")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
