"""`1bit route --eval FILE`: accuracy per class, the confusion matrix and latency per decision."""

from __future__ import annotations

import time
from pathlib import Path

from lemonade_onebit.errors import UsageError
from lemonade_onebit.laya.model import CLASSES, LONG_DOC, classify
from lemonade_onebit.validation import read_json

ALL = (*CLASSES, LONG_DOC)


def load_cases(path: str) -> list[dict]:
    try:
        data = read_json(Path(path))
        cases = data["cases"]
        bad = [c for c in cases if c.get("class") not in ALL or not isinstance(c.get("text"), str)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: expected {{\"cases\":[{{\"class\",\"text\"}}]}} ({exc})") from None
    if bad:
        raise UsageError(f"{path}: case {cases.index(bad[0])} needs a class among "
                         f"{', '.join(ALL)} and a text")
    if not cases:
        raise UsageError(f"{path}: no cases")
    return cases


def evaluate(cases: list[dict]) -> dict:
    classify("warm up")  # loads the model: start-up is not a decision
    predictions, latencies = [], []
    for case in cases:
        start = time.perf_counter()
        decision = classify(case["text"])
        latencies.append((time.perf_counter() - start) * 1000)
        predictions.append({"text": case["text"], "expected": case["class"],
                            "predicted": decision.klass, "confidence": decision.confidence})
    confusion = {e: {p: 0 for p in ALL} for e in ALL}
    for p in predictions:
        confusion[p["expected"]][p["predicted"]] += 1
    per_class = {}
    for k in ALL:
        total = sum(confusion[k].values())
        if total:
            per_class[k] = {"accuracy": round(confusion[k][k] / total, 4), "n": total}
    lat = sorted(latencies)
    return {
        "accuracy": round(sum(p["expected"] == p["predicted"] for p in predictions)
                          / len(predictions), 4),
        "per_class": per_class,
        "confusion": confusion,
        "latency_ms": {"p50": round(lat[len(lat) // 2], 3),
                       "p95": round(lat[min(len(lat) - 1, int(len(lat) * 0.95))], 3)},
        "predictions": predictions,
    }


def table(result: dict) -> str:
    lines = [f"accuracy {result['accuracy'] * 100:.1f}% on {len(result['predictions'])} cases; "
             f"latency per decision p50 {result['latency_ms']['p50']:.2f} ms, "
             f"p95 {result['latency_ms']['p95']:.2f} ms", "",
             "| class | cases | accuracy |", "|---|---:|---:|"]
    for k, v in result["per_class"].items():
        lines.append(f"| {k} | {v['n']} | {v['accuracy'] * 100:.1f}% |")
    shown = [k for k in ALL if k in result["per_class"]]
    lines += ["", "| expected \\ predicted | " + " | ".join(shown) + " |",
              "|---|" + "---:|" * len(shown)]
    for e in shown:
        lines.append(f"| {e} | " + " | ".join(str(result["confusion"][e][p]) for p in shown) + " |")
    return "\n".join(lines)
