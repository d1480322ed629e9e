"""Which recipes fit a target, and what they add to an executor's argv and env: pure functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic stays out of serve's start: recipes arrive validated
    from lemonade_onebit.recipes.schema import Recipe


@dataclass(frozen=True)
class Target:
    device: str
    architecture: str | None
    moe: bool
    drafter: str  # none | mtp | dflash
    hadamard_q4_0: bool


@dataclass(frozen=True)
class Applied:
    recipe: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        parts = [" ".join(self.args)] if self.args else []
        parts += [f"{k}={v}" for k, v in self.env]
        return ", ".join(parts)


def matches(recipe: Recipe, target: Target) -> bool:
    m = recipe.match
    return (
        (m.device is None or target.device in m.device)
        and (m.architecture is None or target.architecture in m.architecture)
        and (m.moe is None or m.moe == target.moe)
        and (m.drafter is None or m.drafter == target.drafter)
        and (m.hadamard_q4_0 is None or m.hadamard_q4_0 == target.hadamard_q4_0)
    )


def flag_groups(args: list[str]) -> list[list[str]]:
    """`["-t", "4", "--no-repack"]` → `[["-t", "4"], ["--no-repack"]]`."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("-") and not _is_number(arg):
            groups.append([arg])
        elif groups:
            groups[-1].append(arg)
    return groups


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def apply_recipes(
    recipes: list[Recipe], target: Target, argv: list[str], env: dict[str, str],
    name: Callable[[str], str] = lambda flag: flag,
) -> tuple[list[str], dict[str, str], list[Applied]]:
    """Add each matching recipe's flags not already present (user flags win; first recipe wins)
    and its env where unset. `name` gives every spelling of one flag the same name."""

    present = {name(a) for a in argv if a.startswith("-") and not _is_number(a)}
    argv, env, applied = list(argv), dict(env), []
    for recipe in recipes:
        if not matches(recipe, target):
            continue
        added: list[str] = []
        for group in flag_groups(recipe.args):
            if name(group[0]) not in present:
                present.add(name(group[0]))
                added += group
        new_env = tuple((k, v) for k, v in recipe.env.items() if k not in env)
        env.update(new_env)
        argv += added
        if added or new_env:
            applied.append(Applied(recipe.id, tuple(added), new_env))
    return argv, env, applied
