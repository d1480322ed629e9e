"""The Laya classifier: hashed word and character n-grams, shape features (length, marks of code
in the text) and the cue words of `lexicon.py`, read by a multinomial logistic regression
(`model.npz`, trained by `train.py` from `data/laya/`).

Text of 1,024 characters (code points) or more is `long_doc` without the classifier. The rest is
`code`, `prose` or `short`, with the winner's temperature-scaled softmax probability as the
confidence: T is fitted on families and authors the model did not see, so a confidence of 0.8 is
right about 80% of the time (docs/laya.md has the reliability table).
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lemonade_onebit.laya.lexicon import (
    CJK,
    CJK_TECH,
    CODE_ASK,
    FAULT,
    PROSE_ASK,
    SHORT_ASK,
    TECH,
    WHY,
)

CLASSES = ("code", "prose", "short")
LONG_DOC = "long_doc"
LONG_DOC_CHARS = 1024
BUCKETS = 1 << 16
MODEL = Path(__file__).with_name("model.npz")
# Weight of each feature group: words, bigrams, characters, shape, cue words, software-conjoined.
SCALE = {"w": 1.0, "b": 1.0, "c": 1.0, "s": 1.0, "lex": 1.5, "x": 0.5}
CHAR_SPAN = 400  # character n-grams come from the first 400 characters
TOKEN = re.compile(r"[^\W_]+(?:\+\+|#)?|[^\w\s]")
DIGIT = re.compile(r"\d")
CJK_CHAR = re.compile(r"([\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af])")  # one token each
CODE_SYMBOLS = set("{}()[];=<>_`$#|\\/*+&%^~:")
GROUPS = {"tech": TECH, "code_ask": CODE_ASK, "prose_ask": PROSE_ASK, "short_ask": SHORT_ASK,
          "why": WHY, "fault": FAULT}
SHAPES = [(name, re.compile(pattern)) for name, pattern in (
    ("backtick", r"`"),
    ("call", r"\b[A-Za-z_]\w*\([^)]*\)"),
    ("snake", r"\b[a-z]+_[a-z_]+\b"),
    ("camel", r"\b[a-z]{2,}[A-Z]\w*"),
    ("dotted", r"\b[A-Za-z_]\w+\.[A-Za-z_]\w+"),
    ("flag", r"(?:^|\s)--?[A-Za-z]"),
    ("path", r"(?:^|\s)(?:~|\.{1,2})?/\w"),
    ("operator", r"==|!=|=>|->|&&|\|\||::|\+=|</|/>|\$\(|\$\{|%>%"),
    ("error", r"\b\w+(?:Error|Exception)\b|\berrno\b|\bE\d{4}\b"),
    ("hex", r"\b0x[0-9a-fA-F]+\b"),
    ("braces", r"[{};]"),
    ("port", r"\bport \d+|:\d{2,5}\b"),
)]
WH = frozenset("what whats which who whom whose when where how".split())
AUX = frozenset("""is are was were be been does do did can could should would will shall may might
    must has have had s re makes made happens happened causes caused kind kinds sort type types
    to about if i you we they it this that the a an my your our their there""".split())
# Brand-like capitals (GitHub, LinkedIn, YouTube): a feature, but no sign of software alone.
PASCAL = re.compile(r"\b[A-Z][a-z]+[A-Z]\w*")


@dataclass(frozen=True)
class Decision:
    klass: str
    confidence: float


def _bucket(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % BUCKETS


def _lexicon_hits(words: list[str], text: str) -> dict[str, int]:
    """How many words of each lexicon group the text has (one, two and three-word entries)."""
    words = [w for w in words if w[0].isalnum()]
    grams = words + [" ".join(words[i:i + n]) for n in (2, 3, 4) for i in range(len(words) - n + 1)]
    hits = {group: sum(g in entries for g in grams) for group, entries in GROUPS.items()}
    for group, entries in CJK.items():
        hits[group + "_ask"] += sum(e in text for e in entries)
    hits["tech"] += sum(e in text for e in CJK_TECH)
    return hits


def _question_form(words: list[str]) -> str:
    """How an English question opens: "what year ...", "how deep ..." ask for one fact; "what is
    ...", "how does ..." may ask for anything."""
    alpha = [w for w in words if w[0].isalnum()]
    if len(alpha) < 2 or alpha[0] not in WH:
        return "form:none"
    second = alpha[1]
    if alpha[0] in ("what", "whats") and second in ("is", "are", "s", "re"):
        rest = alpha[2:]
        if any(w[0].isdigit() for w in rest):
            return "form:what-is-number"
        if "of" in rest or "in" in rest:
            return "form:what-is-of"  # "what is the capital of ...", "what is 2 in ..."
        return "form:what-is-bare" if len(rest) <= 3 else "form:what-is"
    if alpha[0] == "how":
        return "form:how-aux" if second in AUX else "form:how-adjective"
    return f"form:{alpha[0]}-aux" if second in AUX else f"form:{alpha[0]}-noun"


