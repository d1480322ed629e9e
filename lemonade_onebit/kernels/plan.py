"""What the rotation does to each tensor of a model, decided from names and shapes alone.

The residual stream is rotated by Q (n_embd): h -> h Q. RMSNorm commutes with Q once its gain g
is folded into the matrices that read the normalised stream (W -> W diag(g), the gain set to 1),
so the full-precision model computes exactly what it did:

- matrices that read the stream (q, k, v, gate, up, the output head) and the embeddings:
  W -> W diag(g) Q (their rows, along the input dimension);
- matrices that write into it (attention output, ffn down) and their biases: W -> Qᵀ W;
- per attention head, V's output and the attention output's input are rotated by a second
  Hadamard R of the head size (W_v -> Rᵀ W_v per head, W_o -> W_o R per head), which softmax
  attention carries through unchanged; it spreads the outliers of W_o's rows too;
- a tied output head is written out as its own tensor, since the embeddings and the head then
  differ by the folded gain.

Only the architectures whose every tensor is accounted for here are rotated; anything else is
refused with the tensor or the reason, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# llama.cpp architectures (general.architecture) this plan folds exactly. All three are
# pre-norm RMSNorm transformers with a plain residual stream: qwen2 adds q/k/v biases, qwen3
# per-head q/k norms, which act on rotated-away dimensions and are copied.
ARCHITECTURES = ("llama", "qwen2", "qwen3")
WHY_NOT = {
    "gemma": "its RMSNorm gain is (1 + w) and the embeddings are scaled by sqrt(n_embd)",
    "gemma2": "its RMSNorm gain is (1 + w), with post-norms inside the residual branch",
    "gemma3": "its RMSNorm gain is (1 + w), with post-norms inside the residual branch",
    "phi3": "its q, k and v are one fused tensor",
    "olmo2": "its norms sit after the attention and ffn, inside the residual branch",
    "qwen3moe": "mixture-of-experts layers are not folded yet",
    "llama4": "mixture-of-experts layers are not folded yet",
    "bitnet": "its sub-norms inside the attention and ffn read unrotated activations",
}

GLOBAL = {
    "token_embd.weight": ("embed",),
    "output_norm.weight": ("norm",),
    "output.weight": ("read", "output_norm.weight"),
    "rope_freqs.weight": ("copy",),
}
LAYER = {
    "attn_norm.weight": ("norm",),
    "ffn_norm.weight": ("norm",),
    "attn_q.weight": ("read", "attn_norm.weight"),
    "attn_k.weight": ("read", "attn_norm.weight"),
    "attn_v.weight": ("read-v", "attn_norm.weight"),
    "ffn_gate.weight": ("read", "ffn_norm.weight"),
    "ffn_up.weight": ("read", "ffn_norm.weight"),
    "attn_output.weight": ("write-o",),
    "ffn_down.weight": ("write",),
    "attn_q.bias": ("copy",),
    "attn_k.bias": ("copy",),
    "attn_v.bias": ("v-bias",),
    "attn_output.bias": ("write",),
    "ffn_gate.bias": ("copy",),
    "ffn_up.bias": ("copy",),
    "ffn_down.bias": ("write",),
    "attn_q_norm.weight": ("copy",),
    "attn_k_norm.weight": ("copy",),
}
LAYER_NAME = re.compile(r"^blk\.(\d+)\.(.+)$")


class Unsupported(ValueError):
    """The model cannot be rotated exactly; the message says why."""


@dataclass(frozen=True)
class Step:
    """How one output tensor is made from one source tensor.

    gain: the norm whose weights multiply the input columns first. rotate_in / rotate_out:
    "residual" (Q, n_embd) or "head" (R, per head) along the input (last) axis or the output
    (first) axis. ones: the tensor becomes all ones (a folded norm gain)."""

    name: str
    source: str
    gain: str | None = None
    rotate_in: str | None = None
    rotate_out: str | None = None
    ones: bool = False

    @property
    def rotated(self) -> bool:
        return bool(self.rotate_in or self.rotate_out or self.gain or self.ones)


def check_architecture(arch: str) -> None:
    if arch not in ARCHITECTURES:
        why = WHY_NOT.get(arch, "its layers are not among those this rotation folds exactly")
        raise Unsupported(f"architecture {arch!r} cannot be rotated: {why} (rotated: "
                          f"{', '.join(ARCHITECTURES)})")


def rotation_plan(arch: str, names: list[str], head_rotation: bool) -> list[Step]:
    """One Step per output tensor, in the source's order (a tied head after the output norm).
    `head_rotation`: whether the per-head R is applied (the head size has a Hadamard matrix)."""
    check_architecture(arch)
    present = set(names)
    if "token_embd.weight" not in present:
        raise Unsupported("no token_embd.weight: not a llama-layout model")
    steps = []
    for name in names:
        layer = LAYER_NAME.match(name)
        rule = LAYER.get(layer.group(2)) if layer else GLOBAL.get(name)
        if rule is None:
            raise Unsupported(f"tensor {name}: the rotation does not know how it reads or writes "
                              "the residual stream")
        kind = rule[0]
        gain = None
        if len(rule) > 1:
            gain = f"blk.{layer.group(1)}.{rule[1]}" if layer else rule[1]
            if gain not in present:
                raise Unsupported(f"tensor {name}: its norm {gain} is missing")
        head = "head" if head_rotation else None
        steps.append({
            "embed": Step(name, name, rotate_in="residual"),
            "norm": Step(name, name, ones=True),
            "read": Step(name, name, gain=gain, rotate_in="residual"),
            "read-v": Step(name, name, gain=gain, rotate_in="residual", rotate_out=head),
            "v-bias": Step(name, name, rotate_in=head),
            "write": Step(name, name, rotate_out="residual"),
            "write-o": Step(name, name, rotate_in=head, rotate_out="residual"),
            "copy": Step(name, name),
        }[kind])
        if name == "output_norm.weight" and "output.weight" not in present:
            steps.append(Step("output.weight", "token_embd.weight", gain=name,
                              rotate_in="residual"))
    if "output_norm.weight" not in present:
        raise Unsupported("no output_norm.weight: not a llama-layout model")
    return steps
