"""The golden tokenizer cases: `python scripts/tokenizer_golden.py --write` rewrites
tests/fixtures/tokenizers-golden.json with what the pinned Hugging Face `tokenizers` makes of every
case, for every tokenizer.json the project ships; without `--write` it prints it.

tests/test_tokenize.py fails when the file differs from what the installed (pinned) `tokenizers`
makes, and checks the executors' own tokenizers against it: ONNX Runtime GenAI's on the onnx
fixture, llama-server's `/tokenize` on the GGUF the vocabulary was converted from.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "fixtures" / "tokenizers-golden.json"
# Each tokenizer the project ships: its tokenizer.json files (the same bytes in each), and the
# catalog name of the GGUF that holds the same vocabulary (scripts/make_fixtures.py converted the
# fixtures' tokenizer.json from it).
TOKENIZERS = {
    "SmolLM2-135M-Instruct": {
        "files": ["tests/fixtures/onnx-tiny/tokenizer.json", "tests/fixtures/mlx-tiny/tokenizer.json"],
        "gguf": "SmolLM2-135M-Instruct-1bit",
    },
}
CHAT = ("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n")
# name, text, parse_special (the default of `1bit tokenize` and of the executors: True)
CASES = [
    ("english", "The quick brown fox jumps over the lazy dog. It's 5 o'clock, isn't it?", True),
    ("code", 'def add(a: int, b: int) -> int:\n    """Sum."""\n    return a + b  # ok\n\n'
             "print(add(2, 40))\n", True),
    ("numbers", "3.14159 1,234,567 -42 0x1F 1e-9 2026-09-26 12:30:45 100% 9999999999", True),
    ("whitespace", "  two leading\t\ttabs\n\n\nthree newlines   \r\n trailing   ", True),
    ("latin-diacritics", "Façade naïve coöperate São Paulo Łódź Ærøskøbing Straße", True),
    ("cyrillic", "Съешь же ещё этих мягких французских булок, да выпей чаю.", True),
    ("greek", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", True),
    ("arabic", "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر", True),
    ("hebrew", "דג סקרן שט בים מאוכזב ולפתע מצא חברה", True),
    ("devanagari", "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले", True),
    ("cjk", "我能吞下玻璃而不伤身体。私はガラスを食べられます。나는 유리를 먹을 수 있어요.", True),
    ("thai", "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า", True),
    ("zwj-emoji", "family: 👩\u200d👩\u200d👧\u200d👦, flag: 🏳\ufe0f\u200d🌈, skin tone: 👍🏽", True),
    ("chat-markup", CHAT, True),
    ("chat-markup-as-text", CHAT, False),
    ("empty", "", True),
]


def golden() -> dict:
    import tokenizers

    from lemonade_onebit.tokenizer import FileTokenizer, piece_json

    entries = []
    for name, spec in TOKENIZERS.items():
        digests = {hashlib.sha256((ROOT / f).read_bytes()).hexdigest() for f in spec["files"]}
        if len(digests) != 1:
            raise SystemExit(f"{name}: its files differ: {', '.join(spec['files'])}")
        tokenizer = FileTokenizer(ROOT / spec["files"][0])
        cases = []
        for case, text, parse_special in CASES:
            tokens = tokenizer.encode(text, add_special=True, parse_special=parse_special)
            cases.append({"name": case, "text": text, "parse_special": parse_special,
                          "ids": list(tokens.ids), "pieces": [piece_json(p) for p in tokens.pieces]})
        entries.append({"name": name, "files": spec["files"], "sha256": digests.pop(),
                        "gguf": spec["gguf"], "cases": cases})
    return {"about": "What the pinned Hugging Face tokenizers makes of each case (add_special on): "
                     "written by scripts/tokenizer_golden.py --write; never edit it by hand.",
            "tokenizers_version": tokenizers.__version__, "tokenizers": entries}


def render(data: dict) -> str:
    """The file: indented, one case per line."""
    def dumps(value) -> str:
        return json.dumps(value, ensure_ascii=False)

    lines = ["{", f' "about": {dumps(data["about"])},',
             f' "tokenizers_version": {dumps(data["tokenizers_version"])},', ' "tokenizers": [']
    for i, entry in enumerate(data["tokenizers"]):
        head = {k: v for k, v in entry.items() if k != "cases"}
        lines.append("  " + dumps(head)[:-1] + ', "cases": [')
        lines += [f"   {dumps(case)}," for case in entry["cases"]]
        lines[-1] = lines[-1].rstrip(",")
        lines.append("  ]}" + ("," if i < len(data["tokenizers"]) - 1 else ""))
    lines += [" ]", "}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render(golden())
    if "--write" in sys.argv:
        GOLDEN.write_text(text, encoding="utf-8")
        print(f"wrote {GOLDEN.relative_to(ROOT)}")
    else:
        sys.stdout.write(text)
