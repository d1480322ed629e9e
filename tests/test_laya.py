"""Laya: the classifier's accuracy bar on the held-out cases, the long_doc gate, the policy, the
`1bit route` command, and the shipped model reproduced from the repo."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ONEBIT

from lemonade_onebit.errors import UsageError
from lemonade_onebit.laya.model import LONG_DOC_CHARS, MODEL, classify
from lemonade_onebit.laya.policy import load_policy, pick_device

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "data" / "laya" / "eval.json"
TRAIN = ROOT / "data" / "laya" / "train.json"


def route(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, "route", *args], capture_output=True, text=True, timeout=120)


def test_held_out_accuracy_and_latency_meet_the_bar():
    out = route("--eval", str(EVAL), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["accuracy"] >= 0.97, {k: v for k, v in result.items() if k != "predictions"}
    assert result["latency_ms"]["p50"] <= 5.0
    assert set(result["per_class"]) == {"code", "prose", "short", "long_doc"}
    assert len(result["predictions"]) >= 150
    assert {"text", "expected", "predicted", "confidence"} <= set(result["predictions"][0])


def test_training_never_sees_the_held_out_cases():
    train = {c["text"] for c in json.loads(TRAIN.read_text())["cases"]}
    held = [c["text"] for c in json.loads(EVAL.read_text())["cases"]]
    assert len(train) + len(held) >= 600
    assert not train & set(held)


def test_the_long_doc_gate_counts_code_points_not_bytes():
    below, at = "é" * (LONG_DOC_CHARS - 1), "é" * LONG_DOC_CHARS
    assert len(below.encode()) > LONG_DOC_CHARS  # over the gate in bytes, under in characters
    assert classify(below).klass != "long_doc"
    assert classify(at).klass == "long_doc" and classify(at).confidence == 1.0


@pytest.mark.parametrize(
    ("kinds", "device", "why"),
    [((), "cpu", "hrx is not available here: default"),
     (("amd-gpu",), "hrx", "code answers are long and decode-bound; the GPU decodes fastest")],
    ids=["cpu-only", "amd-gpu"],
)
def test_classify_prints_class_confidence_and_the_device_this_machine_has(fake_sysfs, kinds,
                                                                          device, why):
    """The shipped policy sends code to hrx, which needs an AMD GPU; elsewhere, the default."""
    fake_sysfs(*kinds)
    out = route("--classify", "Write a Rust function that sums a slice.", "--json")
    assert out.returncode == 0, out.stderr
    decision = json.loads(out.stdout)
    assert decision["class"] == "code" and 0 <= decision["confidence"] <= 1
    assert (decision["device"], decision["why"]) == (device, why)


@pytest.mark.parametrize("body,reason", [
    ({"min_confidence": 0.2, "default": "gpu", "classes": {}}, "default: unknown device 'gpu'"),
    ({"min_confidence": 0.2, "default": "cpu", "classes": {"code": {"device": "tpu"}}},
     "classes.code.device: unknown device 'tpu'"),
    ({"min_confidence": 0.2, "default": "cpu", "classes": {"poetry": {"device": "cpu"}}},
     "unknown classes ['poetry']"),
    ({"min_confidence": 1.5, "default": "cpu", "classes": {}}, "min_confidence: Input should be"),
    ({"min_confidence": 0.2, "default": "cpu", "classes": {}, "extra": 1},
     "extra: Extra inputs are not permitted"),
    ({"default": "cpu", "classes": {}}, "min_confidence: Field required"),
])
def test_policy_errors_name_the_file_and_the_key(tmp_path, body, reason):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(body))
    with pytest.raises(UsageError, match="--route-policy .*policy.json") as err:
        load_policy(str(path))
    assert reason in str(err.value)
    out = route("--classify", "hi", "--route-policy", str(path))
    assert out.returncode == 2 and reason in out.stderr


def test_policy_that_is_not_json_or_missing(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("{nope")
    for path, reason in ((bad, "not JSON"), (tmp_path / "missing.json", "No such file")):
        with pytest.raises(UsageError, match=reason):
            load_policy(str(path))


def test_device_choice_falls_back_to_the_default():
    policy = {"min_confidence": 0.5, "default": "cpu",
              "classes": {"code": {"device": "cuda", "why": "fast"}}}
    assert pick_device(policy, "code", 0.9, lambda d: True) == ("cuda", "fast")
    assert pick_device(policy, "code", 0.3, lambda d: True)[0] == "cpu"  # under the floor
    assert pick_device(policy, "code", 0.9, lambda d: False)[0] == "cpu"  # not on this machine
    assert pick_device(policy, "prose", 0.9, lambda d: True)[0] == "cpu"  # no rule


def test_eval_input_errors(tmp_path):
    bad = tmp_path / "cases.json"
    bad.write_text(json.dumps({"cases": [{"class": "poetry", "text": "x"}]}))
    out = route("--eval", str(bad))
    assert out.returncode == 2 and "case 0 needs a class among" in out.stderr
    bad.write_text("[]")
    assert route("--eval", str(bad)).returncode == 2


@pytest.mark.slow
def test_the_shipped_model_is_what_training_on_the_repo_gives():
    from lemonade_onebit.laya.train import fit, load

    W, b = fit(*load(TRAIN))
    with np.load(MODEL) as shipped:
        assert np.array_equal(shipped["W"], W.astype(np.float16))
        assert np.allclose(shipped["b"], b)


def test_export_lemonade_router(tmp_path):
    out = route("--export-lemonade", str(tmp_path / "router.json"))
    assert out.returncode == 0
    body = json.loads((tmp_path / "router.json").read_text())
    assert body["recipe"] == "collection.router"
    candidates = body["recipe_options"]["router"]["candidates"]
    assert set(candidates) == {"code", "prose", "short", "long_doc"}
    assert all(v.startswith("user.") and v.endswith("-1bit") for v in candidates.values())
