"""Laya: the classifier's accuracy bar on the held-out families, the split that keeps them apart,
the calibration and the confidence floor, the long_doc gate, the policy, the `1bit route` command,
and the shipped model reproduced from the repo."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import ONEBIT

from lemonade_onebit.errors import UsageError
from lemonade_onebit.laya.calibration import ece, fit_temperature, reliability, softmax
from lemonade_onebit.laya.model import LONG_DOC_CHARS, MODEL, classify, features
from lemonade_onebit.laya.policy import load_policy, pick_device

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "data" / "laya" / "eval.json"
TRAIN = ROOT / "data" / "laya" / "train.json"
HELD_OUT_BAR = 0.92  # docs/laya.md: 95.1% measured on eval.json (long_doc included); aim: 97%


def route(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, "route", *args], capture_output=True, text=True, timeout=120)


def cases(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cases"]


def test_held_out_accuracy_and_latency_meet_the_bar():
    """The held-out part is whole families and authors the model never saw (data/laya/README.md)."""
    out = route("--eval", str(EVAL), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["accuracy"] >= HELD_OUT_BAR, {k: v for k, v in result.items()
                                                 if k != "predictions"}
    assert result["latency_ms"]["p50"] <= 5.0
    assert set(result["per_class"]) == {"code", "prose", "short", "long_doc"}
    assert len(result["predictions"]) >= 150
    assert {"text", "expected", "predicted", "confidence"} <= set(result["predictions"][0])


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def test_training_never_sees_the_held_out_families_nor_near_copies_of_their_requests():
    train, held = cases(TRAIN), cases(EVAL)
    assert len(train) + len(held) >= 2000
    assert all(c["family"] and c["source"] in ("hand", "generated") for c in train + held)
    assert not {c["family"] for c in train} & {c["family"] for c in held}
    authors = [{c["author"] for c in part if "author" in c} for part in (train, held)]
    assert len(authors[0]) >= 20 and len(authors[1]) >= 5  # the folds group by them
    assert not authors[0] & authors[1]  # an author's families stay on one side
    by_family: dict[str, set] = {}
    for c in train + held:
        by_family.setdefault(c["family"], set()).add(c.get("author"))
    assert all(len(names) == 1 for names in by_family.values())  # one author per family
    assert not {c["text"] for c in train} & {c["text"] for c in held}
    assert len({c["family"] for c in held if c["source"] == "hand"}) >= 15
    # A paraphrase shares the rare words of its original; a shared question form ("what makes a
    # good ...") shares only common ones. Overlap is weighted by how rare a word is in training.
    train_words = [_words(c["text"]) for c in train if c["class"] != "long_doc"]
    df = Counter(w for words in train_words for w in words)

    def rarity(words: set[str]) -> float:
        return sum(math.log(len(train_words) / df.get(w, 0.5)) for w in words)

    for case in (c for c in held if c["class"] != "long_doc"):
        mine = _words(case["text"])
        closest = max(rarity(mine & w) / rarity(mine | w) for w in train_words)
        assert closest < 0.8, case["text"]


@functools.cache
def _data_build():
    """data/laya/build.py, loaded once from its file (`build` alone may name another module)."""
    folder = ROOT / "data" / "laya"
    spec = importlib.util.spec_from_file_location("laya_data_build", folder / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))  # for its `import cases`
    try:
        spec.loader.exec_module(build)
    finally:
        sys.path.pop(0)
    return build


def _read_family(path: Path) -> list[dict]:
    return _data_build().read_family(path)


@pytest.mark.parametrize("lines, error", [
    (["# who", "# author: w01", "code: a", "short: b"], None),
    (["# who", "# Author : w01", "code: a"], None),
    (["# who", "code: a", "# author: w01"], "before the first request"),
    (["# author: w01", "# author: w02", "code: a"], "one '# author: NAME' line"),
    (["# author:  ", "code: a"], "one '# author: NAME' line"),
    (["# who", "poem: a"], "expected 'code|prose|short: TEXT'"),
])
def test_a_family_file_names_one_author_before_its_requests(tmp_path, lines, error):
    path = tmp_path / "fam.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if error is None:
        assert {c["author"] for c in _read_family(path)} == {"w01"}
    else:
        with pytest.raises(SystemExit, match=re.escape(error)):
            _read_family(path)


def test_temperature_scaling_recovers_the_temperature_that_made_the_labels():
    rng = np.random.default_rng(7)
    logits = rng.normal(0, 3, (4000, 3))
    p = softmax(logits, 2.0)
    labels = np.array([rng.choice(3, p=row) for row in p])
    assert abs(fit_temperature(logits, labels) - 2.0) < 0.15
    over = softmax(logits, 1.0)  # the untempered model is over-confident on these labels
    calibrated = softmax(logits, fit_temperature(logits, labels))
    right = over.argmax(1) == labels
    assert ece(calibrated.max(1), right) < ece(over.max(1), right) / 2
    table = reliability(calibrated.max(1), right)
    assert sum(r["n"] for r in table) == 4000 and all(0 <= r["accuracy"] <= 1 for r in table)


def test_confidence_under_the_shipped_floor_sends_held_out_requests_to_the_default():
    """Three classes put the top probability at 1/3 or more; the calibrated floor sits above it,
    and the held-out requests under it are the ones the model gets wrong most."""
    policy = load_policy()
    floor = policy["min_confidence"]
    assert 1 / 3 < floor < 1
    held = [c for c in cases(EVAL) if c["class"] != "long_doc"]
    decisions = [(c, classify(c["text"])) for c in held]
    under = [(c, d) for c, d in decisions if d.confidence < floor]
    over = [(c, d) for c, d in decisions if d.confidence >= floor]
    assert 0 < len(under) < len(held) // 5
    for _, decision in under:
        device, why = pick_device(policy, decision.klass, decision.confidence, lambda d: True)
        assert device == policy["default"] and why.endswith(": default")
    right_under = sum(c["class"] == d.klass for c, d in under) / len(under)
    right_over = sum(c["class"] == d.klass for c, d in over) / len(over)
    assert right_under < right_over - 0.2


@pytest.mark.parametrize(("text", "klass"), [
    ("Why does my shader flicker when the camera moves?", "code"),
    ("What does `tar -xzf` do?", "code"),
    ("Create a model for a hotel booking system in Django.", "code"),
    ("Plan a week of dinners with a shopping list.", "prose"),
    ("How do I start a vegetable garden?", "prose"),
    ("What makes a good leader?", "prose"),
    ("What is the role of mitochondria in a cell?", "prose"),
    ("What is the capital of Peru?", "short"),
    ("thanks!", "short"),
])
def test_the_kinds_of_request_the_classifier_must_tell_apart(text, klass):
    assert classify(text).klass == klass


def test_features_keep_language_names_whole_and_see_software_in_any_script():
    from lemonade_onebit.laya.model import TOKEN, _lexicon_hits

    assert {"c++", "c#", "k8s"} <= set(TOKEN.findall("c++ or c# on k8s"))
    assert _lexicon_hits(TOKEN.findall("why does my react app hang"), "")["tech"] >= 1
    assert features("用Python写一个函数") != features("用Java写一个函数")
    # software things named in other languages and scripts, with and without spaces
    for text in ("LINEの通知設定を変えたい", "엑셀에서 합계가 안 돼요", "ابي اعدادات التطبيق",
                 "настройки приложения сбились", "hoja de cálculo compartida"):
        low = text.lower()
        assert _lexicon_hits(TOKEN.findall(low), low)["tech"] >= 1, text
    assert _lexicon_hits(TOKEN.findall("a cell in my body"), "a cell in my body")["tech"] == 0


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
@pytest.mark.timeout(900)  # six trainings over train.json: about 5 minutes on 2 cores
def test_the_shipped_model_is_what_training_on_the_repo_gives():
    """Weights and temperature: `make laya-model` on these files gives exactly the shipped file."""
    from lemonade_onebit.laya.train import train

    fresh = train(TRAIN)
    with np.load(MODEL) as shipped:
        assert set(shipped.files) == {"W", "b", "T"}
        assert np.array_equal(shipped["W"], fresh["W"])
        assert np.array_equal(shipped["b"], fresh["b"])
        assert float(shipped["T"]) == float(fresh["T"])


def test_export_lemonade_router(tmp_path):
    out = route("--export-lemonade", str(tmp_path / "router.json"))
    assert out.returncode == 0
    body = json.loads((tmp_path / "router.json").read_text())
    assert body["recipe"] == "collection.router"
    candidates = body["recipe_options"]["router"]["candidates"]
    assert set(candidates) == {"code", "prose", "short", "long_doc"}
    assert all(v.startswith("user.") and v.endswith("-1bit") for v in candidates.values())
