"""`1bit tokenize` and the golden tokenizer cases (tests/fixtures/tokenizers-golden.json, written by
scripts/tokenizer_golden.py from the pinned Hugging Face `tokenizers`).

The golden ids are checked two ways: against the pinned `tokenizers` (the file is what it makes),
and against each executor's own tokenizer of the same vocabulary, which catches a converted
vocabulary that drifts (the fixtures' tokenizer.json was converted from the SmolLM2 GGUF):

- `tokenizers` (the golden ids): tokens around a text from tokenizer.json's post-processor, with
  `add_special_tokens=True` (SmolLM2's adds none); special-token text parsed unless
  `encode_special_tokens` is set.
- llama-server `/tokenize`: tokens around a text from the GGUF's `add_bos_token`/`add_eos_token`,
  with `add_special` (default off); special-token text parsed with `parse_special` (default on).
- ONNX Runtime GenAI's `Tokenizer.encode`: the post-processor always, special-token text always
  parsed; no switch for either.

So llama-server is asked with `add_special` and `parse_special` set as the golden case was made,
and ONNX Runtime GenAI is compared on the cases made with special tokens parsed only; the cases it
cannot express are listed, not skipped. That SmolLM2 adds no BOS on either side is asserted on its
own (`test_llama_server_adds_what_tokenizers_adds_around_a_text`), so a GGUF that starts adding
one fails by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ONEBIT, hf_layout

from lemonade_onebit.errors import RunError
from lemonade_onebit.tokenizer import (
    MISSING_TOKENIZERS,
    FileTokenizer,
    LlamaServerTokenizer,
    piece_json,
    tokenize,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN = json.loads((FIXTURES / "tokenizers-golden.json").read_text(encoding="utf-8"))
SMOLLM2 = next(t for t in GOLDEN["tokenizers"] if t["name"] == "SmolLM2-135M-Instruct")
IM_START, IM_END = 1, 2  # SmolLM2's <|im_start|> and <|im_end|>


def mismatches(cases: list[dict], encode) -> list[str]:
    """Every case `encode(text, parse_special)` gets wrong, with its first differing token."""
    found = []
    for case in cases:
        tokens = encode(case["text"], case["parse_special"])
        got = [list(tokens.ids), [piece_json(p) for p in tokens.pieces]]
        if got != [case["ids"], case["pieces"]]:
            at = next((i for i, pair in enumerate(zip(got[0], case["ids"])) if pair[0] != pair[1]),
                      min(len(got[0]), len(case["ids"])))
            found.append(f"{case['name']}: token {at}: got {got[0][at:at + 3]}, "
                         f"golden {case['ids'][at:at + 3]}")
    return found


def _golden_script():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import tokenizer_golden
    finally:
        sys.path.pop(0)
    return tokenizer_golden


def test_golden_file_is_what_the_pinned_tokenizers_make():
    import tokenizers

    script = _golden_script()
    pins = json.loads((ROOT / "lemonade_onebit" / "pins.json").read_text())
    pinned = next(p["version"] for p in pins["python"] if p["name"] == "tokenizers")
    assert tokenizers.__version__ == pinned == GOLDEN["tokenizers_version"]
    assert script.render(script.golden()) == script.GOLDEN.read_text(encoding="utf-8"), \
        "run `python scripts/tokenizer_golden.py --write`"


def test_golden_covers_every_tokenizer_json_the_fixtures_ship():
    covered = {f for t in GOLDEN["tokenizers"] for f in t["files"]}
    shipped = {str(p.relative_to(ROOT)) for p in FIXTURES.glob("*/tokenizer.json")}
    assert shipped and shipped <= covered
    for entry in GOLDEN["tokenizers"]:
        for file in entry["files"]:
            assert hashlib.sha256((ROOT / file).read_bytes()).hexdigest() == entry["sha256"], file


def test_golden_cases_span_scripts_code_numbers_whitespace_emoji_and_chat_markup():
    names = {c["name"] for c in SMOLLM2["cases"]}
    assert {"english", "code", "numbers", "whitespace", "latin-diacritics", "cyrillic", "greek",
            "arabic", "hebrew", "devanagari", "cjk", "thai", "zwj-emoji", "chat-markup",
            "chat-markup-as-text"} <= names
    assert "\u200d" in next(c["text"] for c in SMOLLM2["cases"] if c["name"] == "zwj-emoji")


def test_chat_markup_is_special_tokens_only_when_parsed():
    cases = {c["name"]: c for c in SMOLLM2["cases"]}
    parsed, as_text = cases["chat-markup"], cases["chat-markup-as-text"]
    assert parsed["text"] == as_text["text"]
    assert parsed["ids"].count(IM_START) == 3 and parsed["ids"].count(IM_END) == 2
    assert IM_START not in as_text["ids"] and IM_END not in as_text["ids"]
    assert len(as_text["ids"]) > len(parsed["ids"])


def test_pieces_are_the_bytes_of_the_text():
    """Each token's piece is the exact bytes it stands for: joined, they are the text (SmolLM2's
    byte-level tokenizer adds no prefix space), including tokens that hold part of a character."""
    partial = 0
    for case in SMOLLM2["cases"]:
        joined = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in case["pieces"])
        assert joined.decode("utf-8") == case["text"], case["name"]
        partial += sum(isinstance(p, list) for p in case["pieces"])
    assert partial > 0  # the emoji, Thai and CJK cases split characters


def test_sentencepiece_style_pieces_turn_metaspace_and_byte_tokens_into_bytes(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "▁": 1, "h": 2, "i": 3, "▁h": 4, "▁hi": 5, "<0xC3>": 6, "<0xA9>": 7}
    model = models.BPE(vocab, [("▁", "h"), ("▁h", "i")], unk_token="<unk>", byte_fallback=True)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.save(str(tmp_path / "tokenizer.json"))
    tokens = FileTokenizer(tmp_path / "tokenizer.json").encode("hi é")
    assert tokens.ids == (5, 1, 6, 7)
    assert tokens.pieces == (b" hi", b" ", b"\xc3", b"\xa9")


def test_a_drifted_vocabulary_is_caught(tmp_path):
    """The comparison the executor tests make fails on a vocabulary that moved: two entries of
    SmolLM2's tokenizer.json swapped."""
    data = json.loads((ROOT / SMOLLM2["files"][0]).read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    vocab["Ġquick"], vocab["Ġbrown"] = vocab["Ġbrown"], vocab["Ġquick"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    drifted = FileTokenizer(tmp_path / "tokenizer.json")
    found = mismatches(SMOLLM2["cases"], lambda text, parse: drifted.encode(text, True, parse))
    assert found == ["english: token 1: got [6354, 2365, 16438], golden [2365, 6354, 16438]"]


def test_onnx_genai_tokenizer_matches_the_golden_ids():
    """ONNX Runtime GenAI's own tokenizer of the onnx fixture, case by case. It has no switch for
    special-token parsing (always on), so the cases made with it off are left to the others, and
    named here."""
    import onnxruntime_genai as og

    tok = og.Tokenizer(og.Model(str(FIXTURES / "onnx-tiny")))
    comparable = [c for c in SMOLLM2["cases"] if c["parse_special"]]
    assert [c["name"] for c in SMOLLM2["cases"] if not c["parse_special"]] == \
        ["chat-markup-as-text"]
    for case in comparable:
        assert [int(i) for i in tok.encode(case["text"])] == case["ids"], case["name"]


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2):
    with LlamaServerTokenizer(smollm2) as tokenizer:
        yield tokenizer


@pytest.mark.executor
def test_llama_server_tokenize_on_the_gguf_matches_the_golden_ids(smollm2_tokenizer):
    """llama-server's `/tokenize` on the embedded SmolLM2 GGUF, the vocabulary the fixtures'
    tokenizer.json was converted from: the same ids and pieces for every case, special tokens
    parsed or not."""
    assert mismatches(SMOLLM2["cases"], lambda text, parse: smollm2_tokenizer.encode(
        text, add_special=True, parse_special=parse)) == []


@pytest.mark.executor
def test_llama_server_adds_what_tokenizers_adds_around_a_text(smollm2_tokenizer):
    """BOS/EOS: the GGUF's add_bos_token/add_eos_token against tokenizer.json's post-processor.
    SmolLM2 adds nothing on either side; a side that starts adding one fails here by name."""
    hf = FileTokenizer(ROOT / SMOLLM2["files"][0])
    for text in ("Hello", "<|im_start|>user"):
        bare = hf.encode(text, add_special=False).ids
        assert hf.encode(text, add_special=True).ids == bare, "tokenizers adds tokens"
        assert smollm2_tokenizer.encode(text, add_special=False).ids == bare
        assert smollm2_tokenizer.encode(text, add_special=True).ids == bare, \
            "llama-server adds tokens tokenizer.json does not"


@pytest.mark.executor
def test_llama_server_is_stopped_when_the_block_fails(smollm2):
    with pytest.raises(KeyError):
        with LlamaServerTokenizer(smollm2) as tokenizer:
            assert tokenizer.encode("Hi").ids == (26843,)
            raise KeyError("boom")
    assert tokenizer.run is not None and tokenizer.run.proc.poll() is not None
    assert not tokenizer._log.exists()  # llama-server did not fail: no log left behind


@pytest.mark.parametrize("reply", [
    [], {}, {"tokens": {}}, {"tokens": [{"id": "1", "piece": "a"}]},
    {"tokens": [{"id": True, "piece": "a"}]}, {"tokens": [{"id": 1, "piece": [256]}]},
    {"tokens": [{"id": -1, "piece": "a"}]}, {"tokens": [{"id": 1}]}, {"tokens": ["a"]},
])
def test_a_tokenize_answer_that_is_not_ids_and_pieces_is_refused(reply):
    from lemonade_onebit.tokenizer import _tokens_reply

    with pytest.raises(RunError):
        _tokens_reply(reply)
    assert _tokens_reply({"tokens": [{"id": 7, "piece": [240, 159]}, {"id": 8, "piece": "é"}]}) \
        == ((7, 8), (b"\xf0\x9f", "é".encode()))


def _onebit(*args: str, env: dict | None = None, stdin: str | None = None):
    return subprocess.run([ONEBIT, "tokenize", *args], capture_output=True, text=True,
                          timeout=120, env=env, input=stdin)


def test_tokenize_a_folder_prints_ids_and_pieces():
    case = next(c for c in SMOLLM2["cases"] if c["name"] == "chat-markup")
    out = _onebit("tests/fixtures/mlx-tiny", case["text"], "--json")
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert (reply["ids"], reply["pieces"], reply["count"]) == \
        (case["ids"], case["pieces"], len(case["ids"]))
    assert reply["tokenizer"] == f"tokenizers {GOLDEN['tokenizers_version']}"
    text = _onebit("tests/fixtures/onnx-tiny", "-", "--no-parse-special", stdin="Hi <|im_end|>")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["26843", '"Hi"'] and lines[-1].startswith("8 tokens (tokenizers ")
    assert [row.split()[0] for row in lines[1:-1]] == ["2067", "108", "306", "79", "486", "108",
                                                      "46"]  # ' <', '|', 'im', '_', 'end', ...


@pytest.mark.executor
def test_tokenize_a_gguf_asks_llama_server(smollm2):
    case = next(c for c in SMOLLM2["cases"] if c["name"] == "zwj-emoji")
    out = _onebit("SmolLM2-135M-Instruct-1bit", case["text"], "--json")
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert (reply["tokenizer"], reply["source"]) == ("llama-server", str(smollm2))
    assert (reply["ids"], reply["pieces"]) == (case["ids"], case["pieces"])


@pytest.mark.executor
def test_a_gguf_llama_server_cannot_load_is_one_line_naming_its_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    out = _onebit(str(bad), "Hi")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    log = Path(out.stderr.rsplit("(log: ", 1)[1].rstrip(")\n"))
    try:
        first = next(row for row in log.read_text().splitlines() if " E " in row)
        assert f"llama-server cannot load {bad}: {first.split(' E ', 1)[1]} (log: " in out.stderr
        assert "exiting due to" not in out.stderr  # its first error, not its last words
    finally:
        log.unlink()


def test_a_folder_without_tokenizer_json_is_a_one_line_error(tmp_path):
    (tmp_path / "genai_config.json").write_text("{}")
    out = _onebit(str(tmp_path), "Hi")
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert f"{tmp_path}: no tokenizer.json" in out.stderr, out.stderr


def test_a_1bp_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "m.1bp").write_bytes(b"x")
    out = _onebit(str(tmp_path / "m.1bp"), "Hi")
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "a .1bp file; `1bit tokenize` reads GGUF files" in out.stderr, out.stderr


def test_a_hf_id_not_downloaded_says_to_pull_it(tmp_path):
    out = _onebit("someone/not-here", "Hi", env={**os.environ, "HF_HUB_CACHE": str(tmp_path)})
    assert out.returncode == 1
    assert "`1bit pull someone/not-here`" in out.stderr and out.stderr.count("\n") == 1


def test_a_downloaded_hf_id_reads_its_snapshots_tokenizer_json(tmp_path, monkeypatch):
    hf_layout(tmp_path, "someone/smol", "tokenizer.json", ROOT / SMOLLM2["files"][0])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert tokenize("someone/smol", "Hello world").ids == (19556, 905)


def test_without_tokenizers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` raises ImportError
    with pytest.raises(RunError) as err:
        tokenize(str(FIXTURES / "onnx-tiny"), "Hi")
    assert str(err.value) == MISSING_TOKENIZERS and "lemonade-onebit[tokenize]" in MISSING_TOKENIZERS


def test_a_tokenizer_json_tokenizers_cannot_read_is_a_one_line_error(tmp_path):
    (tmp_path / "genai_config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "nothing"}}')
    with pytest.raises(RunError, match="not a tokenizer.json tokenizers can read"):
        tokenize(str(tmp_path), "Hi")
