"""The recipe file format (SPEC §6), validated once with pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lemonade_onebit.errors import RecipeError
from lemonade_onebit.validation import read_json, reasons


class Match(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    device: list[str] | None = None
    architecture: list[str] | None = None
    moe: bool | None = None
    drafter: Literal["none", "mtp", "dflash"] | None = None
    hadamard_q4_0: bool | None = None


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    match: Match = Match()
    args: list[str] = []
    env: dict[str, str] = {}
    why: str = ""
    measured: str = Field(min_length=1)
    source: str = ""

    @field_validator("args")
    @classmethod
    def _args_start_with_a_flag(cls, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-"):
            raise ValueError(f"args must start with a flag, not {args[0]!r}")
        return args

    @model_validator(mode="after")
    def _adds_something(self) -> Recipe:
        if not self.args and not self.env:
            raise ValueError("a recipe must add args or env")
        return self


def load_recipe_file(path: Path) -> list[Recipe]:
    """Every recipe of a file, in file order; RecipeError on the first problem."""
    try:
        raw = read_json(path)
    except ValueError as exc:
        raise RecipeError(f"{path}: {exc}") from None
    items = raw.get("recipes") if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise RecipeError(f"{path}: expected a list of recipes or {{\"recipes\": [...]}}")
    recipes, seen = [], set()
    for index, item in enumerate(items):
        rid = item.get("id", f"#{index + 1}") if isinstance(item, dict) else f"#{index + 1}"
        try:
            recipe = Recipe.model_validate(item)
        except ValidationError as exc:
            raise RecipeError(f"{path}: recipe {rid}: {reasons(exc, 'recipe', True)}") from None
        if recipe.id in seen:
            raise RecipeError(f"{path}: recipe {recipe.id}: duplicate id")
        seen.add(recipe.id)
        recipes.append(recipe)
    return recipes
