"""The expert index of a GGUF: per layer the routed expert tensors and their bytes, shared experts,
dense weights, and what one token reads.

Read from the header alone with ggufmeta's bounded walk (arrays skipped, every count checked
against the bytes the file has), then the tensor infos after it: a 48-layer file of 18 GB is
indexed in milliseconds and no weight is read. A routed expert tensor is one llama.cpp's
`--cpu-moe` moves (`LLM_FFN_EXPS_REGEX` in common/common.h); the token embeddings are the input
layer, which llama.cpp keeps in RAM whatever `-ngl` says.
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.ggufmeta import MAX_KEY, _Header

ROUTED = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")  # llama.cpp's LLM_FFN_EXPS_REGEX
SHARED = re.compile(r"\.ffn_(up|down|gate|gate_inp)_shexp")
LAYER = re.compile(r"^blk\.(\d+)\.")
INPUT = ("token_embd.", "token_types.", "position_embd.", "per_layer_token_embd.")
MAX_DIMS = 4  # GGML_MAX_DIMS
SPLIT = re.compile(r"^(?P<stem>.*)-(?P<n>\d{5})-of-(?P<total>\d{5})\.gguf$")


@dataclass(frozen=True)
class Tensor:
    name: str
    ggml_type: str
    shape: tuple[int, ...]  # ne0 first, as llama.cpp counts
    nbytes: int


@dataclass(frozen=True)
class ExpertLayer:
    index: int
    routed: tuple[Tensor, ...]  # the tensors `--cpu-moe` / `--n-cpu-moe` move off the GPU
    shared: tuple[Tensor, ...]  # shared experts: every token uses them, they stay with the layer

    @property
    def routed_bytes(self) -> int:
        return sum(t.nbytes for t in self.routed)

    @property
    def shared_bytes(self) -> int:
        return sum(t.nbytes for t in self.shared)


@dataclass(frozen=True)
class MoeIndex:
    path: Path
    architecture: str
    file_bytes: int
    n_layer: int
    expert_count: int
    expert_used_count: int
    expert_shared_count: int
    layers: tuple[ExpertLayer, ...]  # every layer that has routed experts, in order
    dense_bytes: int  # every tensor that is not a routed expert, the input layer included
    input_bytes: int  # the token embeddings: llama.cpp keeps them in RAM
    n_embd: int
    n_head: int
    n_head_kv: int
    key_length: int
    value_length: int
    n_vocab: int
    ctx_train: int
    n_ff_exp: int  # one expert's feed-forward width

    @property
    def moe(self) -> bool:
        return self.expert_count > 0 and bool(self.layers)

    @property
    def routed_bytes(self) -> int:
        return sum(layer.routed_bytes for layer in self.layers)

    @property
    def weight_bytes(self) -> int:
        return self.dense_bytes + self.routed_bytes

    @property
    def used_fraction(self) -> float:
        """The share of a layer's routed experts one token uses."""
        return self.expert_used_count / self.expert_count if self.expert_count else 0.0

    @property
    def bytes_per_token(self) -> int:
        """Weight bytes one decoded token reads if nothing is cached: every dense weight (but the
        one embedding row it looks up) and `expert_used_count` of each layer's routed experts."""
        return (self.dense_bytes - self.input_bytes
                + round(self.routed_bytes * self.used_fraction))

    def as_json(self) -> dict:
        return {
            "path": str(self.path), "architecture": self.architecture,
            "file_bytes": self.file_bytes, "n_layer": self.n_layer,
            "expert_count": self.expert_count, "expert_used_count": self.expert_used_count,
            "expert_shared_count": self.expert_shared_count,
            "dense_bytes": self.dense_bytes, "input_bytes": self.input_bytes,
            "routed_bytes": self.routed_bytes, "bytes_per_token_uncached": self.bytes_per_token,
            "routed_bytes_per_token": round(self.routed_bytes * self.used_fraction),
            "kv_bytes_per_token": kv_bytes_per_token(self),
            "hparams": {"n_embd": self.n_embd, "n_head": self.n_head, "n_head_kv": self.n_head_kv,
                        "key_length": self.key_length, "value_length": self.value_length,
                        "n_vocab": self.n_vocab, "ctx_train": self.ctx_train,
                        "n_ff_exp": self.n_ff_exp},
            "layers": [{"index": layer.index, "routed_bytes": layer.routed_bytes,
                        "shared_bytes": layer.shared_bytes,
                        "routed": [_tensor_json(t) for t in layer.routed],
                        "shared": [_tensor_json(t) for t in layer.shared]}
                       for layer in self.layers],
        }


