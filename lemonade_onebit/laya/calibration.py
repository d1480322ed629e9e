"""How far the Laya confidence can be trusted: temperature scaling fitted on held-out logits,
the reliability table and the expected calibration error (ECE). Pure functions over arrays."""

from __future__ import annotations

import numpy as np

BINS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0001)


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = logits / temperature
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    p = softmax(logits, temperature)
    return float(-np.log(np.maximum(p[np.arange(len(labels)), labels], 1e-12)).mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The T > 0 that minimises the held-out negative log-likelihood of softmax(logits / T):
    golden-section search on log T over [1/20, 20] (the NLL is unimodal in T)."""
    lo, hi = np.log(0.05), np.log(20.0)
    ratio = (np.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(logits, labels, np.exp(a)), nll(logits, labels, np.exp(b))
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(logits, labels, np.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(logits, labels, np.exp(b))
    return round(float(np.exp((lo + hi) / 2)), 4)


def reliability(confidence: np.ndarray, correct: np.ndarray,
                bins: tuple[float, ...] = BINS) -> list[dict]:
    """Per confidence bin: its range, the cases in it, their mean confidence and accuracy."""
    rows = []
    for lo, hi in zip(bins, bins[1:]):
        inside = (confidence >= lo) & (confidence < hi)
        n = int(inside.sum())
        if n:
            rows.append({"range": (lo, min(hi, 1.0)), "n": n,
                         "confidence": float(confidence[inside].mean()),
                         "accuracy": float(correct[inside].mean())})
    return rows


def ece(confidence: np.ndarray, correct: np.ndarray, bins: tuple[float, ...] = BINS) -> float:
    """Expected calibration error: the case-weighted mean |accuracy - confidence| over the bins."""
    total = len(confidence)
    return sum(r["n"] / total * abs(r["accuracy"] - r["confidence"])
               for r in reliability(confidence, correct, bins))
