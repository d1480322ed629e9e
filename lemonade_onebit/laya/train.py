"""Train the Laya classifier from `data/laya/train.json` into `lemonade_onebit/laya/model.npz`.
Deterministic (full-batch Adam from zeros, fixed steps; folds by a hash of the group: the author
where a family names one, else the family).
Reproduce the shipped model:

    make laya-model     # python data/laya/build.py && python -m lemonade_onebit.laya.train

The temperature comes from out-of-fold logits: the training families are split into FOLDS folds
(an author's families together), each fold is scored by a model trained without it, and T
minimises the NLL of those scores.
`--report` prints the figures of docs/laya.md (accuracy on whole held-out groups, reliability, ECE).
"""

from __future__ import annotations

import argparse
import json
import zlib
from pathlib import Path

import numpy as np

from lemonade_onebit.laya.calibration import ece, fit_temperature, reliability, softmax
from lemonade_onebit.laya.model import BUCKETS, CLASSES, MODEL, features

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "laya"
STEPS = 300
L2 = 1e-5
LR = 0.05
FOLDS = 5
FLOOR_CANDIDATES = (0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70)


def design(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, cols, vals = [], [], []
    for i, text in enumerate(texts):
        for k, v in features(text).items():
            rows.append(i)
            cols.append(k)
            vals.append(v)
    return (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64),
            np.array(vals, dtype=np.float64))


