"""Ternary weights (llama.cpp's TQ1_0 and TQ2_0) as Q4_0 blocks, losslessly.

A TQ block holds 256 values t·d, t in {-1, 0, +1} (TQ2_0's two bits also allow +2), d one f16
scale. Q4_0 dequantises a block of 32 as d·(q - 8), so each TQ block becomes eight Q4_0 blocks
with the same f16 scale bits and q = t + 8: dequantisation computes d·t in float32 in both cases,
bit for bit. The file is then 4.5 bits per weight instead of 1.69 or 2.06, for executors that
have Q4_0 kernels and no ternary ones.
"""

from __future__ import annotations

import numpy as np

QK_K = 256


def trits(blocks: np.ndarray, qtype) -> tuple[np.ndarray, np.ndarray]:
    """(scale bits uint16 (n,), t int8 (n, 256)) of TQ1_0 or TQ2_0 blocks (n, type_size),
    in the value order of gguf's (and ggml's) dequantisation."""
    from gguf.constants import GGMLQuantizationType as T

    n = blocks.shape[0]
    if qtype == T.TQ2_0:
        qs, d = blocks[:, :QK_K // 4], blocks[:, QK_K // 4:]
        q = qs.reshape((n, -1, 1, 32)) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape((1, 1, 4, 1))
        t = (q & 0x03).reshape((n, -1)).astype(np.int8) - np.int8(1)
    elif qtype == T.TQ1_0:
        head = (QK_K - 4 * QK_K // 64) // 5
        qs, qh, d = blocks[:, :head], blocks[:, head:head + QK_K // 64], blocks[:, head + QK_K // 64:]
        pow3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8).reshape((1, 1, 5, 1))
        qs0 = (qs[:, :32].reshape((n, -1, 1, 32)) * pow3).reshape((n, -1))
        qs1 = (qs[:, 32:].reshape((n, -1, 1, 16)) * pow3).reshape((n, -1))
        qh = (qh.reshape((n, -1, 1, 4)) * pow3[:, :, :4]).reshape((n, -1))
        q = np.concatenate([qs0, qs1, qh], axis=-1)
        t = ((q.astype(np.uint16) * 3) >> 8).astype(np.int8) - np.int8(1)
    else:
        raise ValueError(f"{qtype.name} is not a ternary type")
    return np.ascontiguousarray(d).view(np.uint16).reshape(n), t


def q4_0_from_ternary(data: np.ndarray, qtype) -> np.ndarray:
    """The Q4_0 bytes (rows, cols/32·18) of a TQ tensor's bytes (rows, cols/256·type_size)."""
    from gguf.constants import GGML_QUANT_SIZES

    rows = data.shape[0]
    size = GGML_QUANT_SIZES[qtype][1]
    d, t = trits(np.ascontiguousarray(data).reshape(-1, size), qtype)
    q = (t + np.int8(8)).astype(np.uint8).reshape(-1, 32)  # 8 Q4_0 blocks per TQ block
    packed = q[:, :16] | (q[:, 16:] << np.uint8(4))
    scale = np.repeat(d, QK_K // 32).view(np.uint8).reshape(-1, 2)
    return np.concatenate([scale, packed], axis=1).reshape(rows, -1)
