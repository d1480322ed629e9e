"""Look-alike architectures that must not be mapped by alias (`significant.json`).

Each entry names an HF class (and its `model_type` where it can be seen) that resembles a supported
family but is not it. `--check-gaps` fails when the registry maps one (by class, or by its
model_type) and the entry gives no `mapped_ok` reason saying why that mapping is real support.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lemonade_onebit.errors import RunError


class Gap(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cls: str = Field(alias="class", min_length=1)
    model_type: str  # "unverified" when no config could be seen
    looks_like: str
    differs: str
    alias_risk: str
    needs: str
    evidence: str
    mapped_ok: str = ""


class GapFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    about: str
    reviewed: list[Gap]


def load_gaps(doc: dict, name: str = "significant.json") -> list[Gap]:
    try:
        gaps = GapFile.model_validate(doc).reviewed
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RunError(f"{name}: {where}: {first['msg']}") from None
    seen: set[str] = set()
    for gap in gaps:
        if gap.cls in seen:
            raise RunError(f"{name}: {gap.cls} is listed twice")
        seen.add(gap.cls)
    return gaps


def findings(registry: dict, gaps: list[Gap]) -> list[str]:
    """Each reviewed look-alike the registry maps without a `mapped_ok` reason."""
    archs = registry["architectures"]
    out = []
    for gap in gaps:
        hits = []
        facts = archs.get(gap.cls)
        if facts and facts.get("backends"):
            hits.append(f"{gap.cls} on {', '.join(facts['backends'])}")
        if gap.model_type != "unverified":
            for name, other in archs.items():
                if name != gap.cls and gap.model_type in other.get("model_types", ()) \
                        and other.get("backends"):
                    hits.append(f"{name} (model_type {gap.model_type}) on "
                                f"{', '.join(other['backends'])}")
        if hits and not gap.mapped_ok.strip():
            out.append(f"{gap.cls} looks like {gap.looks_like} but is not it, and the registry "
                       f"maps {'; '.join(hits)}: give its entry in significant.json a mapped_ok "
                       f"reason (what real support landed), or keep it unmapped")
    return out
