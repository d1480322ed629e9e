"""Which GPUs a llama-server on the cuda route runs on, and how a model is split over them.

One GPU when the model fits on one: the one with the most free memory (or the one picked with
`--device cuda:N`), so no step waits on a second card. Otherwise every GPU (or every one picked,
`--device cuda:0,1`), layer split (`--split-mode layer`: each GPU holds whole layers, the
activations pass from one to the next) in proportion to each GPU's free memory
(`--tensor-split`). A device, split or main-GPU flag of the user's or Lemonade's wins over the
choice; the row split is theirs to ask for (`-- -sm row`).
"""

from __future__ import annotations

from lemonade_onebit.backends.llamacpp import flag_key
from lemonade_onebit.backends.sizing import Room, gib
from lemonade_onebit.devices import Memory
from lemonade_onebit.errors import UsageError

# route -> llama.cpp's name for its devices (CUDA0, CUDA1, ...): the routes whose GPUs serve
# can read and pick
DEVICE_NAMES = {"cuda": "CUDA"}
GIVEN = ("-dev", "-sm", "-ts", "-mg")  # flag_key of --device, --split-mode, --tensor-split, --main-gpu


def parse_pick(text: str) -> tuple[int, ...]:
    """`0` or `0,1` (after `cuda:`) as GPU numbers; ValueError with the reason."""
    try:
        picked = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"expected GPU numbers like cuda:0 or cuda:0,1, not :{text}") from None
    if any(n < 0 for n in picked) or len(set(picked)) != len(picked):
        raise ValueError(f":{text}: each GPU number once, from 0")
    return picked


def _room(free: int, devices: int, budget: int | None) -> Room:
    return Room(min(free, budget) if budget is not None else free, devices)


def _names(prefix: str, gpus: list[Memory]) -> str:
    return ",".join(f"{prefix}{g.ordinal}" for g in gpus)


def place(argv: list[str], route: str, picked: tuple[int, ...], user_args: tuple[str, ...],
          gpus: list[Memory], budget: int | None, weights: int, one_slot: float,
          say) -> tuple[list[str], Room | None]:
    """llama-server's argv with the GPUs to use, and the room its slots are planned in (None:
    unknown). `gpus`: what the driver reports, by ordinal; `budget`: $ONEBIT_GPU_BUDGET_GIB in
    bytes; `weights` and `one_slot` (the bytes of one slot's KV cache on the GPU) decide whether
    one GPU holds the model."""
    prefix = DEVICE_NAMES.get(route)
    if prefix is None:
        return argv, (_room(sum(g.free for g in gpus), len(gpus), budget) if gpus else None)
    known = {g.ordinal for g in gpus}
    if picked and gpus and not set(picked) <= known:
        missing = ", ".join(f"{route}:{n}" for n in picked if n not in known)
        here = ", ".join(f"{route}:{g.ordinal} ({g.name})" for g in gpus)
        raise UsageError(f"--device {route}:{','.join(map(str, picked))}: there is no {missing} "
                         f"here; CUDA sees {here} (`1bit devices` lists them)")
    chosen = [g for n in picked for g in gpus if g.ordinal == n] if picked else list(gpus)
    theirs = sorted({flag_key(a) for a in user_args if a.startswith("-")} & set(GIVEN))
    if theirs:
        if picked and "-dev" not in theirs:
            argv = [*argv, "--device", ",".join(f"{prefix}{n}" for n in picked)]
        say(f"GPUs: as the given {', '.join(theirs)} say")
        return argv, (_room(sum(g.free for g in chosen), len(chosen), budget) if chosen else None)
    if not gpus:  # the memory is unknown: use what was picked, as llama.cpp splits by default
        if picked:
            argv = [*argv, "--device", ",".join(f"{prefix}{n}" for n in picked)]
            if len(picked) > 1:
                argv += ["--split-mode", "layer"]
            say(f"GPUs: {','.join(f'{prefix}{n}' for n in picked)} as picked; their memory is "
                "unknown, so llama.cpp splits by its own measure")
        return argv, None
    if len(chosen) == 1:
        if picked or len(gpus) > 1:
            argv = [*argv, "--device", _names(prefix, chosen)]
        return argv, _room(chosen[0].free, 1, budget)
    need = weights + one_slot
    best = max(chosen, key=lambda g: g.free)
    alone = _room(best.free, 1, budget)
    if need + alone.headroom <= alone.free:
        say(f"GPUs: {prefix}{best.ordinal} holds the model alone ({gib(need)} with one slot's KV "
            f"cache, {gib(alone.free)} free of {gib(best.total)}), so the others stay free")
        return [*argv, "--device", f"{prefix}{best.ordinal}"], alone
    shares = ",".join(str(max(g.free >> 20, 1)) for g in chosen)
    say(f"GPUs: layers split over {', '.join(f'{prefix}{g.ordinal} ({gib(g.free)} free)' for g in chosen)} "
        f"by free memory: the model needs {gib(need)} with one slot's KV cache, more than one "
        f"holds ({gib(alone.free - alone.headroom)} after compute room)")
    argv = [*argv, "--device", _names(prefix, chosen), "--split-mode", "layer",
            "--tensor-split", shares]
    return argv, _room(sum(g.free for g in chosen), len(chosen), budget)
