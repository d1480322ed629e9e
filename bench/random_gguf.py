"""Write a GGUF with random weights in a real model's shape, for speed measurements and fixtures.

Speed does not depend on what the weights learned, so a random-weight file in Qwen3-0.6B's shape
measures what the real model would. The tokenizer is copied from a vocabulary GGUF (llama.cpp ships
`models/ggml-vocab-qwen2.gguf`). Usage:

    python bench/random_gguf.py --vocab ggml-vocab-qwen2.gguf --out qwen3-0.6b-random.f16.gguf
    python bench/random_gguf.py --shape qwen3moe-30b-a3b --type q4_k_m \
        --vocab ggml-vocab-qwen2.gguf --out qwen3moe-30b-a3b-random.Q4_K_M.gguf

The `qwen3moe` shapes are mixtures of experts in llama.cpp's `qwen3moe` layout (per layer
`ffn_gate_inp` and the routed `ffn_{gate,up,down}_exps` of `expert_count` experts, `expert_used_count`
of them per token). `--type q4_k_m` writes Q4_K/Q6_K blocks directly, in llama-quantize's Q4_K_M
mix for this layout (Q6_K for `output`, and for `attn_v` and `ffn_down_exps` of the layers its
`use_more_bits` picks; Q4_K for the other matrices; norms and the router in F32), so a 30B-class
file is written in well under a minute with no F16 intermediate and no quantisation pass. The
expert blocks repeat a pool of random blocks (their values do not change the speed); the router
is fully random, so tokens route almost uniformly, as random weights do.
"""

from __future__ import annotations

import argparse

import numpy as np

SHAPES: dict[str, dict] = {
    # Qwen3-0.6B: hidden 1024, 28 layers, 16 query / 8 key-value heads of 128, ffn 3072.
    "qwen3-0.6b": dict(arch="qwen3", n_embd=1024, n_layer=28, n_head=16, n_head_kv=8,
                       head_dim=128, n_ff=3072, ctx=40960, rope_base=1_000_000.0),
    "qwen3-tiny": dict(arch="qwen3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2,
                       head_dim=16, n_ff=128, ctx=4096, rope_base=1_000_000.0),
    # Qwen3-30B-A3B: hidden 2048, 48 layers, 32 query / 4 key-value heads of 128, 128 experts of
    # ffn 768, 8 used per token; 30.5 B parameters, 3.3 B active.
    "qwen3moe-30b-a3b": dict(arch="qwen3moe", n_embd=2048, n_layer=48, n_head=32, n_head_kv=4,
                             head_dim=128, n_ff=6144, n_expert=128, n_expert_used=8, n_ff_exp=768,
                             ctx=40960, rope_base=1_000_000.0),
    # The same layout at a size Q4_K blocks can hold (every row a multiple of 256): for checking
    # a --type q4_k_m file on a small machine.
    "qwen3moe-small": dict(arch="qwen3moe", n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
                           head_dim=64, n_ff=512, n_expert=4, n_expert_used=2, n_ff_exp=256,
                           ctx=4096, rope_base=1_000_000.0),
    # A few MB (most of it the token embeddings): the test fixture of the MoE code paths.
    "qwen3moe-tiny": dict(arch="qwen3moe", n_embd=64, n_layer=4, n_head=4, n_head_kv=2,
                          head_dim=16, n_ff=128, n_expert=8, n_expert_used=2, n_ff_exp=32,
                          ctx=4096, rope_base=1_000_000.0),
}
POOL_BLOCKS = 1 << 16  # random quantised blocks the expert tensors repeat


def copy_tokenizer(writer, vocab_path: str) -> int:
    import gguf

    reader = gguf.GGUFReader(vocab_path)
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            values = [field.parts[i] for i in field.data]
            if sub == gguf.GGUFValueType.STRING:
                items = [bytes(v).decode("utf-8", "surrogateescape") for v in values]
            else:
                items = [v.tolist()[0] for v in values]
            writer.add_array(name, items)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(items)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(name, bytes(field.parts[-1]).decode("utf-8"))
        else:
            writer.add_key_value(name, field.parts[-1].tolist()[0], kind)
    return n_vocab


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama-quantize's choice of the layers that get more bits in the *_M mixes."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def tensor_list(s: dict, n_vocab: int, qtype: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape, type) of every tensor, in file order; type is F32, F16, Q4_K or Q6_K."""
    e, hd, n = s["n_embd"], s["head_dim"], s["n_layer"]
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd
    quant = qtype == "q4_k_m"

    def mat(more_bits: bool = False) -> str:
        return ("Q6_K" if more_bits else "Q4_K") if quant else "F16"

    out = [("token_embd.weight", (n_vocab, e), mat()), ("output_norm.weight", (e,), "F32")]
    if quant:  # an untied output head, as llama-quantize writes it for Q4_K_M
        out.append(("output.weight", (n_vocab, e), "Q6_K"))
    for i in range(n):
        b = f"blk.{i}."
        more = use_more_bits(i, n)
        out += [(b + "attn_norm.weight", (e,), "F32"), (b + "attn_q.weight", (q, e), mat()),
                (b + "attn_k.weight", (kv, e), mat()), (b + "attn_v.weight", (kv, e), mat(more)),
                (b + "attn_output.weight", (e, q), mat()), (b + "attn_q_norm.weight", (hd,), "F32"),
                (b + "attn_k_norm.weight", (hd,), "F32"), (b + "ffn_norm.weight", (e,), "F32")]
        if "n_expert" in s:
            x, ff = s["n_expert"], s["n_ff_exp"]
            out += [(b + "ffn_gate_inp.weight", (x, e), "F32"),
                    (b + "ffn_gate_exps.weight", (x, ff, e), mat()),
                    (b + "ffn_up_exps.weight", (x, ff, e), mat()),
                    (b + "ffn_down_exps.weight", (x, e, ff), mat(more))]
        else:
            ff = s["n_ff"]
            out += [(b + "ffn_gate.weight", (ff, e), mat()), (b + "ffn_up.weight", (ff, e), mat()),
                    (b + "ffn_down.weight", (e, ff), mat(more))]
    return out


