"""The arithmetic of the transforms, on numpy (CPU) or torch (a CUDA GPU), bit for bit the same.

Every step is one IEEE operation per element in a fixed order: float64 sums and differences,
products with ±1 or a constant, conversions to float32 and float16 (round to nearest even), and
Q4_0's float32 scale, reciprocal and truncation as llama.cpp's reference quantiser does them. No
step is a matrix product or a reduction whose order a library may choose, so both backends write
the same bytes (tests/test_kernels.py checks it on CPU torch, bench/gpu/convert.sh on the GPU).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lemonade_onebit.kernels.hadamard import Rotation

QK4_0 = 32  # values per Q4_0 block; a block is an f16 scale and 16 bytes of nibbles
Q4_0_BYTES = 18


class Numpy:
    """The CPU backend."""

    name = "numpy"

    def load(self, a: np.ndarray) -> Any:
        return np.asarray(a, dtype=np.float64)

    def vector(self, a: np.ndarray) -> Any:
        return np.asarray(a, dtype=np.float64)

    def stack(self, parts: list, axis: int) -> Any:
        return np.stack(parts, axis=axis)

    def float32(self, x) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=np.float32)

    def transpose(self, x) -> Any:
        return np.ascontiguousarray(x.T)

    def paley(self, g, a: np.ndarray):
        """out[i] = Σ_p a[p, i] g[p] over the first axis of g, p in order (a is ±1)."""
        out = np.empty_like(g)
        for i in range(a.shape[0]):
            acc = out[i]
            np.multiply(g[0], a[0, i], out=acc)
            for p in range(1, a.shape[0]):
                (np.add if a[p, i] > 0 else np.subtract)(acc, g[p], out=acc)
        return out

    def q4_0(self, x) -> np.ndarray:
        """Q4_0 blocks of float64 rows (length a multiple of 32), via float32, as llama.cpp's
        `quantize_row_q4_0_ref`: d = max / -8 (max: the value of largest magnitude, the first
        one on a tie), q = min(15, trunc(x / d + 8.5))."""
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import quantize

        return quantize(self.float32(x), GGMLQuantizationType.Q4_0)


class Torch:
    """The GPU backend: torch on `device` (cuda, or cpu to check it against numpy)."""

    def __init__(self, device: str = "cuda") -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.name = f"torch-{self.device.type}"

    def load(self, a: np.ndarray) -> Any:
        import warnings

        with warnings.catch_warnings():  # a read-only memory map: the tensor is only read
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            t = self.torch.from_numpy(np.ascontiguousarray(a))
        return t.to(self.device).to(self.torch.float64)

    def vector(self, a: np.ndarray) -> Any:
        return self.load(np.asarray(a, dtype=np.float64))

    def stack(self, parts: list, axis: int) -> Any:
        return self.torch.stack(parts, dim=axis)

    def float32(self, x) -> np.ndarray:
        return x.to(self.torch.float32).cpu().numpy()

    def transpose(self, x) -> Any:
        return x.T.contiguous()

    def paley(self, g, a: np.ndarray):
        """As Numpy.paley, in m broadcast steps (acc ± g[p] is acc + (±1)·g[p], exactly)."""
        signs = self.vector(a.astype(np.float64))
        shape = (a.shape[0],) + (1,) * (g.dim() - 1)
        out = signs[0].reshape(shape) * g[0:1]
        for p in range(1, a.shape[0]):
            out = out + signs[p].reshape(shape) * g[p:p + 1]
        return out

    def q4_0(self, x) -> np.ndarray:
        torch = self.torch
        rows = x.shape[0]
        b = x.to(torch.float32).reshape(-1, QK4_0)
        imax = b.abs().argmax(dim=1, keepdim=True)
        d = torch.gather(b, 1, imax) / -8
        inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
        q = torch.trunc(b * inv + 8.5).to(torch.uint8).clamp(0, 15)
        packed = q[:, :QK4_0 // 2] | (q[:, QK4_0 // 2:] << 4)
        scale = d.to(torch.float16).view(torch.uint8)
        return torch.cat([scale, packed], dim=1).reshape(rows, -1).cpu().numpy()


Backend = Numpy | Torch


def backend(device: str) -> Backend:
    """`cpu`: numpy; `cuda`: torch on the GPU; `auto`: cuda when torch sees one; `torch-cpu`:
    torch on the CPU (to check the torch path where there is no GPU)."""
    if device == "cpu":
        return Numpy()
    if device.startswith("torch-"):
        return Torch(device.removeprefix("torch-"))
    try:
        import torch
    except ImportError:
        if device == "auto":
            return Numpy()
        raise
    if device == "auto":
        return Torch("cuda") if torch.cuda.is_available() else Numpy()
    return Torch(device)


def walsh(xp: Backend, x, order: int):
    """B · x along axis 1 of x (groups, order, …), B the Sylvester matrix of `order`:
    log2(order) passes of butterflies, each over contiguous rows."""
    shape = x.shape
    h = 1
    while h < order:
        y = x.reshape(shape[0], order // (2 * h), 2, h, -1)
        a, c = y[:, :, 0], y[:, :, 1]
        x = xp.stack([a + c, a - c], axis=2)
        h *= 2
    return x.reshape(shape)


def rotate_columns(xp: Backend, x, rot: Rotation):
    """Qᵀ x for x (n, …): every column vector v becomes (vᵀ Q)ᵀ. The signs, then Aᵀ across the
    m groups of 2^k coordinates, then the Walsh butterflies within each group, then 1/sqrt(n);
    every step works on whole contiguous rows of x."""
    n, m = rot.n, rot.base.shape[0]
    shape = x.shape
    x = x.reshape(n, -1) * xp.vector(rot.signs).reshape(n, 1)
    if m > 1:
        x = xp.paley(x.reshape(m, -1), rot.base)
    x = walsh(xp, x.reshape(m, rot.walsh, -1), rot.walsh)
    return x.reshape(shape) * (1.0 / math.sqrt(n))


def rotate(xp: Backend, x, rot: Rotation):
    """Rows of x (rows, n) times Q."""
    return xp.transpose(rotate_columns(xp, xp.transpose(x), rot))


def wht32(xp: Backend, x):
    """Each consecutive block of 32 values along the last axis times H32 / sqrt(32), H32 the
    Sylvester matrix (symmetric, so the same transform undoes it)."""
    shape = x.shape
    blocks = xp.transpose(x.reshape(-1, QK4_0)).reshape(1, QK4_0, -1)
    out = walsh(xp, blocks, QK4_0).reshape(QK4_0, -1) * (1.0 / math.sqrt(QK4_0))
    return xp.transpose(out).reshape(shape)
