"""`--parallel auto` on a device route: read what the slot plan needs (the device's free memory,
the model's weights and shape) and put the plan (`backends/sizing.py`) on llama-server's argv.

The CPU route is left as it was: llama-server picks its own slots there.
"""

from __future__ import annotations

import re
from pathlib import Path

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.backends.llamacpp import slot_ask, with_slots
from lemonade_onebit.backends.sizing import KvShape, Room, plan_slots
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

SHARD = re.compile(r"^(?P<stem>.+)-\d{5}-of-(?P<count>\d{5})\.gguf$")


def weight_bytes(model: ModelRef, config: ServeConfig) -> int:
    """The bytes the GPU holds for weights: the model's file (every shard of a split GGUF) and
    the draft and projector files the command line adds."""
    files = [model.path]
    shard = SHARD.match(model.path.name)
    if shard:
        files = sorted(model.path.parent.glob(f"{glob_escape(shard['stem'])}-*-of-"
                                              f"{shard['count']}.gguf"))
    files += [Path(p) for p in (config.mtp, config.dflash, config.mmproj) if p]
    total = 0
    for path in files:
        try:
            total += path.stat().st_size
        except OSError:
            pass  # the executor names a missing file itself
    return total


def draft_kv_per_token(config: ServeConfig) -> float:
    """The KV cache per token of the draft models (`--mtp`, `--dflash`), as f16; a draft whose
    metadata cannot be read counts nothing (the headroom takes small ones)."""
    from lemonade_onebit.ggufmeta import read_facts

    total = 0.0
    for path in (config.mtp, config.dflash):
        if not path:
            continue
        try:
            shape = KvShape.from_facts(read_facts(Path(path)))
        except (OSError, ValueError, KeyError, IndexError):
            continue  # the executor reports a draft it cannot read
        total += shape.bytes_per_token() if shape else 0.0
    return total


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def size_slots(config: ServeConfig, launcher: Launcher, model: ModelRef, facts, argv: list[str],
               say) -> list[str]:
    """llama-server's argv with the slots and context the plan gives, said in one line; a
    combination the user asked for that cannot fit stops serve (UsageError) before anything
    starts."""
    if not launcher.info.needs or model.kind != "gguf":
        return argv
    ask = slot_ask(argv, config)
    if ask is None:
        say("llama-server chooses its own slots (the -np or -c given after `--`)")
        return argv
    from lemonade_onebit.devices import device_memory

    memory = device_memory(launcher.info.needs)
    room = Room(sum(m.free for m in memory), len(memory)) if memory else None
    shape = KvShape.from_facts(facts) if facts is not None else None
    plan = plan_slots(ask, room, weight_bytes(model, config), shape,
                      draft_per_token=draft_kv_per_token(config))
    say(plan.message)
    return with_slots(argv, plan.slots, plan.ctx)
