"""`--parallel auto` on a device route: read what the slot plan needs (the device's free memory,
the model's weights and shape) and put the plan (`backends/sizing.py`) on llama-server's argv.

The CPU route is left as it was: llama-server picks its own slots there.
"""

from __future__ import annotations

import re
from pathlib import Path

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.backends.llamacpp import slot_ask, with_slots
from lemonade_onebit.backends.sizing import (
    DEFAULT_CTX,
    MAX_AUTO_SLOTS,
    KvShape,
    Room,
    SlotAsk,
    plan_slots,
)
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.modelref import ModelRef

MOE_AUTO_SLOTS = 4  # llama-server's own default count, for a MoE file whose experts need the room
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
    """llama-server's argv with the GPUs it runs on (`serve/gpus.py`) and the slots and context
    the plan gives, each said in one line; a combination the user asked for that cannot fit
    stops serve (UsageError) before anything starts."""
    if not launcher.info.needs or model.kind != "gguf":
        return argv
    from lemonade_onebit.devices import device_memory
    from lemonade_onebit.moe.memory import budget_bytes
    from lemonade_onebit.serve.gpus import place

    ask = slot_ask(argv, config)
    shape = KvShape.from_facts(facts) if facts is not None else None
    weights = weight_bytes(model, config)
    one_slot = one_slot_bytes(shape, ask)
    memory = device_memory(launcher.info.needs)
    if config.rpc:  # llama.cpp splits over the local GPUs and the workers by itself
        room = Room(sum(m.free for m in memory), len(memory)) if memory else None
    else:
        argv, room = place(argv, launcher.info.device, config.gpus, config.extra_args, memory,
                           budget_bytes(), weights, one_slot, say)
    if ask is None:
        say("llama-server chooses its own slots (the -np or -c given after `--`)")
        return argv
    max_auto, why = MAX_AUTO_SLOTS, ""
    if facts is not None and facts.moe and room is not None and shape is not None:
        dense = dense_bytes(model)
        if dense is not None and weights + one_slot + room.headroom > room.free:
            weights, max_auto = dense, MOE_AUTO_SLOTS
            why = (f"; a MoE file larger than the GPU's room: slots are planned beside its dense "
                   f"weights, at most {MOE_AUTO_SLOTS}, and the experts get what is left")
    plan = plan_slots(ask, room, weights, shape, max_auto=max_auto,
                      draft_per_token=draft_kv_per_token(config))
    say(plan.message + (why if plan.slots else ""))
    return with_slots(argv, plan.slots, plan.ctx)


def one_slot_bytes(shape: KvShape | None, ask: SlotAsk | None) -> float:
    """One slot's KV cache on the GPU as the argv asks for it: its cache types and context (the
    default context where the argv leaves it to llama-server), nothing with `-nkvo`."""
    if shape is None or (ask is not None and ask.kv_on_host):
        return 0.0
    if ask is None:
        return shape.bytes_per_token() * DEFAULT_CTX
    return shape.bytes_per_token(ask.type_k, ask.type_v) * (ask.ctx or DEFAULT_CTX)


def dense_bytes(model: ModelRef) -> int | None:
    """The bytes of a MoE file that are not routed experts (None: unreadable)."""
    from lemonade_onebit.moe.inspect import read_index

    try:
        return read_index(model.path).dense_bytes
    except (OSError, ValueError):
        return None
