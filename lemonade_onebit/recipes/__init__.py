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


def _for_other_devices(raw, device: str) -> bool:
    """Every recipe of a parsed file names its devices, and `device` is not among them."""
    items = raw.get("recipes") if isinstance(raw, dict) else raw
    return isinstance(items, list) and all(
        isinstance(item, dict) and isinstance(item.get("match"), dict)
        and isinstance(item["match"].get("device"), list) and device not in item["match"]["device"]
        for item in items)


def load_recipes(files: list[Path], device: str | None = None):
    """Every recipe of `files`, validated. A file that can add nothing costs no validation (nor
    pydantic's import on serve's start): an empty one, or, given the route's `device`, one whose
    every recipe names only other devices (it is validated where one of those is served, and
    the shipped file by the tests)."""
    recipes = []
    for path in files:
        try:
            raw = json.loads(path.read_text())
            if raw in ([], {"recipes": []}) or (device and _for_other_devices(raw, device)):
                continue
        except (OSError, ValueError):
            pass  # load_recipe_file says what is wrong with it
        from lemonade_onebit.recipes.schema import load_recipe_file

        recipes += load_recipe_file(path)
    return recipes
