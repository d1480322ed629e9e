"""Hadamard matrices and the orthogonal rotations built from them.

A rotation of size n is `Q = D (A ⊗ B) / sqrt(n)`: D a diagonal of random signs (all +1 for the
fixed transforms), A a Paley Hadamard matrix of order m (or [1]) and B the Sylvester (Walsh)
matrix of order 2^k, with n = m * 2^k. `x Q` costs m + k passes over x instead of n, and every
pass is a sum or difference of two float64 values, or a product with ±1 or one constant: each
step rounds the same way on any IEEE machine, so numpy on a CPU and torch on a GPU give the same
bits (`compute.py` runs the steps; this module only builds the matrices).

Paley's constructions cover the orders transformer widths need: 12 (q = 11), 20 (19), 28 (13),
36 (17), 44 (43), 60 (59), ... times a power of two: 576 = 36·16, 896 = 28·32, 1536 = 12·128,
5120 = 20·256.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def sylvester(n: int) -> np.ndarray:
    """The Walsh-Hadamard matrix of order n = 2^k in natural (Sylvester) order; symmetric."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Sylvester Hadamard matrices have orders 2^k, not {n}")
    h = np.ones((1, 1), dtype=np.int8)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]]).astype(np.int8)
    return h


def _is_prime(q: int) -> bool:
    return q >= 2 and all(q % p for p in range(2, math.isqrt(q) + 1))


def _jacobsthal(q: int) -> np.ndarray:
    """Q[i, j] = χ(j - i), the quadratic character of GF(q), q prime."""
    squares = {(x * x) % q for x in range(1, q)}
    chi = np.array([0] + [1 if a in squares else -1 for a in range(1, q)], dtype=np.int64)
    idx = (np.arange(q)[None, :] - np.arange(q)[:, None]) % q
    return chi[idx]


def paley(order: int) -> np.ndarray | None:
    """A Hadamard matrix of `order` by Paley's construction I (order q+1, q ≡ 3 mod 4) or II
    (order 2(q+1), q ≡ 1 mod 4), q prime; None when neither applies."""
    q = order - 1
    if _is_prime(q) and q % 4 == 3:
        s = np.zeros((order, order), dtype=np.int64)
        s[0, 1:] = 1
        s[1:, 0] = -1
        s[1:, 1:] = _jacobsthal(q)
        return (s + np.eye(order, dtype=np.int64)).astype(np.int8)
    if order % 2 == 0:
        q = order // 2 - 1
        if _is_prime(q) and q % 4 == 1:
            c = np.zeros((q + 1, q + 1), dtype=np.int64)
            c[0, 1:] = 1
            c[1:, 0] = 1
            c[1:, 1:] = _jacobsthal(q)
            h = np.kron(c, [[1, 1], [1, -1]]) + np.kron(np.eye(q + 1, dtype=np.int64),
                                                        [[1, -1], [-1, -1]])
            return h.astype(np.int8)
    return None


def factor(n: int) -> tuple[np.ndarray, int] | None:
    """(A, 2^k) with A a Hadamard matrix of order m and n = m * 2^k, the smallest such m; None
    when this module builds none of size n."""
    if n < 1:
        return None
    k = (n & -n).bit_length() - 1  # the power of two in n
    odd = n >> k
    if odd == 1:
        return np.ones((1, 1), dtype=np.int8), n
    for j in range(2, k + 1):
        m = odd << j
        base = paley(m)
        if base is not None:
            return base, n // m
    return None


@dataclass(frozen=True)
class Rotation:
    """`x Q` with Q = diag(signs) (A ⊗ B) / sqrt(n): orthogonal, so `x Q Qᵀ = x`."""

    n: int
    base: np.ndarray  # A, int8, m×m
    walsh: int  # the order of B
    signs: np.ndarray = field(repr=False)  # float64 ±1, length n

    @classmethod
    def build(cls, n: int, rng: np.random.Generator | None = None) -> Rotation:
        """Random signs drawn from `rng`, or none (all +1) without one."""
        found = factor(n)
        if found is None:
            raise ValueError(f"no Hadamard matrix of order {n} is built here (it needs n = m·2^k "
                             "with m = 1 or a Paley order such as 12, 20, 28, 36)")
        base, walsh = found
        signs = (np.ones(n) if rng is None
                 else rng.integers(0, 2, size=n).astype(np.float64) * 2 - 1)
        return cls(n, base, walsh, signs)

    @property
    def name(self) -> str:
        m = self.base.shape[0]
        return f"walsh({self.walsh})" if m == 1 else f"paley({m})xwalsh({self.walsh})"

    def dense(self) -> np.ndarray:
        """Q itself, float64 (for tests and small checks; the transforms never build it)."""
        h = np.kron(self.base.astype(np.float64), sylvester(self.walsh).astype(np.float64))
        return self.signs[:, None] * h / math.sqrt(self.n)
