"""How many request slots a llama-server on a GPU gets, and how much context each: a pure function
of the device's free memory, the model's weights and its KV cache per token.

llama-server holds one KV cache for all its slots. Given `-np N -c C` it splits C over the N slots
(each gets C/N, rounded up to a multiple of 256), unless the cache is unified (`-kvu`; llama-server
turns it on itself only when it picks the slot count), where every slot may use all of C but they
share it. Either way, for N slots to hold `ctx` tokens each at once, C = N x ctx: that is what the
plan passes. The user's `-c` is the context of one request.

A token's KV cache is, over all layers, K and V of every KV head: layers x kv_heads x (key_length
+ value_length) elements of the cache type. Sliding-window, recurrent and latent-attention layers
store less, so for them this is an upper bound: the plan may give fewer slots, never too many.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lemonade_onebit.errors import UsageError
from lemonade_onebit.ggufmeta import GgufFacts

# Per-request context when the user gives no `-c` (the model's trained context when that is
# smaller): a conversation with a few pages of document in it, while 64 slots of a 0.6B model
# take 56 GiB (Qwen3-0.6B: 112 KiB a token); at the trained 40,960 tokens they would need 280 GiB.
DEFAULT_CTX = 8192
MAX_AUTO_SLOTS = 64  # the most `--parallel auto` gives: the batch sizes measured on the H200
MAX_SLOTS = 256  # llama.cpp's LLAMA_MAX_SEQ: the most sequences one context runs
CTX_STEP = 256  # llama.cpp pads each slot's context to a multiple of this
GIB = 1 << 30
# Bytes per element of each KV cache type llama-server accepts (`-ctk`/`-ctv`); a block type
# holds 32 elements in the bytes shown.
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32,
                    "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}


@dataclass(frozen=True)
class KvShape:
    """What of a model's shape decides its KV cache, read from its GGUF metadata."""

    layers: int
    kv_heads: int
    key_length: int
    value_length: int
    train_ctx: int | None = None

    @classmethod
    def from_facts(cls, facts: GgufFacts) -> KvShape | None:
        """The shape, or None when the metadata lacks a part of it. Missing head sizes default
        as llama.cpp's do (embedding_length / head_count); a per-layer list of KV heads (which
        the facts leave out) counts as head_count, an upper bound."""
        head = (facts.embedding_length // facts.head_count
                if facts.embedding_length and facts.head_count else None)
        key = facts.key_length or head
        value = facts.value_length or head
        kv_heads = facts.head_count_kv or facts.head_count
        if not (facts.block_count and kv_heads and key and value):
            return None
        return cls(facts.block_count, kv_heads, key, value, facts.context_length)

    def bytes_per_token(self, type_k: str = "f16", type_v: str = "f16") -> float:
        """A type llama-server would refuse counts as f32, the largest."""
        k = CACHE_TYPE_BYTES.get(type_k.lower(), 4.0)
        v = CACHE_TYPE_BYTES.get(type_v.lower(), 4.0)
        return self.layers * self.kv_heads * (self.key_length * k + self.value_length * v)


@dataclass(frozen=True)
class SlotAsk:
    """What the command line asks: slots (`--parallel N`, `-np N`), the context of one request
    (`1bit serve -c`), the executor's own total context (`-- -c`), and the cache's kind."""

    slots: int | None = None
    ctx: int | None = None
    executor_ctx: int | None = None
    unified: bool = False
    type_k: str = "f16"
    type_v: str = "f16"
    kv_on_host: bool = False  # `-nkvo`: the KV cache stays in host memory


@dataclass(frozen=True)
class Room:
    """The devices' free memory now, in bytes, summed over the `devices` GPUs the route uses."""

    free: int
    devices: int = 1

    @property
    def headroom(self) -> int:
        """Kept free for what is not weights or KV: the CUDA context and library workspaces
        (about 0.5 GiB a GPU), the compute buffers (a 512-token micro-batch's logits alone are
        0.3 GiB for a 152k vocabulary) and fragmentation."""
        return self.devices * GIB + self.free // 20


@dataclass(frozen=True)
class SlotPlan:
    """What to pass: `-np slots` and `-c ctx` (None: leave that flag as it is), and why."""

    slots: int | None
    ctx: int | None
    message: str


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def kib(n: float) -> str:
    return f"{n / 1024:.1f}".removesuffix(".0") + " KiB"