def code_shapes(text: str) -> list[str]:
    """Marks of code in the text itself: backticks, identifiers, flags, paths, operators."""
    return [name for name, pattern in SHAPES if pattern.search(text)]


def features(text: str) -> dict[int, float]:
    """Hashed features -> weight. Groups are scaled so no group dominates by sheer count."""
    low = text.lower()
    raw = TOKEN.findall(CJK_CHAR.sub(r" \1 ", low))
    words = [DIGIT.sub("0", w) for w in raw]
    feats: dict[int, float] = {}

    def add(group: str, grams: list[str], scale: float) -> None:
        if not grams:
            return
        w = scale / math.sqrt(len(grams))
        for g in grams:
            k = _bucket(group + g)
            feats[k] = feats.get(k, 0.0) + w

    add("w:", words, SCALE["w"])
    add("b:", [a + " " + b for a, b in zip(words, words[1:])], SCALE["b"])
    span = " " + low[:CHAR_SPAN] + " "
    add("c:", [span[i:i + n] for n in (2, 3, 4) for i in range(len(span) - n + 1)], SCALE["c"])
    hits = _lexicon_hits(raw, low)
    shapes = code_shapes(text)
    domain = ("plain", "tech", "tech2")[min(hits["tech"] + len(shapes), 2)]
    n_chars = len(text)
    symbols = sum(ch in CODE_SYMBOLS for ch in text)
    digits = sum(ch.isdigit() for ch in text)
    head = words[:3]
    shape = [
        f"len{min(int(math.log2(n_chars + 1)), 10)}",
        f"words{min(len(words), 24) // 3}",
        f"sym{min(int(20 * symbols / max(n_chars, 1)), 6)}",
        f"dig{min(int(20 * digits / max(n_chars, 1)), 6)}",
        f"first:{' '.join(head[:1])}", f"first2:{' '.join(head[:2])}",
        f"first3:{' '.join(head)}", f"last:{words[-1] if words else ''}",
        "newline" if "\n" in text else "oneline",
        "question" if text.rstrip().endswith(("?", "？")) else "statement",
        *(f"shape:{s}" for s in shapes), f"shapes{min(len(shapes), 3)}",
        "pascal" if PASCAL.search(text) else "nopascal",
        _question_form(words),
    ]
    add("s:", shape, SCALE["s"])
    lex = [f"{group}{min(n, 3)}" for group, n in hits.items() if n]
    add("lex:", lex + [domain], SCALE["lex"])
    # The same words read differently with software in the request ("why does my ... ").
    add(domain + ":", [*words[:12], *(f"first:{x}" for x in shape[4:7]), *lex], SCALE["x"])
    return feats


@lru_cache(maxsize=1)
def _weights():
    import numpy as np

    with np.load(MODEL) as data:
        return (data["W"].astype(np.float32), data["b"].astype(np.float32),
                float(data["T"]))


def scores(text: str) -> list[float]:
    """Calibrated class probabilities, in CLASSES order: softmax(logits / T)."""
    import numpy as np

    W, b, temperature = _weights()
    feats = features(text)
    idx = np.fromiter(feats.keys(), dtype=np.int64, count=len(feats))
    val = np.fromiter(feats.values(), dtype=np.float32, count=len(feats))
    logits = (val @ W[idx] + b) / temperature
    logits -= logits.max()
    p = np.exp(logits)
    return (p / p.sum()).tolist()


def classify(text: str) -> Decision:
    if len(text) >= LONG_DOC_CHARS:  # str length counts code points
        return Decision(LONG_DOC, 1.0)
    p = scores(text)
    best = max(range(len(CLASSES)), key=p.__getitem__)
    return Decision(CLASSES[best], round(p[best], 4))
