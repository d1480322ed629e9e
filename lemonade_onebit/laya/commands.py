"""`1bit route`: classify a request, evaluate the classifier, export Lemonade's router model."""

from __future__ import annotations

import json
from pathlib import Path

# The catalog model each class is best served by in Lemonade's own router.
ROUTER_CANDIDATES = {
    "code": "Qwen3-Coder-30B-A3B-Instruct-1bit",
    "prose": "Qwen3-4B-Instruct-2507-1bit",
    "short": "Qwen3-0.6B-1bit",
    "long_doc": "Qwen3-4B-Instruct-2507-1bit",
}


def classify_command(text: str, policy_path: str | None, as_json: bool) -> int:
    from lemonade_onebit.laya.model import classify
    from lemonade_onebit.laya.policy import device_available, load_policy, pick_device

    policy = load_policy(policy_path)
    decision = classify(text)
    device, why = pick_device(policy, decision.klass, decision.confidence, device_available)
    if as_json:
        print(json.dumps({"class": decision.klass, "confidence": decision.confidence,
                          "device": device, "why": why}))
    else:
        print(f"{decision.klass} {decision.confidence:.2f} -> {device} ({why})")
    return 0


def eval_command(path: str, as_json: bool) -> int:
    from lemonade_onebit.laya.evaluate import evaluate, load_cases, table

    result = evaluate(load_cases(path))
    print(json.dumps(result, ensure_ascii=False) if as_json else table(result))
    return 0


def export_lemonade_command(out: str | None) -> int:
    """A Lemonade `collection.router` model definition whose candidates are -1bit models."""
    from lemonade_onebit.catalog.schema import load_catalog
    from lemonade_onebit.laya.model import LONG_DOC_CHARS

    known = {e.name for e in load_catalog()}
    missing = sorted(set(ROUTER_CANDIDATES.values()) - known)
    if missing:
        from lemonade_onebit.errors import RunError

        raise RunError(f"router candidates missing from the catalog: {', '.join(missing)}")
    body = {
        "model_name": "user.Laya-1bit",
        "recipe": "collection.router",
        "labels": ["chat"],
        "recipe_options": {
            "router": {
                "classifier": "1bit route --classify",
                "long_doc_chars": LONG_DOC_CHARS,
                "candidates": {k: f"user.{v}" for k, v in ROUTER_CANDIDATES.items()},
                "default": f"user.{ROUTER_CANDIDATES['prose']}",
            }
        },
    }
    text = json.dumps(body, indent=2) + "\n"
    if out:
        Path(out).write_text(text)
        print(out)
    else:
        print(text, end="")
    return 0