def fit(texts: list[str], labels: list[str], l2: float = L2) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression with an L2 penalty; weights of unseen buckets stay 0.
    Weights are held class-major over the buckets the texts use (1-D gathers are fast)."""
    n, c = len(texts), len(CLASSES)
    rows, cols, vals = design(texts)
    used, col = np.unique(cols, return_inverse=True)
    y = np.zeros((c, n))
    y[[CLASSES.index(label) for label in labels], np.arange(n)] = 1
    W = np.zeros((c, len(used)))
    b = np.zeros(c)
    m = [np.zeros_like(W), np.zeros_like(b)]
    v = [np.zeros_like(W), np.zeros_like(b)]
    for step in range(1, STEPS + 1):
        logits = np.stack([np.bincount(rows, W[k][col] * vals, n) for k in range(c)]) + b[:, None]
        g = (softmax(logits.T).T - y) / n
        gW = np.stack([np.bincount(col, g[k][rows] * vals, len(used)) for k in range(c)]) + l2 * W
        gb = g.sum(axis=1)
        for i, (param, grad) in enumerate(((W, gW), (b, gb))):
            m[i] = 0.9 * m[i] + 0.1 * grad
            v[i] = 0.999 * v[i] + 0.001 * grad * grad
            param -= LR * (m[i] / (1 - 0.9 ** step)) / (np.sqrt(v[i] / (1 - 0.999 ** step)) + 1e-8)
    full = np.zeros((BUCKETS, c), dtype=np.float32)
    full[used] = W.T
    return full, b.astype(np.float32)


def raw_logits(W: np.ndarray, b: np.ndarray, texts: list[str]) -> np.ndarray:
    rows, cols, vals = design(texts)
    contrib = W[cols].astype(np.float64) * vals[:, None]
    return np.stack([np.bincount(rows, contrib[:, k], len(texts)) for k in range(len(CLASSES))],
                    axis=1) + b


def fold_of(group: str) -> int:
    return zlib.crc32(group.encode()) % FOLDS


def out_of_fold(texts: list[str], labels: list[str], groups: list[str],
                l2: float = L2) -> np.ndarray:
    """Logits of every case from a model that never saw its group."""
    out = np.zeros((len(texts), len(CLASSES)))
    folds = np.array([fold_of(f) for f in groups])
    for k in range(FOLDS):
        inside = folds == k
        W, b = fit([t for t, i in zip(texts, inside) if not i],
                   [y for y, i in zip(labels, inside) if not i], l2)
        out[inside] = raw_logits(W, b, [t for t, i in zip(texts, inside) if i])
    return out


def load(path: Path) -> tuple[list[str], list[str], list[str]]:
    """(texts, labels, groups) of the classifier's classes; long_doc is decided by length. A
    case's group is its author where one author wrote several families (data/laya/README.md),
    else its family: the folds hold out whole groups."""
    cases = [c for c in json.loads(path.read_text())["cases"] if c["class"] in CLASSES]
    return ([c["text"] for c in cases], [c["class"] for c in cases],
            [c.get("author", c["family"]) for c in cases])


def train(path: Path) -> dict[str, np.ndarray]:
    texts, labels, groups = load(path)
    y = np.array([CLASSES.index(label) for label in labels])
    temperature = fit_temperature(out_of_fold(texts, labels, groups), y)
    W, b = fit(texts, labels)
    return {"W": W.astype(np.float16), "b": b, "T": np.array(temperature, dtype=np.float32)}


def _table(rows: list[dict]) -> list[str]:
    lines = ["| confidence | cases | mean confidence | accuracy |", "|---|---:|---:|---:|"]
    for r in rows:
        lo, hi = r["range"]
        lines.append(f"| {lo:.2f}–{hi:.2f} | {r['n']} | {r['confidence']:.3f} | "
                     f"{r['accuracy'] * 100:.1f}% |")
    return lines


def floor_table(confidence: np.ndarray, correct: np.ndarray) -> tuple[list[str], float]:
    """For candidate floors: how many cases fall under each and how often those are right. The
    floor is the highest candidate under which the model is right no more than half the time: a
    coin flip or worse is better sent to the default device."""
    lines = ["| floor | cases under | right under | right at or over |", "|---:|---:|---:|---:|"]
    floor = 0.0
    for t in FLOOR_CANDIDATES:
        under = confidence < t
        if not under.any():
            continue
        right = float(correct[under].mean())
        lines.append(f"| {t:.2f} | {int(under.sum())} | {right * 100:.0f}% | "
                     f"{correct[~under].mean() * 100:.1f}% |")
        if right <= 0.5:
            floor = t
    return lines, floor


def report(path: Path, held_out: Path) -> str:
    """Held-out figures (whole families and authors): grouped k-fold on the training groups,
    then the shipped model on the held-out groups; reliability and ECE before and after
    temperature scaling."""
    texts, labels, groups = load(path)
    y = np.array([CLASSES.index(label) for label in labels])
    oof = out_of_fold(texts, labels, groups)
    temperature = fit_temperature(oof, y)
    right = oof.argmax(1) == y
    lines = [f"grouped {FOLDS}-fold over {len(set(groups))} training groups, {len(texts)} "
             f"cases: accuracy {right.mean() * 100:.1f}%; temperature {temperature}"]
    for k, klass in enumerate(CLASSES):
        lines.append(f"  {klass}: {int(right[y == k].sum())}/{int((y == k).sum())}")
    with np.load(MODEL) as data:
        W, b = data["W"], data["b"]
    h_texts, h_labels, h_groups = load(held_out)
    h_y = np.array([CLASSES.index(label) for label in h_labels])
    h_logits = raw_logits(W, b, h_texts)
    right = h_logits.argmax(1) == h_y
    lines.append(f"held-out groups ({len(set(h_groups))}, {len(h_texts)} cases): accuracy "
                 f"{right.mean() * 100:.1f}%")
    for k, klass in enumerate(CLASSES):
        lines.append(f"  {klass}: {int(right[h_y == k].sum())}/{int((h_y == k).sum())}")
    for name, logits, truth in (("out-of-fold", oof, y), ("held-out", h_logits, h_y)):
        for t in (1.0, temperature):
            p = softmax(logits, t)
            conf, correct = p.max(1), p.argmax(1) == truth
            lines += ["", f"{name}, T = {t}: ECE {ece(conf, correct):.3f}", *_table(
                reliability(conf, correct))]
    p = softmax(oof, temperature)
    table, floor = floor_table(p.max(1), p.argmax(1) == y)
    lines += ["", f"out-of-fold, calibrated: the floor is {floor}", *table]
    p = softmax(h_logits, temperature)
    lines += ["", "held-out, calibrated:", *floor_table(p.max(1), p.argmax(1) == h_y)[0]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA / "train.json"))
    parser.add_argument("--out", default=str(MODEL))
    parser.add_argument("--report", action="store_true",
                        help="print the held-out accuracy and calibration of the shipped "
                             "model instead of training")
    args = parser.parse_args()
    if args.report:
        print(report(Path(args.data), DATA / "eval.json"))
        return 0
    model = train(Path(args.data))
    np.savez_compressed(args.out, W=model["W"], b=model["b"], T=model["T"])
    print(f"trained on {args.data} (temperature {float(model['T'])}) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