def _tensor_json(t: Tensor) -> dict:
    return {"name": t.name, "type": t.ggml_type, "shape": list(t.shape), "bytes": t.nbytes}


def kv_bytes_per_token(index: MoeIndex, type_k: str = "f16", type_v: str = "f16") -> int:
    """KV cache bytes one token of context costs, as the slot sizing of the GPU routes counts it
    (an upper bound for sliding-window and latent-attention layouts)."""
    from lemonade_onebit.backends.sizing import KvShape

    shape = KvShape(index.n_layer, index.n_head_kv, index.key_length, index.value_length)
    return int(shape.bytes_per_token(type_k, type_v))


def read_index(path: Path) -> MoeIndex:
    """The expert index of a GGUF (all shards of a split one); ValueError when it is unreadable."""
    path = Path(path)
    meta, tensors, size = _read_file(path)
    count = _int(meta.get("split.count"), 1)
    match = SPLIT.match(path.name)
    if count > 1:
        if match is None or int(match["n"]) != 1:
            raise ValueError(f"{path}: one shard of {count}; name the first one "
                             f"(…-00001-of-{count:05d}.gguf)")
        for n in range(2, count + 1):
            shard = path.with_name(f"{match['stem']}-{n:05d}-of-{count:05d}.gguf")
            if not shard.is_file():
                raise ValueError(f"{path}: shard {shard.name} is missing; download the whole "
                                 f"model again")
            _, more, more_size = _read_file(shard)
            tensors += more
            size += more_size
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path}: no general.architecture")

    def key(name: str, default: int = 0) -> int:
        return _int(meta.get(f"{arch}.{name}"), default)

    routed: dict[int, list[Tensor]] = {}
    shared: dict[int, list[Tensor]] = {}
    dense = input_bytes = 0
    n_vocab = 0
    for t in tensors:
        layer = LAYER.match(t.name)
        if layer and ROUTED.search(t.name):
            routed.setdefault(int(layer[1]), []).append(t)
            continue
        dense += t.nbytes
        if t.name.startswith(INPUT):
            input_bytes += t.nbytes
        if t.name == "token_embd.weight" and len(t.shape) == 2:
            n_vocab = t.shape[1]
        if layer and SHARED.search(t.name):
            shared.setdefault(int(layer[1]), []).append(t)
    widths = [t.shape[1] for i in routed for t in routed[i]
              if len(t.shape) == 3 and ".ffn_up_exps" in t.name]
    n_head = key("attention.head_count")
    n_embd = key("embedding_length")
    head = n_embd // n_head if n_head else 0
    return MoeIndex(
        path=path, architecture=arch, file_bytes=size, n_layer=key("block_count"),
        expert_count=key("expert_count"), expert_used_count=key("expert_used_count"),
        expert_shared_count=key("expert_shared_count"),
        layers=tuple(ExpertLayer(i, tuple(routed[i]), tuple(shared.get(i, ())))
                     for i in sorted(routed)),
        dense_bytes=dense, input_bytes=input_bytes, n_embd=n_embd, n_head=n_head,
        n_head_kv=key("attention.head_count_kv", n_head),
        key_length=key("attention.key_length", head),
        value_length=key("attention.value_length", head),
        n_vocab=n_vocab, ctx_train=key("context_length"),
        n_ff_exp=key("expert_feed_forward_length", widths[0] if widths else 0))


