"""The Laya classifier: hashed word and character n-grams plus a few shape features, read by a
multinomial logistic regression (`model.npz`, ~100 KB, trained by `train.py` from `data/laya/`).

Text of 1,024 characters (code points) or more is `long_doc` without the classifier. The rest is
`code`, `prose` or `short`, with the softmax probability of the winner as the confidence.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CLASSES = ("code", "prose", "short")
LONG_DOC = "long_doc"
LONG_DOC_CHARS = 1024
BUCKETS = 1 << 16
MODEL = Path(__file__).with_name("model.npz")
CHAR_SPAN = 400  # character n-grams come from the first 400 characters
WORD = re.compile(r"[^\W\d_]+|\d+|[^\w\s]", re.UNICODE)
CODE_SYMBOLS = set("{}()[];=<>_`$#|\\/*+&%^~:")


# Words that say what kind of answer is wanted, in the languages users write in most. They carry
# what a few hundred examples cannot teach about words the examples never used.
LEXICON = {
    "code": """
        code function script program snippet implement implementation class method module regex
        regexp query sql command cli terminal shell bash zsh powershell cmd git pip npm yarn cargo
        docker dockerfile kubernetes k8s yaml yml json toml xml csv config configuration nginx
        systemd cron makefile compile compiler debug bug error exception traceback stack
        stacktrace syntax variable loop array list dict dictionary string int integer boolean
        api endpoint http curl wget ssh port linux unix windows macos terminal install package
        library framework python rust golang go javascript js typescript ts java kotlin swift c++
        cpp c# csharp ruby php perl lua haskell scala elixir erlang clojure zig r matlab julia
        html css react vue angular svelte node nodejs django flask fastapi express spring rails
        pandas numpy tensorflow pytorch sql postgres postgresql mysql sqlite mongodb redis
        gitignore dockerignore vim emacs vscode awk sed grep jq ffmpeg chmod chown sudo apt brew
        terraform ansible helm github gitlab ci pipeline workflow unittest pytest jest junit
        refactor rewrite optimize parse serialize deserialize async await thread mutex pointer
        null none undefined segfault compile runtime lambda closure decorator generator iterator
        función funcion código codigo fonction programme funktion skript funzione codice função
        script 函数 代码 脚本 编程 関数 コード スクリプト プログラム
        """.split(),
    "prose": """
        explain explanation describe description essay story poem letter speech eulogy article
        blog post review overview history historical discuss discussion why advantages
        disadvantages pros cons compare comparison difference differences analysis analyze
        opinion argue argument persuasive summary paragraphs paragraph detailed detail depth
        introduction guide advice tips plan philosophy theory themes ethics ethical impact
        causes effects consequences benefits risks importance significance culture society
        economy politics science biology physics chemistry beginner understand understanding
        concept concepts conceptually tell narrative chapter report thesis newsletter announcement
        motivational cover bedtime novel character characters plot
        explica explique explícame explicar erkläre erklären beschreibe spiega spiegami descreva
        describe décris raconte cuéntame historia histoire geschichte storia história
        解释 说明 描述 介绍 为什么 历史 説明 解説 なぜ 歴史 について
        """.split(),
    "short": """
        capital translate translation traduce traduis traduz übersetze traduci how_many how_much
        how_old how_far how_tall whats who which when where year date number percent percentage sum total plus
        minus times divided square root convert conversion spell spelling synonym antonym
        opposite define definition abbreviation acronym stand stands plural singular past tense
        rhymes hi hello hey thanks thank bye goodbye ok okay yes_or_no just_yes one_word
        one_sentence in_one quick name population tall height weight distance old age born invented
        founded largest smallest biggest tallest fastest capitale hauptstadt capitale 首都 多少
        几 什么 翻译 谁 いくつ 何 どこ 誰 翻訳
        """.split(),
}
_LEXICON = {w.replace("_", " "): k for k, ws in LEXICON.items() for w in ws}
# Scripts without spaces between words: matched as substrings.
_CJK = [(w, k) for w, k in _LEXICON.items() if any("\u3000" <= ch <= "\u9fff" for ch in w)]


@dataclass(frozen=True)
class Decision:
    klass: str
    confidence: float


def _bucket(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % BUCKETS


def features(text: str) -> dict[int, float]:
    """Hashed features → weight. Groups are scaled so no group dominates by sheer count."""
    low = text.lower()
    words = WORD.findall(low)
    feats: dict[int, float] = {}

    def add(group: str, grams: list[str], scale: float) -> None:
        if not grams:
            return
        w = scale / math.sqrt(len(grams))
        for g in grams:
            k = _bucket(group + g)
            feats[k] = feats.get(k, 0.0) + w

    add("w:", words, 1.0)
    add("b:", [a + " " + b for a, b in zip(words, words[1:])], 1.0)
    span = " " + low[:CHAR_SPAN] + " "
    add("c:", [span[i:i + n] for n in (2, 3, 4) for i in range(len(span) - n + 1)], 1.0)
    n_chars = len(text)
    symbols = sum(ch in CODE_SYMBOLS for ch in text)
    digits = sum(ch.isdigit() for ch in text)
    shape = [
        f"len{min(int(math.log2(n_chars + 1)), 10)}",
        f"words{min(len(words), 12) // 2}",
        f"sym{min(int(20 * symbols / max(n_chars, 1)), 6)}",
        f"dig{min(int(20 * digits / max(n_chars, 1)), 6)}",
        f"first:{words[0] if words else ''}",
        f"last:{words[-1] if words else ''}",
        "newline" if "\n" in text else "oneline",
        "fence" if "```" in text else "nofence",
        "question" if text.rstrip().endswith("?") else "statement",
    ]
    add("s:", shape, 1.0)
    hits = [_LEXICON[w] for w in words if w in _LEXICON]
    hits += [_LEXICON[a + " " + b] for a, b in zip(words, words[1:]) if a + " " + b in _LEXICON]
    hits += [_LEXICON[" ".join(t)] for t in zip(words, words[1:], words[2:])
             if " ".join(t) in _LEXICON]
    hits += [k for w, k in _CJK if w in text]
    add("lex:", hits, 1.5)
    return feats


@lru_cache(maxsize=1)
def _weights():
    import numpy as np

    with np.load(MODEL) as data:
        return data["W"].astype(np.float32), data["b"].astype(np.float32)


def scores(text: str) -> list[float]:
    """Class probabilities, in CLASSES order."""
    import numpy as np

    W, b = _weights()
    feats = features(text)
    idx = np.fromiter(feats.keys(), dtype=np.int64, count=len(feats))
    val = np.fromiter(feats.values(), dtype=np.float32, count=len(feats))
    logits = val @ W[idx] + b
    logits -= logits.max()
    p = np.exp(logits)
    return (p / p.sum()).tolist()


def classify(text: str) -> Decision:
    if len(text) >= LONG_DOC_CHARS:  # str length counts code points
        return Decision(LONG_DOC, 1.0)
    p = scores(text)
    best = max(range(len(CLASSES)), key=p.__getitem__)
    return Decision(CLASSES[best], round(p[best], 4))
