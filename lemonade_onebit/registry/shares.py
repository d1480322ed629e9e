"""What share of real models the registry covers: mapped, checked and smoke-checked, measured on a
census of Hugging Face text-generation models (per-architecture counts of `architectures[0]`).

The three numbers are kept apart: mapped says a pinned source accepts the architecture; checked that
a real model of it answered correctly through `1bit serve`; smoke-checked that a tiny random model
of it was converted, loaded and streamed (the converter and executor accept it, nothing more).
"""

from __future__ import annotations

from dataclasses import dataclass

# Upstream's figures on the same census counts (1bit-MONSTER/engine, registry/census.json):
# mapped by its backends, and checked with real models on its own hardware.
UPSTREAM = {"mapped": 94.94, "checked": 64.33}


@dataclass(frozen=True)
class Shares:
    date: str
    models: int  # census models with an architecture
    mapped: dict[str, int]  # route (or "any") -> models
    checked: dict[str, int]
    smoke: dict[str, int]
    top_unmapped: list[tuple[str, int]]

    def pct(self, n: int) -> float:
        return 100.0 * n / self.models if self.models else 0.0

    def as_dict(self) -> dict:
        def block(counts):
            return {k: {"models": v, "percent": round(self.pct(v), 2)} for k, v in counts.items()}

        return {"census_date": self.date, "models": self.models, "mapped": block(self.mapped),
                "checked": block(self.checked), "smoke_checked": block(self.smoke),
                "upstream": UPSTREAM,
                "top_unmapped": [{"architecture": a, "models": n} for a, n in self.top_unmapped]}


def passed(checked: dict, level: str) -> dict[str, list[str]]:
    """Architecture -> the routes a check of `level` ("checked" or "smoke") passed on."""
    out: dict[str, list[str]] = {}
    for arch, runs in checked.get(level, {}).items():
        out[arch] = sorted(route for route, run in runs.items() if run.get("ok"))
    return out


def measure(registry: dict, checked: dict, census: dict, top: int = 20) -> Shares:
    counts: dict[str, int] = census["counts"]
    archs = registry["architectures"]
    routes = list(registry["backends"])

    def tally(routes_of: dict[str, list[str]]) -> dict[str, int]:
        out = {"any": sum(n for a, n in counts.items() if routes_of.get(a))}
        for route in routes:
            out[route] = sum(n for a, n in counts.items() if route in routes_of.get(a, ()))
        return out

    mapped = tally({a: facts["backends"] for a, facts in archs.items()})
    unmapped = sorted(((a, n) for a, n in counts.items() if not archs.get(a, {}).get("backends")),
                      key=lambda item: (-item[1], item[0]))
    return Shares(census.get("date", "?"), sum(counts.values()), mapped,
                  tally(passed(checked, "checked")), tally(passed(checked, "smoke")),
                  unmapped[:top])


def render(shares: Shares, census_source: str) -> str:
    lines = [f"census {shares.date}: {shares.models:,} text-generation models with an "
             f"architecture ({census_source})",
             f"{'':<8}{'mapped':>16}{'checked':>16}{'smoke-checked':>18}"]
    for route in shares.mapped:
        lines.append(f"{route:<8}"
                     f"{shares.pct(shares.mapped[route]):>15.2f}%"
                     f"{shares.pct(shares.checked.get(route, 0)):>15.2f}%"
                     f"{shares.pct(shares.smoke.get(route, 0)):>17.2f}%")
    lines.append(f"upstream on the same counts: {UPSTREAM['mapped']:.2f}% mapped, "
                 f"{UPSTREAM['checked']:.2f}% checked (real models on its own hardware)")
    lines.append("top unmapped:")
    for arch, n in shares.top_unmapped:
        lines.append(f"  {n:>7,}  {shares.pct(n):5.2f}%  {arch}")
    return "\n".join(lines)
