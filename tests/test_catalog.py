"""The catalog's rules (pydantic), the shipped entries, and variant selection (pure functions)."""

from __future__ import annotations

import pytest

from lemonade_onebit.catalog.schema import load_catalog, validate
from lemonade_onebit.catalog.variants import select_files, split_checkpoint
from lemonade_onebit.errors import RunError, UsageError

GOOD = {"checkpoint": "org/m-GGUF:Q4_K_M", "recipe": "onebit", "labels": ["chat"], "size": 1.2}


def test_every_shipped_entry_is_valid_and_in_lemonade_shape():
    entries = load_catalog()
    names = [e.name for e in entries]
    assert "SmolLM2-135M-Instruct-1bit" in names and "Qwen3-4B-Instruct-2507-1bit" in names
    assert {e.mode for e in entries} == {"chat", "embeddings", "reranking"}
    for e in entries:
        shape = e.lemonade_shape()
        assert set(shape) <= {"checkpoint", "recipe", "labels", "size", "suggested", "mmproj"}
        assert shape["recipe"] == "onebit" and e.name.endswith("-1bit")


@pytest.mark.parametrize("name,body,reason", [
    ("Bad", GOOD, "ends in `-1bit`"),
    ("../x-1bit", GOOD, "ends in `-1bit`"),
    ("M-1bit", {**GOOD, "labels": ["chat", "embeddings"]}, "exactly one mode label"),
    ("M-1bit", {**GOOD, "labels": ["vision"]}, "exactly one mode label"),
    ("M-1bit", {**GOOD, "labels": ["chat", "fast"]}, "unknown labels ['fast']"),
    ("M-1bit", {**GOOD, "labels": ["chat", "coding", "coding"]}, "a label is repeated"),
    ("M-1bit", {**GOOD, "checkpoint": "org/m-GGUF"}, "names a variant"),
    ("M-1bit", {**GOOD, "checkpoint": "not a repo:Q4"}, "ORG/REPO"),
    ("M-1bit", {**GOOD, "size": 0}, "greater than 0"),
    ("M-1bit", {**GOOD, "recipe": "llamacpp"}, "onebit"),
    ("M-1bit", {**GOOD, "mmproj": "mmproj.gguf"}, "belongs to a `vision` model"),
    ("M-1bit", {**GOOD, "backend": "x"}, "backend: Extra inputs are not permitted"),
])
def test_each_rule_has_a_clear_error(name, body, reason):
    with pytest.raises(RunError, match=f"catalog entry {name.replace('.', '[.]')}") as err:
        validate(name, body)
    assert reason in str(err.value)


def test_split_checkpoint_refuses_escapes():
    assert split_checkpoint("org/repo:Q4_0") == ("org/repo", "Q4_0")
    assert split_checkpoint("org/repo") == ("org/repo", None)
    for bad in ("../repo", "org/..", "org/repo:../x", "org/repo:/etc/passwd", "org"):
        with pytest.raises(UsageError):
            split_checkpoint(bad)


FILES = ["README.md", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-IQ4_XS.gguf", "mmproj-F16.gguf",
         "Q8_0/m-Q8_0-00002-of-00002.gguf", "Q8_0/m-Q8_0-00001-of-00002.gguf"]


def test_variant_selection():
    assert select_files(FILES, "Q4_K_M", "r") == ["m-Q4_K_M.gguf"]
    assert select_files(FILES, "q4_k_m", "r") == ["m-Q4_K_M.gguf"]  # case does not matter
    assert select_files(FILES, "m-IQ4_XS.gguf", "r") == ["m-IQ4_XS.gguf"]
    assert select_files(FILES, "Q8_0", "r") == ["Q8_0/m-Q8_0-00001-of-00002.gguf",
                                                "Q8_0/m-Q8_0-00002-of-00002.gguf"]
    assert select_files(["a/model.onnx", "a/genai_config.json"], None, "r") == []  # whole repo
    with pytest.raises(RunError, match="has no variant 'Q5_K_M'"):
        select_files(FILES, "Q5_K_M", "r")
    with pytest.raises(RunError, match="'Q4_K' matches several files"):
        select_files(["m-Q4_K.gguf", "n-Q4_K.gguf"], "Q4_K", "r")
    with pytest.raises(RunError, match="name one as r:VARIANT"):
        select_files(FILES, None, "r")
    with pytest.raises(RunError, match="has 1 of its 2 shards"):
        select_files(FILES[:-1], "Q8_0", "r")
