"""Build the Laya data set: hand-written cases (`cases.py`) plus generated variations, split into
`train.json` and a held-out `eval.json` that training never sees. Deterministic:

    python data/laya/build.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import cases

HERE = Path(__file__).resolve().parent
SEED = 1729
EVAL_SHARE = 0.25

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
    lambda r: f"What is {r.randint(2, 999)} {r.choice(['+', '-', '*', 'times', 'plus', 'minus'])} {r.randint(2, 99)}?",
    lambda r: f"{r.randint(2, 99)} {r.choice(['+', '-', '*', '/'])} {r.randint(2, 99)} = ?",
    lambda r: f"Translate '{r.choice(WORDS)}' to {r.choice(TARGETS)}.",
    lambda r: f"How do you say '{r.choice(WORDS)}' in {r.choice(TARGETS)}?",
    lambda r: f"Convert {r.randint(2, 500)} {r.choice(['km', 'pounds', 'inches', 'liters', 'degrees Celsius'])} to {r.choice(['miles', 'kilograms', 'centimeters', 'gallons', 'Fahrenheit'])}.",
    lambda r: f"What's {r.randint(5, 95)}% of {r.randint(10, 2000)}?",
    lambda r: f"Is {r.randint(10, 500)} divisible by {r.randint(2, 12)}?",
    lambda r: f"What is the population of {r.choice(COUNTRIES)}, roughly?",
    lambda r: f"Which continent is {r.choice(COUNTRIES)} in?",
    lambda r: f"{r.choice(['Hi', 'Hello', 'Hey', 'Good evening', 'Yo', 'Greetings'])}{r.choice(['', '!', ' :)', ', how is it going?'])}",
]

LONG_INTROS = ["Summarize this article:\n\n", "Here is a document. What are its key points?\n\n",
               "Please review the following text:\n\n", "Translate this into French:\n\n",
               "Find the bug in this file:\n\n", "", "Answer questions about this report.\n\n"]


def long_doc(r: random.Random, target: int) -> str:
    pool = cases.PROSE + cases.CODE + [t for _, t in cases.HARD]
    text = r.choice(LONG_INTROS)
    while len(text) < target:
        text += r.choice(pool) + ("\n" if r.random() < 0.5 else " ")
    return text[:target] if r.random() < 0.5 else text


def build() -> list[dict]:
    r = random.Random(SEED)
    out = [{"class": "code", "text": t, "source": "hand"} for t in cases.CODE]
    out += [{"class": "prose", "text": t, "source": "hand"} for t in cases.PROSE]
    out += [{"class": "short", "text": t, "source": "hand"} for t in cases.SHORT]
    out += [{"class": c, "text": t, "source": "hard"} for c, t in cases.HARD + cases.MORE + cases.MORE2]
    for _ in range(110):
        out.append({"class": "code", "source": "generated", "text": r.choice(CODE_FORMS).format(
            lang=r.choice(LANGS), task=r.choice(TASKS))})
    for _ in range(110):
        out.append({"class": "prose", "source": "generated",
                    "text": r.choice(PROSE_FORMS).format(topic=r.choice(TOPICS))})
    for _ in range(110):
        out.append({"class": "short", "source": "generated", "text": r.choice(SHORT_FORMS)(r)})
    for i in range(50):
        target = [1024, 1100, 1500, 3000, 8000][i % 5]
        out.append({"class": "long_doc", "source": "generated", "text": long_doc(r, target)})
    seen, unique = set(), []
    for case in out:
        if case["text"] not in seen:
            seen.add(case["text"])
            unique.append(case)
    return unique


def split(all_cases: list[dict]) -> tuple[list[dict], list[dict]]:
    """Stratified by class and source, so the held-out part has hand-written hard cases too."""
    r = random.Random(SEED + 1)
    train, held = [], []
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in all_cases:
        groups.setdefault((case["class"], case["source"]), []).append(case)
    for key in sorted(groups):
        items = groups[key][:]
        r.shuffle(items)
        n_eval = round(len(items) * EVAL_SHARE)
        held += items[:n_eval]
        train += items[n_eval:]
    return train, held


def main() -> None:
    all_cases = build()
    train, held = split(all_cases)
    for name, part in (("train.json", train), ("eval.json", held)):
        (HERE / name).write_text(json.dumps({"cases": part}, indent=1, ensure_ascii=False) + "\n")
    counts = {c: sum(1 for x in all_cases if x["class"] == c) for c in
              ("code", "prose", "short", "long_doc")}
    print(f"{len(all_cases)} cases {counts}: {len(train)} train, {len(held)} held out")


if __name__ == "__main__":
    main()