def _int(value, default: int) -> int:
    """A metadata integer; arrays (per-layer values) and absent keys give the default."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def _read_file(path: Path) -> tuple[dict, list[Tensor], int]:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise ValueError(f"{path}: empty file, not a GGUF")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            header = _TensorHeader(data, path)
            return (*header.read(), size)


class _TensorHeader(_Header):
    """ggufmeta's bounded header walk, continued over the tensor infos."""

    def read(self) -> tuple[dict, list[Tensor]]:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        start = self.at
        count = self._u(self.order + "Q")
        self.at = start
        meta = self.metadata()
        # a name length, a dimension count, one dimension, a type, an offset
        if count > (len(self.data) - self.at) // 32:
            self._fail(f"{count} tensors claimed, more than the file holds")
        tensors, ends = [], []
        for _ in range(count):
            length = self._u(self.order + "Q")
            if length > MAX_KEY:
                self._fail(f"a tensor name of {length} bytes")
            name = bytes(self.data[self._take(length):self.at]).decode("utf-8", "replace")
            n_dims = self._u(self.order + "I")
            if not 1 <= n_dims <= MAX_DIMS:
                self._fail(f"tensor {name} has {n_dims} dimensions")
            shape = tuple(self._u(self.order + "Q") for _ in range(n_dims))
            kind, offset = self._u(self.order + "I"), self._u(self.order + "Q")
            try:
                qtype = GGMLQuantizationType(kind)
                block, block_bytes = GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                self._fail(f"tensor {name} has an unknown type {kind}")
            elements = 1
            for n in shape:
                elements *= n
            if shape[0] % block or elements > 1 << 60:
                self._fail(f"tensor {name}: shape {list(shape)} does not fit type {qtype.name}")
            nbytes = elements // block * block_bytes
            tensors.append(Tensor(name, qtype.name, shape, nbytes))
            ends.append(offset + nbytes)
        alignment = meta.get("general.alignment") or 32
        if not isinstance(alignment, int) or alignment <= 0:
            self._fail(f"general.alignment is {alignment!r}")
        data_start = -(-self.at // alignment) * alignment
        if ends and data_start + max(ends) > len(self.data):
            raise ValueError(f"{self.path}: truncated: the tensors need "
                             f"{data_start + max(ends)} bytes, the file has {len(self.data)}; "
                             f"download it again")
        return meta, tensors


def size(n: float) -> str:
    """Bytes in the unit that reads best: 512 KiB, 37.5 MiB, 17.21 GiB."""
    if abs(n) >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if abs(n) >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def describe(index: MoeIndex) -> str:
    """The index as text: totals, then one line per run of layers that look alike."""
    lines = [f"{index.path.name}: {index.architecture}, {index.n_layer} layers, "
             f"{size(index.file_bytes)}"]
    if not index.moe:
        lines.append("no routed experts: a dense model, nothing to place (-ngl covers it)")
        return "\n".join(lines)
    lines += [
        f"experts: {index.expert_count} per layer, {index.expert_used_count} used per token"
        + (f", {index.expert_shared_count} shared" if index.expert_shared_count else ""),
        f"routed experts: {size(index.routed_bytes)} in {len(index.layers)} layers "
        f"({index.routed_bytes / max(index.weight_bytes, 1):.0%} of the weights)",
        f"dense weights: {size(index.dense_bytes)} (token embeddings "
        f"{size(index.input_bytes)}, kept in RAM by llama.cpp)",
        f"read per token if nothing is cached: {size(index.bytes_per_token)} "
        f"({size(round(index.routed_bytes * index.used_fraction))} of it experts)",
        f"KV cache: {size(kv_bytes_per_token(index))} per token of context (f16)",
        "layer  routed experts (type, size)                              shared",
    ]
    rows: list[tuple[list[int], str]] = []
    for layer in index.layers:
        text = ", ".join(f"{_short(t.name)} {t.ggml_type} {size(t.nbytes)}"
                         for t in layer.routed)
        text = f"{text:<57} {size(layer.shared_bytes) if layer.shared else '-'}"
        if rows and rows[-1][1] == text and rows[-1][0][-1] == layer.index - 1:
            rows[-1][0].append(layer.index)
        else:
            rows.append(([layer.index], text))
    for indices, text in rows:
        span = str(indices[0]) if len(indices) == 1 else f"{indices[0]}-{indices[-1]}"
        lines.append(f"{span:<6} {text}")
    return "\n".join(lines)


def _short(name: str) -> str:
    found = ROUTED.search(name)
    return found[0].lstrip(".") if found else name
