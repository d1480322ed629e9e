"""Tiny random-weight Hugging Face models, one per architecture, for the registry's smoke check.

Run by file path with a Python that has torch and transformers (`make registry-check` makes
`.venv-registry/`); it imports nothing of this package, so the package's own environment never
needs torch. A worker: one JSON request per stdin line, one JSON answer per stdout line, so torch
is imported once for every model:

    {"tokenizers": DIR, "gguf": SMOLLM2.gguf}  -> {"ok": true, "bpe": DIR/bpe, "spm": DIR/spm}
    {"arch": "Qwen3ForCausalLM", "out": DIR, "tokenizer": DIR/bpe}
        -> {"ok": true, "model_type": ...} or {"ok": false, "reason": ...}
    {"versions": true}                         -> {"ok": true, "torch": ..., "transformers": ...}

A model is its transformers config class at its defaults with every size made small (`SMALL`, at
every level of the config: text, vision and audio parts), its per-layer lists (layer types, hybrid
patterns) cut to the fewest layers that still hold each kind, random weights (seed 0), and the
embedded SmolLM2's tokenizer (`bpe`) or a SentencePiece model trained here on its vocabulary
(`spm`, for converters that read `tokenizer.model`). Random weights prove the converter and the
executor accept the architecture, not that a real model of it is right.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from pathlib import Path

# Sizes set wherever a config has the key; heads * head_dim == hidden_size holds for the text part.
SMALL = {
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8, "v_head_dim": 16, "n_embd": 64, "n_head": 4, "n_inner": 128,
    "d_model": 64, "d_ff": 128, "num_heads": 4, "d_kv": 16, "ffn_dim": 128,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "ssm_state_size": 16, "state_size": 16, "mamba_d_state": 16,
    "mamba_num_heads": 8, "mamba_n_heads": 8, "mamba_head_dim": 16, "mamba_d_head": 16,
    "n_groups": 1, "mamba_n_groups": 1, "time_step_rank": 8, "query_pre_attn_scalar": 16,
    "global_head_dim": 16, "num_global_key_value_heads": 2, "hidden_size_per_layer_input": 16,
    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "num_nextn_predict_layers": 0,
    "rotary_dim": 8, "partial_rotary_dim": 8, "ffn_hidden_size": 128, "multiple_of": 16,
}
# The parts of a composite config that are not the language model: one layer of small width.
SIDE_PARTS = ("vision_config", "audio_config", "speech_config", "vision_tower_config")
SIDE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "depth": 1,
        "num_attention_heads": 2, "num_heads": 2, "num_layers": 1, "out_hidden_size": 64,
        "embed_dim": 32, "hidden_dim": 32, "projection_dim": 64}
# Keys hub configs of a model_type carry that transformers no longer writes, and the key whose
# value they hold (a dotted path into the config): the converter reads them.
HUB_KEYS = {"gpt2": {"n_ctx": "n_positions"},
            "gpt_neox": {"rotary_pct": "rope_parameters.partial_rotary_factor"},
            "t5": {"decoder_start_token_id": "pad_token_id"}}
# Hybrids whose transformers default has one kind of layer where every hub checkpoint mixes two
# (LFM2: all attention; Granite 4 hybrid: all Mamba): the layout of a real one, in two layers.
LAYOUTS: dict[str, dict[str, list]] = {
    "lfm2": {"layer_types": ["conv", "full_attention"], "full_attn_idxs": [1]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"]}}
# Values hub configs spell otherwise than transformers writes them back, which the converter
# compares against (Granite 4: `mamba`/`attention`, which transformers 5 reads as these).
HUB_VALUES = {"granitemoehybrid": {"layer_types": {"linear_attention": "mamba",
                                                   "full_attention": "attention"}}}
# Model types whose converter writes the real checkpoints' M-RoPE split ([11, 11, 10] pairs of a
# 256-wide head) when the config names none: a small head gets a split that fits its rotary part.
MROPE = ("qwen3_5_text", "qwen3_5_moe_text")
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "num_decoder_layers", "n_layers")
MAX_LAYERS = 8


def _per_layer(config: dict, layers: int) -> list[str]:
    return [k for k, v in config.items()
            if isinstance(v, (list, str)) and len(v) == layers and layers > 1
            and k not in ("model_type", "_name_or_path", "transformers_version")]


def _fewest_layers(config: dict, layers: int) -> int:
    """The fewest first layers that hold every kind each per-layer list has (at least 2)."""
    need = 2
    for key in _per_layer(config, layers):
        seq = config[key]
        kinds = set(seq)
        seen: set = set()
        for i, item in enumerate(seq):
            seen.add(item)
            if seen == kinds:
                need = max(need, i + 1)
                break
    return min(need, layers, MAX_LAYERS)


def shrink(config: dict, side: bool = False) -> dict:
    """A copy of a config dict with every size small, at every level."""
    out = dict(config)
    sizes = SIDE if side else SMALL
    for key, value in sizes.items():
        if key in out and isinstance(out[key], int) and not isinstance(out[key], bool):
            out[key] = value
    hidden, ffn = config.get("hidden_size"), config.get("intermediate_size")
    if not side and isinstance(hidden, int) and isinstance(ffn, int) and hidden > 0:
        # the default's ffn/hidden ratio (Phi-2's loader assumes 4x), in multiples of 16
        out["intermediate_size"] = max(32, round(SMALL["hidden_size"] * ffn / hidden / 16) * 16)
    for heads, kv in (("num_attention_heads", "num_key_value_heads"),
                      ("num_attention_heads", "num_kv_heads"), ("n_head", "n_head_kv")):
        if config.get(kv) is not None and config.get(kv) == config.get(heads):
            out[kv] = out[heads]  # full multi-head attention stays so (Phi-2's loader needs it)
    if not side:
        layers = next((out[k] for k in LAYER_KEYS if isinstance(out.get(k), int)), None)
        if layers:
            n = _fewest_layers(config, layers)
            for key in _per_layer(config, layers):
                out[key] = config[key][:n]
            for key, value in config.items():  # settings keyed by layer index
                if isinstance(value, dict) and value and all(
                        str(k).isdigit() for k in value):
                    out[key] = {k: v for k, v in value.items() if int(k) < n}
            for key in LAYER_KEYS:
                if isinstance(out.get(key), int):
                    out[key] = n
        if isinstance(out.get("max_position_embeddings"), int):
            out["max_position_embeddings"] = min(out["max_position_embeddings"], 4096)
    rope = out.get("rope_parameters")
    if out.get("model_type") in MROPE and isinstance(rope, dict) and "mrope_section" not in rope:
        pairs = int(out.get("head_dim", 16) * rope.get("partial_rotary_factor", 1.0)) // 2
        out["rope_parameters"] = {**rope, "mrope_section": [pairs - pairs // 2, pairs // 2, 0]}
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value:
            out[key] = shrink(value, side or key in SIDE_PARTS)
    return out


def _set_tokens(config: dict, vocab: int, ids: dict) -> dict:
    """The tokenizer's vocabulary size and special ids; a default id the vocabulary does not
    hold (a pad id of 32000 over 1,000 pieces) becomes None."""
    out = dict(config)
    if "vocab_size" in out:
        out["vocab_size"] = vocab
    for key, value in ids.items():
        if key not in out:
            continue
        if value is not None:
            out[key] = value
        elif isinstance(out[key], int) and out[key] >= vocab:
            out[key] = None
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value and key not in SIDE_PARTS:
            out[key] = _set_tokens(value, vocab, ids)
    return out


def prepare_tokenizers(folder: Path, gguf: Path) -> dict:
    from transformers import AutoTokenizer

    bpe, spm = folder / "bpe", folder / "spm"
    if not (bpe / "tokenizer.json").is_file():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(bpe)
        # the class hub BPE models name, which the converter's older transformers reads too
        # (transformers 5 writes its own `TokenizersBackend`)
        config = json.loads((bpe / "tokenizer_config.json").read_text())
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        (bpe / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if not (spm / "tokenizer.model").is_file():
        import sentencepiece

        vocab = json.loads((bpe / "tokenizer.json").read_text())["model"]["vocab"]
        words = sorted(w.lstrip("Ġ") for w in vocab if w.lstrip("Ġ").isalpha())
        spm.mkdir(parents=True, exist_ok=True)
        corpus = spm / "corpus.txt"
        corpus.write_text("\n".join(" ".join(words[i:i + 12]) for i in range(0, len(words), 12)))
        sentencepiece.SentencePieceTrainer.train(
            input=str(corpus), model_prefix=str(spm / "tokenizer"), vocab_size=1000,
            model_type="bpe", byte_fallback=True, character_coverage=1.0, num_threads=1,
            user_defined_symbols=["<|im_start|>", "<|im_end|>"], minloglevel=2)
        corpus.unlink()
        (spm / "tokenizer.vocab").unlink(missing_ok=True)
        shutil.copyfile(spm / "tokenizer.model", spm / "spiece.model")  # T5's name for it
        template = json.loads((bpe / "tokenizer_config.json").read_text()).get("chat_template")
        if template is None and (bpe / "chat_template.jinja").is_file():
            template = (bpe / "chat_template.jinja").read_text()
        (spm / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "add_bos_token": True, "chat_template": template}))
    return {"ok": True, "bpe": str(bpe), "spm": str(spm)}


def _tokenizer_facts(folder: Path) -> tuple[int, dict]:
    if (folder / "tokenizer.model").is_file():
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
        return sp.get_piece_size(), {"bos_token_id": sp.bos_id(), "eos_token_id": sp.eos_id(),
                                     "pad_token_id": None}
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    return len(tok), {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
                      "pad_token_id": tok.pad_token_id}


def build(arch: str, out: Path, tokenizer: Path) -> dict:
    import torch
    import transformers

    cls = getattr(transformers, arch, None)
    if not isinstance(cls, type) or not hasattr(cls, "config_class"):
        return {"ok": False, "reason": f"transformers {transformers.__version__} has no model "
                                       f"class {arch} (a remote-code architecture)"}
    config_cls = cls.config_class
    vocab, ids = _tokenizer_facts(tokenizer)
    small = _set_tokens(shrink(config_cls().to_dict()), vocab, ids)
    small.pop("architectures", None)
    layout = LAYOUTS.get(small.get("model_type", ""))
    if layout:
        small.update(layout)
        for key in LAYER_KEYS:
            if isinstance(small.get(key), int):
                small[key] = len(layout["layer_types"])
    config = config_cls.from_dict(small)
    torch.manual_seed(0)
    model = cls(config).to(torch.float32).eval()
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    extra, renamed = HUB_KEYS.get(config.model_type), HUB_VALUES.get(config.model_type)
    if extra or renamed:
        saved = json.loads((out / "config.json").read_text())
        for key, source in (extra or {}).items():
            value = saved
            for part in source.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                saved.setdefault(key, value)
        for key, names in (renamed or {}).items():
            if isinstance(saved.get(key), list):
                saved[key] = [names.get(v, v) for v in saved[key]]
        (out / "config.json").write_text(json.dumps(saved, indent=2))
    for item in tokenizer.iterdir():
        if item.is_file():
            shutil.copy2(item, out / item.name)
    params = sum(p.numel() for p in model.parameters())
    return {"ok": True, "model_type": config.model_type, "parameters": params}


def serve_requests() -> int:
    answers = sys.stdout
    sys.stdout = sys.stderr  # what the libraries print must not mix with the answers
    for raw in sys.stdin:
        started = time.monotonic()
        try:
            request = json.loads(raw)
            if "versions" in request:
                import torch
                import transformers

                answer = {"ok": True, "torch": torch.__version__,
                          "transformers": transformers.__version__}
            elif "tokenizers" in request:
                answer = prepare_tokenizers(Path(request["tokenizers"]), Path(request["gguf"]))
            else:
                answer = build(request["arch"], Path(request["out"]), Path(request["tokenizer"]))
        except Exception as exc:  # every failure is a result with its reason
            last = traceback.extract_tb(exc.__traceback__)[-1]
            answer = {"ok": False, "reason": f"{type(exc).__name__}: {exc} "
                                             f"({Path(last.filename).name}:{last.lineno})"[:600]}
        answer["seconds"] = round(time.monotonic() - started, 2)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve_requests())
