"""The expert placement `1bit serve` adds to a GPU route's llama-server argv for a MoE file.

The plan is made for the context the argv asks for (`-c`, `-np`, `-ub`, `-fa`, `-ctk`/`-ctv`,
whoever set them), and is added only where nobody placed the experts already: a placement flag
of the user's, Lemonade's or a recipe's (`--n-cpu-moe`, `--cpu-moe`, `-ot`, `--fit`,
`--fit-target`, or `-ngl` after `--`) wins over the whole plan, and a `--load-mode` of theirs over
the plan's load mode.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lemonade_onebit.backends.llamacpp import flag_key
from lemonade_onebit.moe.plan import Placement, Workload
from lemonade_onebit.recipes.match import flag_groups

PLACEMENT_FLAGS = ("--n-cpu-moe", "--cpu-moe", "--override-tensor", "--fit", "--fit-target")
LOAD_FLAGS = ("--load-mode", "--mlock", "--mmap")


def workload_of(argv: list[str]) -> Workload:
    """The context an llama-server argv allocates, as the planner needs it."""
    values: dict[str, str] = {}
    for group in flag_groups(list(argv)):
        flag = group[0]
        if "=" in flag:
            flag, value = flag.split("=", 1)
            group = [flag, value]
        if len(group) > 1:
            values[flag_key(flag)] = group[1]

    def number(key: str) -> int | None:
        try:
            return int(values[key])
        except (KeyError, ValueError):
            return None

    return Workload(ctx=number("-c"), parallel=number("-np"), ubatch=number("-ub") or 512,
                    flash_attn=values.get("-fa", "auto"), type_k=values.get("-ctk", "f16"),
                    type_v=values.get("-ctv", "f16"))


def place_experts(argv: list[str], model: Path, device: str, user_args: tuple[str, ...],
                  say: Callable[[str], None]) -> list[str]:
    """`argv` with the plan's flags added, for a GPU route; the cpu route's argv is unchanged
    (llama.cpp keeps every weight in RAM there already)."""
    if device == "cpu":
        return argv
    given = {flag_key(a) for a in argv[1:] if a.startswith("-")}
    theirs = {flag_key(a) for a in user_args if a.startswith("-")}
    placed = sorted((given & {flag_key(f) for f in PLACEMENT_FLAGS})
                    | (theirs & {flag_key("--gpu-layers")}))
    if placed:
        say(f"expert placement: left to the given {', '.join(placed)}")
        return argv
    placement = plan_for(argv, model, device)
    if placement is None:
        return argv
    say(f"expert placement: {placement.reason}")
    for warning in placement.warnings:
        say(f"expert placement: warning: {warning}")
    load = {flag_key(f) for f in LOAD_FLAGS}
    added = [arg for group in flag_groups(list(placement.flags))
             if not (flag_key(group[0]) in load and given & load) for arg in group]
    if added:
        say(f"expert placement: adding {' '.join(added)}")
    return [*argv, *added]


def plan_for(argv: list[str], model: Path, device: str) -> Placement | None:
    from lemonade_onebit.moe.inspect import read_index
    from lemonade_onebit.moe.memory import machine_memory
    from lemonade_onebit.moe.plan import plan

    try:
        index = read_index(model)
    except (OSError, ValueError):
        return None  # the executor reports what is wrong with the file
    if not index.moe:
        return None
    return plan(index, machine_memory(device), workload_of(argv), device)