def block_pool(rng: np.random.Generator, qtype: str) -> np.ndarray:
    """POOL_BLOCKS valid random blocks of a K-quant, as bytes: random quants and sub-block
    scales under fixed super-block scales chosen so the weights have a std near 0.02."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]][1]
    pool = rng.integers(0, 256, size=(POOL_BLOCKS, size), dtype=np.uint8)
    if qtype == "Q4_K":  # d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of quants
        pool[:, 0:2] = np.frombuffer(np.float16(1.2e-4).tobytes(), np.uint8)
        pool[:, 2:4] = np.frombuffer(np.float16(9e-4).tobytes(), np.uint8)
    else:  # Q6_K: 128 + 64 bytes of quants, 16 int8 scales, d (f16)
        pool[:, 192:208] = rng.integers(-16, 17, size=(POOL_BLOCKS, 16), dtype=np.int8).view(np.uint8)
        pool[:, 208:210] = np.frombuffer(np.float16(1.1e-4).tobytes(), np.uint8)
    return pool


def quantised(rng: np.random.Generator, pools: dict, shape: tuple[int, ...], qtype: str) -> np.ndarray:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    byte_shape = quantised_shape(shape, qtype)
    if qtype not in pools:
        pools[qtype] = block_pool(rng, qtype)
    start = int(rng.integers(0, POOL_BLOCKS))
    blocks = np.resize(np.roll(pools[qtype], -start, axis=0), (int(np.prod(shape)) // block, size))
    return blocks.reshape(byte_shape)


def main() -> int:
    import gguf
    from gguf.constants import GGMLQuantizationType

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    parser.add_argument("--type", choices=("f16", "q4_k_m"), default="f16", dest="qtype",
                        help="f16 (quantise it with llama-quantize), or q4_k_m written directly")
    parser.add_argument("--layers", type=int, help="fewer (or more) layers than the shape has")
    parser.add_argument("--std", type=float, default=0.02,
                        help="std of the F16 weights (0.02; 1.0 gives varied text)")
    parser.add_argument("--vocab", required=True, help="a GGUF holding the tokenizer to copy")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    s = dict(SHAPES[args.shape])
    if args.layers is not None:
        if args.layers < 1:
            raise SystemExit("--layers must be at least 1")
        s["n_layer"] = args.layers
    arch = s["arch"]
    writer = gguf.GGUFWriter(args.out, arch)
    layers = "" if args.layers is None else f", {s['n_layer']} layers"
    writer.add_name(f"{args.shape} random weights{layers}")
    n_vocab = copy_tokenizer(writer, args.vocab)
    writer.add_context_length(s["ctx"])
    writer.add_embedding_length(s["n_embd"])
    writer.add_block_count(s["n_layer"])
    writer.add_feed_forward_length(s["n_ff"])
    writer.add_head_count(s["n_head"])
    writer.add_head_count_kv(s["n_head_kv"])
    writer.add_key_length(s["head_dim"])
    writer.add_value_length(s["head_dim"])
    writer.add_rope_freq_base(s["rope_base"])
    writer.add_layer_norm_rms_eps(1e-6)
    if "n_expert" in s:
        writer.add_expert_count(s["n_expert"])
        writer.add_expert_used_count(s["n_expert_used"])
        writer.add_expert_feed_forward_length(s["n_ff_exp"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M if args.qtype == "q4_k_m"
                         else gguf.LlamaFileType.MOSTLY_F16)
    if args.qtype == "q4_k_m":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    rng = np.random.default_rng(args.seed)
    pools: dict[str, np.ndarray] = {}
    tensors = tensor_list(s, n_vocab, args.qtype)

    def make(name: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
        if kind == "F32" and name.endswith("norm.weight"):
            return np.ones(shape, dtype=np.float32)
        if kind in ("F32", "F16"):
            data = rng.standard_normal(shape, dtype=np.float32) * args.std
            return data.astype(np.float16 if kind == "F16" else np.float32)
        return quantised(rng, pools, shape, kind)

    # Every tensor's info first, then the data one tensor at a time: a file of many GB never
    # sits in memory whole.
    for name, shape, kind in tensors:
        if kind in ("F32", "F16"):
            dtype = np.dtype(np.float16 if kind == "F16" else np.float32)
            writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
        else:
            byte_shape = quantised_shape(shape, kind)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)),
                                   raw_dtype=GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, shape, kind in tensors:
        writer.write_tensor_data(make(name, shape, kind))
    writer.close()
    print(f"wrote {args.out}: {args.shape}{layers}, {args.qtype}, vocab {n_vocab}")
    return 0


def quantised_shape(shape: tuple[int, ...], qtype: str) -> tuple[int, ...]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    if shape[-1] % block:
        raise SystemExit(f"rows of {shape[-1]} values do not split into {qtype} blocks of {block}: "
                         f"use --type f16 for this shape")
    return (*shape[:-1], shape[-1] // block * size)


if __name__ == "__main__":
    raise SystemExit(main())
