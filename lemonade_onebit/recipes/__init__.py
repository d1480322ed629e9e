"""Tuned executor settings as data, with their evidence, and the matcher that applies them.

A recipe lands in `shipped.json` only with the measurement that earns it its place; other packages
add theirs through the `lemonade_onebit.recipes` entry points (each a callable returning the path of
a recipe file). Validation (`schema.py`) and matching (`match.py`) are pure; serve only calls
`recipes_for`.
"""

from __future__ import annotations

import json
from pathlib import Path

from lemonade_onebit.plugins import group

GROUP = "lemonade_onebit.recipes"
SHIPPED = Path(__file__).with_name("shipped.json")


def recipe_files() -> list[Path]:
    """The shipped file, then every file other packages register, in that order."""
    files = [SHIPPED]
    for ep in group(GROUP):
        files.append(Path(ep.load()()))
    return files


def load_recipes(files: list[Path]):
    """Every recipe of `files`, validated; an empty file costs no validation (nor pydantic)."""
    recipes = []
    for path in files:
        try:
            if json.loads(path.read_text()) in ([], {"recipes": []}):
                continue
        except (OSError, ValueError):
            pass  # load_recipe_file says what is wrong with it
        from lemonade_onebit.recipes.schema import load_recipe_file

        recipes += load_recipe_file(path)
    return recipes
