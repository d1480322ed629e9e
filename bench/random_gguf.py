"""Write a GGUF with random weights in a real model's shape, for speed measurements.

Speed does not depend on what the weights learned, so a random-weight file in Qwen3-0.6B's shape
measures what the real model would. The tokenizer is copied from a vocabulary GGUF (llama.cpp ships
`models/ggml-vocab-qwen2.gguf`). Usage:

    python bench/random_gguf.py --vocab ggml-vocab-qwen2.gguf --out qwen3-0.6b-random.f16.gguf
"""

from __future__ import annotations

import argparse

import numpy as np

SHAPES = {
    # Qwen3-0.6B: hidden 1024, 28 layers, 16 query / 8 key-value heads of 128, ffn 3072.
    "qwen3-0.6b": dict(arch="qwen3", n_embd=1024, n_layer=28, n_head=16, n_head_kv=8,
                       head_dim=128, n_ff=3072, ctx=40960, rope_base=1_000_000.0),
    "qwen3-tiny": dict(arch="qwen3", n_embd=64, n_layer=2, n_head=4, n_head_kv=2,
                       head_dim=16, n_ff=128, ctx=4096, rope_base=1_000_000.0),
}


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


def main() -> int:
    import gguf

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    parser.add_argument("--vocab", required=True, help="a GGUF holding the tokenizer to copy")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    s = SHAPES[args.shape]
    arch = s["arch"]
    writer = gguf.GGUFWriter(args.out, arch)
    writer.add_name(f"{args.shape} random weights")
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
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    rng = np.random.default_rng(args.seed)

    def tensor(name: str, *shape: int, std: float = 0.02) -> None:
        data = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)
        writer.add_tensor(name, data)

    def norm(name: str, n: int) -> None:
        writer.add_tensor(name, np.ones(n, dtype=np.float32))

    e, hd, ff = s["n_embd"], s["head_dim"], s["n_ff"]
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd
    tensor("token_embd.weight", n_vocab, e)
    norm("output_norm.weight", e)
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", e)
        tensor(b + "attn_q.weight", q, e)
        tensor(b + "attn_k.weight", kv, e)
        tensor(b + "attn_v.weight", kv, e)
        tensor(b + "attn_output.weight", e, q)
        norm(b + "attn_q_norm.weight", hd)
        norm(b + "attn_k_norm.weight", hd)
        norm(b + "ffn_norm.weight", e)
        tensor(b + "ffn_gate.weight", ff, e)
        tensor(b + "ffn_up.weight", ff, e)
        tensor(b + "ffn_down.weight", e, ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out}: {args.shape}, vocab {n_vocab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
