"""A catalog entry, validated: Lemonade's `server_models.json` shape and its rules."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lemonade_onebit.catalog.entries import raw_catalog
from lemonade_onebit.catalog.variants import split_checkpoint
from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.validation import reasons

MODES = ("chat", "embeddings", "reranking")
CAPABILITIES = ("vision", "tool-calling", "reasoning", "coding", "hot")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*-1bit$")


class CatalogEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    checkpoint: str
    recipe: Literal["onebit"] = "onebit"
    labels: tuple[str, ...]
    size: float = Field(gt=0, description="GB")
    suggested: bool = False
    mmproj: str | None = None
    # The model file's identity, where it is known: a copy anywhere is recognised as this entry.
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    bytes: int | None = Field(default=None, gt=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("a name is letters, digits, `.`, `_`, `-`, and ends in `-1bit`")
        return v

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, v: str) -> str:
        try:
            _, variant = split_checkpoint(v)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        if variant is None:
            raise ValueError("a GGUF checkpoint names a variant: ORG/REPO:QUANT or ORG/REPO:FILE")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        modes = [label for label in v if label in MODES]
        if len(modes) != 1:
            raise ValueError(f"exactly one mode label ({', '.join(MODES)}), got {len(modes)}")
        unknown = [label for label in v if label not in MODES + CAPABILITIES]
        if unknown:
            raise ValueError(f"unknown labels {unknown}; capabilities are {', '.join(CAPABILITIES)}")
        if len(set(v)) != len(v):
            raise ValueError("a label is repeated")
        return v

    @model_validator(mode="after")
    def _mmproj(self) -> CatalogEntry:
        if self.mmproj is not None and "vision" not in self.labels:
            raise ValueError("an mmproj file belongs to a `vision` model")
        return self

    @property
    def repo(self) -> str:
        return split_checkpoint(self.checkpoint)[0]

    @property
    def variant(self) -> str:
        return split_checkpoint(self.checkpoint)[1] or ""

    @property
    def mode(self) -> str:
        return next(label for label in self.labels if label in MODES)

    def lemonade_shape(self) -> dict:
        """The entry as it stands in `server_models.json` (the name is the key)."""
        return (self.model_dump(exclude={"name", "sha256", "bytes"}, exclude_none=True)
                | {"labels": list(self.labels)})


def validate(name: str, body: object) -> CatalogEntry:
    if not isinstance(body, dict):
        raise RunError(f"catalog entry {name}: not an object")
    try:
        return CatalogEntry(name=name, **body)
    except ValidationError as exc:
        raise RunError(f"catalog entry {name}: {reasons(exc, 'entry')}") from None


def load_catalog() -> list[CatalogEntry]:
    """Every entry, validated; the first bad one stops with its name and reason."""
    return [validate(name, body) for name, body in raw_catalog().items()]