def _round_up(n: int, step: int = CTX_STEP) -> int:
    return max(step, -(-n // step) * step)


def plan_slots(ask: SlotAsk, room: Room | None, weights: int, shape: KvShape | None,
               max_auto: int = MAX_AUTO_SLOTS, draft_per_token: float = 0.0) -> SlotPlan:
    """The slots and total context for a llama-server on a GPU; UsageError, with the numbers,
    when what the user asked for cannot fit. Explicit values win; with none, as many slots of the
    default context as the free memory holds, at most `max_auto`. Where the memory or the model's
    shape is unknown, or the defaults do not fit one slot, llama-server keeps its own slots.
    `draft_per_token`: the KV cache a draft model (`--mtp`, `--dflash`) adds to each token."""
    if ask.slots is not None and not 1 <= ask.slots <= MAX_SLOTS:
        raise UsageError(f"--parallel {ask.slots}: llama-server runs 1 to {MAX_SLOTS} slots")
    per_token = shape.bytes_per_token(ask.type_k, ask.type_v) + draft_per_token if shape else None
    fit = _Fit(room, weights, per_token) if room and per_token and not ask.kv_on_host else None
    unknown = ("the KV cache stays in host memory (-nkvo)" if ask.kv_on_host
               else "the device's free memory is unknown" if room is None
               else "the model's KV cache size is unknown")

    if ask.executor_ctx is not None:  # `-- -c C`: llama-server's total, as llama-server reads it
        total = ask.executor_ctx
        if ask.slots is not None and not ask.unified:
            total = _round_up(-(-total // ask.slots)) * ask.slots
        what = f"-- -c {ask.executor_ctx}" + (f" with {ask.slots} slots" if ask.slots else "")
        if fit:
            fit.check(total, what, None)
        if ask.slots is None:
            return SlotPlan(None, None, f"-- -c {ask.executor_ctx}: llama-server's own slots "
                            f"share it{fit.says(total) if fit else ''}")
        return SlotPlan(ask.slots, None, _describe(ask.slots, total // ask.slots, ask.unified,
                                                   what, fit))

    default = min(DEFAULT_CTX, shape.train_ctx) if shape and shape.train_ctx else DEFAULT_CTX
    per = _round_up(ask.ctx or default)
    if ask.slots is not None:
        what = f"--parallel {ask.slots}" + (f" -c {ask.ctx}" if ask.ctx else "")
        if fit:
            fit.check(ask.slots * per, what, per)
        why = what if fit else f"{what}; {unknown}: not checked"
        return SlotPlan(ask.slots, ask.slots * per, _describe(ask.slots, per, ask.unified, why, fit))

    if fit is None:
        return SlotPlan(None, None, f"--parallel auto: {unknown}, so llama-server keeps its own "
                        "slots")
    slots = fit.slots(per)
    if slots < 1:
        if ask.ctx is not None:
            fit.check(per, f"-c {ask.ctx}", per)  # raises: not even one slot fits
        return SlotPlan(None, None, f"--parallel auto: not one slot of {per} tokens fits "
                        f"beside the weights ({gib(fit.weights)}) in {gib(fit.room.free)} free, so "
                        "llama-server keeps its own slots")
    chosen = min(slots, max_auto)
    why = (f"--parallel auto: {slots} fit" + (f", at most {max_auto}" if slots > max_auto else ""))
    return SlotPlan(chosen, chosen * per, _describe(chosen, per, ask.unified, why, fit))


class _Fit:
    """The arithmetic of one device's room: what a number of KV tokens costs, and what fits."""

    def __init__(self, room: Room, weights: int, per_token: float) -> None:
        self.room, self.weights, self.per_token = room, weights, per_token
        self.budget = room.free - weights - room.headroom  # bytes left for the KV cache

    def kv(self, tokens: int) -> float:
        return tokens * self.per_token

    def slots(self, per: int) -> int:
        return max(0, math.floor(self.budget / (per * self.per_token)))

    def most_tokens(self, slots: int) -> int:
        """The most context each of `slots` slots can have, in steps of CTX_STEP (0: none)."""
        if self.budget <= 0:
            return 0
        return math.floor(self.budget / (slots * self.per_token)) // CTX_STEP * CTX_STEP

    def says(self, tokens: int) -> str:
        return f", KV {gib(self.kv(tokens))} of {gib(self.room.free)} free"

    def check(self, tokens: int, what: str, per: int | None) -> None:
        kv = self.kv(tokens)
        if kv <= self.budget:
            return
        gpu = "the GPU has" if self.room.devices == 1 else f"the {self.room.devices} GPUs have"
        hints = []
        if per is not None and self.slots(per) >= 1:
            hints.append(f"{self.slots(per)} slots of {per} tokens fit")
        slots = tokens // per if per else 1
        most = self.most_tokens(slots)
        if most >= CTX_STEP and per is None:
            hints.append(f"at most {most} tokens fit")
        elif most >= CTX_STEP:
            hints.append(f"{slots} slot{'s' if slots > 1 else ''} of {most} tokens"
                         + ("" if hints else " fit"))
        fits = f" ({', or '.join(hints)})" if hints else ""
        raise UsageError(
            f"{what} needs {gib(kv + self.weights + self.room.headroom)} of GPU memory: KV cache "
            f"{gib(kv)} ({tokens} tokens x {kib(self.per_token)}) + weights "
            f"{gib(self.weights)} + {gib(self.room.headroom)} for compute buffers, but {gpu} "
            f"{gib(self.room.free)} free{fits}: ask for fewer slots (--parallel) or less context "
            "(-c), or free the GPU")


def _describe(slots: int, per: int, unified: bool, why: str, fit: _Fit | None) -> str:
    total = slots * per
    count = f"{slots} slot{'s' if slots > 1 else ''}"
    shape = (f"{count} sharing {total} tokens (unified KV cache)" if unified
             else f"{count} x {per} tokens")
    where = (f", KV {gib(fit.kv(total))} of {gib(fit.room.free)} free (weights {gib(fit.weights)},"
             f" {gib(fit.room.headroom)} kept for compute)") if fit else ""
    return f"{shape}{where}; {why}"
