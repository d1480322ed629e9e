"""Build the Laya data set into `train.json` and `eval.json`. Deterministic:

    python data/laya/build.py

Every case belongs to a *family*: the requests one author wrote in one voice about one domain
(`requests/<family>.txt`, `fresh/<family>.txt`), the seed lists of `cases.py`, or one template of
generated variations. A family file may name its author (`# author: NAME`), who wrote several
families; the folder decides the side, and an author's families are all in one. `eval.json` holds
the families of `fresh/`, never trained on; everything else is `train.json`, inside which
`lemonade_onebit.laya.train` holds out whole groups fold by fold (grouped cross-validation; the
group is the author where one is named, else the family).
Long documents are built on each side from that side's own requests, so no text crosses the split.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import cases

HERE = Path(__file__).resolve().parent
REQUESTS = HERE / "requests"
FRESH = HERE / "fresh"
SEED = 1729
CLASSES = ("code", "prose", "short")
LINE = re.compile(r"^(code|prose|short): (.+)$")
AUTHOR = re.compile(r"^#\s*author\s*:(.*)$", re.IGNORECASE)

LANGS = ["Python", "Rust", "Go", "JavaScript", "TypeScript", "Java", "C", "C++", "C#", "Ruby",
         "Kotlin", "Swift", "PHP", "Bash", "Haskell", "Scala", "Elixir", "Lua", "R", "Zig"]
TASKS = ["reads a JSON file and prints the keys", "removes duplicates from a list",
         "counts word frequencies in a text", "checks whether a number is prime",
         "computes the GCD of two integers", "merges two sorted arrays",
         "parses command-line arguments", "converts a hex string to bytes",
         "finds the longest common prefix of strings", "validates a credit card number with Luhn",
         "downloads a URL and saves it to disk", "computes a SHA-256 hash of a file",
         "retries an HTTP request with exponential backoff", "transposes a matrix",
         "implements a stack with push and pop", "formats a number with thousands separators",
         "reads environment variables with defaults", "walks a directory tree recursively",
         "sorts records by two keys", "implements a rate limiter"]
CODE_FORMS = ["Write a {lang} function that {task}.", "In {lang}, write code that {task}.",
              "Can you give me {lang} code that {task}?", "I need a {lang} script that {task}.",
              "Show a {lang} example that {task}.", "{lang}: function that {task}",
              "Implement in {lang}: a routine that {task}."]

TOPICS = ["the causes of the Great Depression", "how the human heart pumps blood",
          "the history of the Olympic Games", "why bees are important for agriculture",
          "the differences between Baroque and Classical music", "how earthquakes happen",
          "the impact of the industrial revolution on cities", "how democracy emerged in Athens",
          "the benefits and risks of artificial intelligence", "how tides are caused by the Moon",
          "the life and work of Marie Curie", "why the Titanic sank",
          "the role of fungi in forest ecosystems", "how inflation affects savings",
          "the cultural importance of the Silk Road", "how language learning changes the brain",
          "the pros and cons of nuclear fusion research", "how coral reefs form",
          "the history of the bicycle", "why people procrastinate and how to stop",
          "the way open-source communities make decisions", "how cloud computing changed IT teams",
          "the trade-offs between static and dynamic typing", "how search engines rank pages",
          "the consequences of the fall of the Berlin Wall", "how antibiotics resistance develops",
          "the meaning of Van Gogh's Starry Night", "how a startup should plan its first year",
          "the importance of biodiversity", "how jazz developed in New Orleans"]
PROSE_FORMS = ["Explain {topic}.", "Write an essay about {topic}.", "Describe {topic} in detail.",
               "Tell me about {topic}.", "Give me an overview of {topic}.",
               "Write a few paragraphs on {topic}.", "Can you explain {topic} to a beginner?",
               "I'd like a detailed explanation of {topic}."]

COUNTRIES = ["Spain", "Germany", "Kenya", "Peru", "Norway", "Vietnam", "Egypt", "Canada", "Chile",
             "Poland", "Greece", "Thailand", "Morocco", "Ireland", "Argentina", "Japan"]
WORDS = ["house", "water", "friend", "tomorrow", "bread", "library", "green", "to sleep",
         "good luck", "see you soon", "I am hungry", "where is the station?"]
TARGETS = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch", "Japanese"]
SHORT_FORMS = [
    lambda r: f"What is the capital of {r.choice(COUNTRIES)}?",
    lambda r: f"Capital of {r.choice(COUNTRIES)}?",
    lambda r: (f"What is {r.randint(2, 999)} "
               f"{r.choice(['+', '-', '*', 'times', 'plus', 'minus'])} {r.randint(2, 99)}?"),
    lambda r: f"{r.randint(2, 99)} {r.choice(['+', '-', '*', '/'])} {r.randint(2, 99)} = ?",
    lambda r: f"Translate '{r.choice(WORDS)}' to {r.choice(TARGETS)}.",
    lambda r: f"How do you say '{r.choice(WORDS)}' in {r.choice(TARGETS)}?",
    lambda r: (f"Convert {r.randint(2, 500)} "
               f"{r.choice(['km', 'pounds', 'inches', 'liters', 'degrees Celsius'])} to "
               f"{r.choice(['miles', 'kilograms', 'centimeters', 'gallons', 'Fahrenheit'])}."),
    lambda r: f"What's {r.randint(5, 95)}% of {r.randint(10, 2000)}?",
    lambda r: f"Is {r.randint(10, 500)} divisible by {r.randint(2, 12)}?",
    lambda r: f"What is the population of {r.choice(COUNTRIES)}, roughly?",
    lambda r: f"Which continent is {r.choice(COUNTRIES)} in?",
    lambda r: (f"{r.choice(['Hi', 'Hello', 'Hey', 'Good evening', 'Yo', 'Greetings'])}"
               f"{r.choice(['', '!', ' :)', ', how is it going?'])}"),
]
GENERATED = 40  # per template family: variations teach forms, not variety

LONG_INTROS = ["Summarize this article:\n\n", "Here is a document. What are its key points?\n\n",
               "Please review the following text:\n\n", "Translate this into French:\n\n",
               "Find the bug in this file:\n\n", "", "Answer questions about this report.\n\n"]


def read_family(path: Path) -> list[dict]:
    """`class: text` lines; `#` lines describe the family; `\\n` in a text is a line break. One
    `# author: NAME` line before the first request names the author of several families (the
    folds of train.py keep an author's families together)."""
    out, author = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        named = AUTHOR.match(line)
        if named:
            if author is not None or out or not named.group(1).strip():
                raise SystemExit(f"{path.name}:{number}: one '# author: NAME' line, before the "
                                 "first request")
            author = named.group(1).strip()
        if not line.strip() or line.startswith("#"):
            continue
        match = LINE.match(line)
        if not match:
            raise SystemExit(f"{path.name}:{number}: expected 'code|prose|short: TEXT'")
        text = match.group(2).replace("\\n", "\n")
        out.append({"class": match.group(1), "text": text, "family": path.stem, "source": "hand",
                    **({"author": author} if author else {})})
    return out


def request_families(folder: Path = REQUESTS) -> list[dict]:
    return [c for path in sorted(folder.glob("*.txt")) for c in read_family(path)]


def seed_families() -> list[dict]:
    lists = {"seed-code": [("code", t) for t in cases.CODE],
             "seed-prose": [("prose", t) for t in cases.PROSE],
             "seed-short": [("short", t) for t in cases.SHORT],
             "seed-hard": cases.HARD, "seed-more": cases.MORE, "seed-more2": cases.MORE2}
    return [{"class": k, "text": t, "family": family, "source": "hand"}
            for family, items in lists.items() for k, t in items]


def template_families(r: random.Random) -> list[dict]:
    out = []
    for _ in range(GENERATED):
        out.append({"class": "code", "family": "template-code", "source": "generated",
                    "text": r.choice(CODE_FORMS).format(lang=r.choice(LANGS), task=r.choice(TASKS))})
    for _ in range(GENERATED):
        out.append({"class": "prose", "family": "template-prose", "source": "generated",
                    "text": r.choice(PROSE_FORMS).format(topic=r.choice(TOPICS))})
    for _ in range(GENERATED):
        out.append({"class": "short", "family": "template-short", "source": "generated",
                    "text": r.choice(SHORT_FORMS)(r)})
    return out


def long_docs(r: random.Random, pool: list[str], n: int, family: str) -> list[dict]:
    out = []
    for i in range(n):
        target = [1024, 1100, 1500, 3000, 8000][i % 5]
        text = r.choice(LONG_INTROS)
        while len(text) < target:
            text += r.choice(pool) + ("\n" if r.random() < 0.5 else " ")
        text = text[:target] if r.random() < 0.5 else text
        out.append({"class": "long_doc", "text": text, "family": family, "source": "generated"})
    return out


def unique(items: list[dict]) -> list[dict]:
    seen, out = set(), []
    for case in items:
        if case["text"] not in seen:
            seen.add(case["text"])
            out.append(case)
    return out


def build() -> tuple[list[dict], list[dict]]:
    r = random.Random(SEED)
    train = unique(seed_families() + template_families(r) + request_families())
    texts = {c["text"] for c in train}
    held = unique([c for c in request_families(FRESH) if c["text"] not in texts])
    train += long_docs(r, [c["text"] for c in train], 40, "long-train")
    held += long_docs(r, [c["text"] for c in held], 15, "long-held-out")
    return train, held


def main() -> None:
    train, held = build()
    for name, part in (("train.json", train), ("eval.json", held)):
        (HERE / name).write_text(json.dumps({"cases": part}, indent=1, ensure_ascii=False) + "\n")
    for name, part in (("train", train), ("held out", held)):
        counts = {c: sum(1 for x in part if x["class"] == c) for c in (*CLASSES, "long_doc")}
        families = len({x["family"] for x in part})
        print(f"{name}: {len(part)} cases in {families} families {counts}")


if __name__ == "__main__":
    main()
