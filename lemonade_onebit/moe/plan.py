"""Where llama-server keeps a mixture-of-experts model's experts: a pure function of the file's
expert index, the device's memory and the context, giving llama-server flags and why.

The order of preference, for a GPU route (the route itself passes `-ngl 99`):

1. everything on the GPU when the dense weights, every expert, the KV cache and the compute
   buffers fit: no flag;
2. else the dense weights, the KV cache and as many layers' experts as fit on the GPU, the first
   layers' experts in RAM (`--n-cpu-moe N`: llama.cpp keeps the routed experts of layers 0..N-1
   on the CPU), and of the last layer that does not fit whole, the expert tensors that do
   (`-ot 'blk\\.K\\.ffn_down_exps=CPU'` for the rest);
3. the experts kept in RAM are read into memory rather than left memory-mapped when RAM holds
   them: `--load-mode mlock` (no mmap, pinned) when the process may lock that much, else
   `--load-mode none` (no mmap). llama.cpp then places them in the GPU's pinned host buffers,
   which it copies to the GPU faster for prompt batches, and warns against mmap for exactly this
   case. The pinned build spells the old `--mlock` / `--no-mmap` this way;
4. when even RAM cannot hold them they stay memory-mapped (`--load-mode mmap`), and the plan says
   that decode then reads experts from disk.

On the cpu route every weight is in RAM already (memory-mapped): nothing to place, and the plan
says whether RAM holds the file.

The memory llama.cpp needs beside the weights is estimated here from the file (KV cache, compute
buffers, the weight copies a prompt batch needs when experts are in RAM) with a reserve for the
runtime's own context; `bench/moe_speed.py` checks the estimate against what the process used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations

from lemonade_onebit.moe.inspect import (
    ROUTED,
    ExpertLayer,
    MoeIndex,
    Tensor,
    kv_bytes_per_token,
    size,
)

MiB = 1 << 20
GiB = 1 << 30
# The GPU runtime's own context, kernels and pools, outside llama.cpp's buffers: 700 to 717 MiB
# in every config of the H200 run (CUDA 13; bench/results/moe-h200.json: what the process used
# less llama.cpp's model, KV and compute buffers), with room above it.
GPU_RESERVE = 768 * MiB
# RAM left to the system, serve and the executor's host buffers when experts are read into RAM.
RAM_RESERVE = 2 * GiB
# ggml's allocator pads, aligns and keeps tensors alive longer than the arithmetic below: the
# H200 run's compute buffer was 1.36 times it (88.0 MiB with every expert on the GPU)
COMPUTE_SLACK = 1.5


@dataclass(frozen=True)
class Memory:
    """What the machine offers. `gpu_bytes`: free GPU memory to plan for (`--budget-gib` sets it;
    None: unknown). `lockable_bytes`: how much the executor may mlock (None: no limit)."""

    gpu_bytes: int | None
    ram_bytes: int
    lockable_bytes: int | None = None
    gpu_source: str = "free on the GPU"


@dataclass(frozen=True)
class Workload:
    """The context llama-server will allocate: `ctx` is `-c` (all slots together); None is the
    model's trained context, once per slot when `--parallel` names more than one (llama.cpp
    sizes it so)."""

    ctx: int | None = None
    parallel: int | None = None
    ubatch: int = 512
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"

    def kv_tokens(self, index: MoeIndex) -> int:
        if self.ctx:
            return self.ctx
        return max(index.ctx_train, 1) * (self.parallel if self.parallel and self.parallel > 1 else 1)


@dataclass(frozen=True)
class Placement:
    device: str
    flags: tuple[str, ...]
    reason: str
    warnings: tuple[str, ...] = ()
    routed_bytes: int = 0
    gpu_routed_bytes: int = 0  # routed experts on the GPU
    cpu_tensors: tuple[str, ...] = ()  # routed expert tensors kept in RAM
    gpu_bytes: int | None = None  # what was planned for (the budget)
    gpu_need_bytes: int = 0  # the estimate of what the GPU holds under this plan
    kv_bytes: int = 0
    compute_bytes: int = 0
    load_mode: str | None = None
    per_token: dict = field(default_factory=dict)  # weight bytes one token reads: gpu, ram, disk

    @property
    def resident_fraction(self) -> float:
        return self.gpu_routed_bytes / self.routed_bytes if self.routed_bytes else 1.0

    def as_json(self) -> dict:
        return {**asdict(self), "resident_fraction": round(self.resident_fraction, 4)}


def compute_bytes(index: MoeIndex, work: Workload, experts_in_ram: bool) -> int:
    """The GPU compute buffers of one ubatch: the attention mask (and the scores without flash
    attention), the activations and the logits of the outputs (llama-server asks for one per
    slot, not one per token); with experts in RAM also the copy of the largest expert tensor that
    a prompt batch is computed with on the GPU (the H200 run: 133.5 MiB more with experts in RAM,
    where that tensor was 157.5 MiB and a whole layer's experts 373.5)."""
    ub, kv = work.ubatch, work.kv_tokens(index)
    need = ub * (2 * kv + 24 * index.n_embd + 12 * index.expert_used_count * index.n_ff_exp)
    if work.flash_attn == "off":
        need += ub * kv * index.n_head * 4
    need += 4 * index.n_vocab * max(work.parallel or 1, 1)
    largest = max((t.nbytes for layer in index.layers for t in layer.routed), default=0)
    return int(need * COMPUTE_SLACK) + (largest if experts_in_ram else 0)


def gpu_overhead(index: MoeIndex, work: Workload, experts_in_ram: bool) -> tuple[int, int]:
    """(KV cache bytes, compute buffer bytes) on the GPU."""
    kv = kv_bytes_per_token(index, work.type_k, work.type_v) * work.kv_tokens(index)
    return kv, compute_bytes(index, work, experts_in_ram)


def budget_for(index: MoeIndex, work: Workload, fraction: float) -> int:
    """The GPU memory at which this planner keeps `fraction` of the routed experts on the GPU:
    the card size the benchmark emulates for each share of experts resident."""
    kv, compute = gpu_overhead(index, work, fraction < 1)
    return (index.dense_bytes - index.input_bytes + kv + compute + GPU_RESERVE
            + int(index.routed_bytes * fraction))


def plan(index: MoeIndex, memory: Memory, work: Workload, device: str) -> Placement:
    if not index.moe:
        return Placement(device, (), "a dense model: no experts to place")
    if device == "cpu":
        return _cpu(index, memory, work)
    if memory.gpu_bytes is None:
        return Placement(device, (), f"the {device} GPU's free memory is unknown: placement is "
                         "left to llama.cpp (`1bit moe plan --budget-gib G` plans for a size)",
                         routed_bytes=index.routed_bytes)
    return _gpu(index, memory, work, device)


def _cpu(index: MoeIndex, memory: Memory, work: Workload) -> Placement:
    kv = kv_bytes_per_token(index, work.type_k, work.type_v) * work.kv_tokens(index)
    need = index.weight_bytes + kv
    reason = ("cpu route: llama.cpp keeps every weight in RAM, memory-mapped; nothing to place "
              f"({_gib(need)} with the KV cache, {_gib(memory.ram_bytes)} of RAM available)")
    warnings: tuple[str, ...] = ()
    disk = 0.0
    if need + RAM_RESERVE > memory.ram_bytes:
        short = need + RAM_RESERVE - memory.ram_bytes
        disk = _disk_share(index.routed_bytes, short) * _per_token(index.routed_bytes, index)
        warnings = (f"RAM ({_gib(memory.ram_bytes)} available) cannot hold the model and its KV "
                    f"cache ({_gib(need)}): the experts stay memory-mapped and decode reads up to "
                    f"{_mib(disk)} per token from disk",)
    return Placement("cpu", (), reason, warnings, routed_bytes=index.routed_bytes,
                     kv_bytes=kv, per_token={"gpu": 0, "ram": index.bytes_per_token - int(disk),
                                             "disk": int(disk)})


def _gpu(index: MoeIndex, memory: Memory, work: Workload, device: str) -> Placement:
    budget = memory.gpu_bytes or 0
    dense = index.dense_bytes - index.input_bytes
    kv, compute = gpu_overhead(index, work, False)
    need_all = dense + index.routed_bytes + kv + compute + GPU_RESERVE
    tokens = work.kv_tokens(index)
    common: dict = dict(routed_bytes=index.routed_bytes, gpu_bytes=budget, kv_bytes=kv)
    if need_all <= budget:
        return Placement(
            device, (), f"everything fits on the GPU: {_gib(need_all)} of {_gib(budget)} "
            f"{memory.gpu_source} (weights {_gib(dense + index.routed_bytes)}, KV cache for "
            f"{tokens} tokens {_gib(kv)}, compute {_gib(compute)})",
            gpu_routed_bytes=index.routed_bytes, gpu_need_bytes=need_all, compute_bytes=compute,
            per_token={"gpu": index.bytes_per_token, "ram": 0, "disk": 0}, **common)
    kv, compute = gpu_overhead(index, work, True)
    room = budget - dense - kv - compute - GPU_RESERVE
    on_gpu, partial = _fill(index.layers, room)
    gpu_routed = sum(layer.routed_bytes for layer in on_gpu) + sum(t.nbytes for t in partial)
    flags, cpu_tensors = _flags(index.layers, on_gpu, partial)
    warnings: list[str] = []
    if room < 0:
        warnings.append(
            f"even the dense weights, the KV cache for {tokens} tokens and the compute buffers "
            f"({_gib(dense + kv + compute + GPU_RESERVE)}) exceed the {_gib(budget)} "
            f"{memory.gpu_source}: lower -c or --parallel, or take a smaller quant")
    cpu_routed = index.routed_bytes - gpu_routed
    ram_need = cpu_routed + index.input_bytes + RAM_RESERVE
    ram_tokens = _per_token(cpu_routed, index)
    disk = 0.0
    if ram_need <= memory.ram_bytes:
        lock = memory.lockable_bytes is None or memory.lockable_bytes >= cpu_routed + index.input_bytes
        mode = "mlock" if lock else "none"
        held = ("read into RAM and pinned (--load-mode mlock)" if lock else
                f"read into RAM, not pinned: this process may lock only "
                f"{_mib(memory.lockable_bytes or 0)} (ulimit -l) (--load-mode none)")
    else:
        mode = "mmap"
        disk = _disk_share(cpu_routed, ram_need - memory.ram_bytes) * ram_tokens
        held = "left memory-mapped (--load-mode mmap)"
        warnings.append(
            f"RAM ({_gib(memory.ram_bytes)} available) cannot hold the {_gib(cpu_routed)} of "
            f"experts kept off the GPU: they stay memory-mapped and decode reads up to "
            f"{_mib(disk)} per token from disk")
    flags += ["--load-mode", mode]
    in_ram = len(index.layers) - len(on_gpu) - (1 if partial else 0)
    reason = (
        f"{_gib(budget)} {memory.gpu_source} holds the dense weights ({_gib(dense)}), the KV "
        f"cache for {tokens} tokens ({_gib(kv)}), compute ({_gib(compute)}) and "
        f"{_gib(gpu_routed)} of the {_gib(index.routed_bytes)} of experts "
        f"({gpu_routed / index.routed_bytes:.0%}: {len(on_gpu)} of {len(index.layers)} layers"
        + (" and part of one more" if partial else "") + f"); the experts of {in_ram} layers"
        + (" and the rest of that one" if partial else "")
        + f" are {held}; a token reads {_mib(ram_tokens)} of experts from RAM")
    return Placement(
        device, tuple(flags), reason, tuple(warnings), gpu_routed_bytes=gpu_routed,
        cpu_tensors=tuple(cpu_tensors), gpu_need_bytes=dense + gpu_routed + kv + compute
        + GPU_RESERVE, compute_bytes=compute, load_mode=mode,
        per_token={"gpu": dense + _per_token(gpu_routed, index),
                   "ram": int(ram_tokens - disk), "disk": int(disk)}, **common)


def _fill(layers: tuple[ExpertLayer, ...], room: int) -> tuple[list[ExpertLayer], tuple[Tensor, ...]]:
    """The last layers whose experts fit in `room` whole, and of the layer before them the
    expert tensors that fit in what is left (the subset of most bytes)."""
    on_gpu: list[ExpertLayer] = []
    left = room
    for layer in reversed(layers):
        if layer.routed_bytes > left:
            break
        on_gpu.insert(0, layer)
        left -= layer.routed_bytes
    partial: tuple[Tensor, ...] = ()
    if len(on_gpu) < len(layers) and left > 0:
        nxt = layers[len(layers) - len(on_gpu) - 1]
        groups = _groups(nxt.routed)
        best = 0
        for n in range(1, len(groups)):
            for combo in combinations(groups, n):
                size = sum(t.nbytes for g in combo for t in g[1])
                if best < size <= left:
                    best, partial = size, tuple(t for g in combo for t in g[1])
    return on_gpu, partial


def _groups(tensors: tuple[Tensor, ...]) -> list[tuple[str, list[Tensor]]]:
    """A layer's routed tensors by the pattern that moves them (`ffn_down_exps`: its weight and
    any bias or scale together)."""
    groups: dict[str, list[Tensor]] = {}
    for t in tensors:
        found = ROUTED.search(t.name)
        groups.setdefault(found[0] if found else t.name, []).append(t)
    return list(groups.items())


def _flags(layers: tuple[ExpertLayer, ...], on_gpu: list[ExpertLayer],
           partial: tuple[Tensor, ...]) -> tuple[list[str], list[str]]:
    gpu = {t.name for layer in on_gpu for t in layer.routed} | {t.name for t in partial}
    cpu_tensors = [t.name for layer in layers for t in layer.routed if t.name not in gpu]
    if not on_gpu and not partial:
        return ["--cpu-moe"], cpu_tensors
    first = on_gpu[0].index if on_gpu else layers[-1].index + 1
    if not partial:
        return ["--n-cpu-moe", str(first)], cpu_tensors
    layer = layers[len(layers) - len(on_gpu) - 1]
    rest = [pattern for pattern, tensors in _groups(layer.routed)
            if not any(t in partial for t in tensors)]
    override = ",".join(f"blk\\.{layer.index}\\.{pattern.lstrip('.')}=CPU" for pattern in rest)
    return ["--n-cpu-moe", str(layer.index), "-ot", override], cpu_tensors


def _per_token(routed: int | float, index: MoeIndex) -> int:
    return int(routed * index.used_fraction)


def _disk_share(held: int, short: int) -> float:
    """The share of `held` bytes RAM cannot keep when it is `short` bytes short."""
    return min(1.0, max(0.0, short / held)) if held else 0.0


_gib = _mib = size


def describe(p: Placement) -> str:
    lines = [f"{p.device}: {p.reason}"]
    lines.append("llama-server flags: " + (" ".join(_quoted(f) for f in p.flags) if p.flags
                                            else "(none)"))
    lines += [f"warning: {w}" for w in p.warnings]
    return "\n".join(lines)


def _quoted(flag: str) -> str:
    return f"'{flag}'" if any(c in flag for c in "\\|()*") else flag
