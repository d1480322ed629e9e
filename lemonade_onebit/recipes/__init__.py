"""Tuned executor settings as data, with their evidence, and the matcher that applies them.

A recipe lands in `shipped.json` only with the measurement that earns it its place. Every recipe
file, the shipped one included, comes in through the `lemonade_onebit.recipes` entry points (each
the path of a recipe file, or a callable returning one). Validation (`schema.py`) and matching
(`match.py`) are pure.
"""

from __future__ import annotations

import json
from pathlib import Path

from lemonade_onebit.plugins import group

GROUP = "lemonade_onebit.recipes"
SHIPPED = Path(__file__).with_name("shipped.json")


def shipped_file() -> Path:
    """This package's own entry point in the group."""
    return SHIPPED


def recipe_files() -> list[Path]:
    """Every registered recipe file: the shipped one first, then other packages', by name."""
    from lemonade_onebit.errors import RunError

    files = []
    for ep in group(GROUP):
        try:
            found = ep.load()
            files.append(Path(found() if callable(found) else found))
        except (ImportError, AttributeError, TypeError) as exc:
            raise RunError(f"recipe entry point {ep.name} ({ep.value}): {exc}") from None
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
