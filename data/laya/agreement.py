"""Agreement of blind labellers with the authors' labels on held-out requests, and the shipped
classifier on the same requests (data/laya/agreement.json; docs/laya.md, "Labeller agreement").

    python data/laya/agreement.py
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from lemonade_onebit.laya.model import CLASSES, classify  # noqa: E402


def main() -> int:
    items = json.loads((HERE / "agreement.json").read_text())["items"]
    gold = [it["class"] for it in items]
    n = len(items)
    labellers = len(items[0]["labels"])
    for k in range(labellers):
        right = sum(it["labels"][k] == it["class"] for it in items)
        print(f"labeller {k + 1} vs the authors' labels: {right}/{n} ({right / n:.1%})")
    for a in range(labellers):
        for b in range(a + 1, labellers):
            same = sum(it["labels"][a] == it["labels"][b] for it in items)
            print(f"labellers {a + 1} and {b + 1} agree: {same}/{n} ({same / n:.1%})")
    majority = [collections.Counter(it["labels"]).most_common(1)[0] for it in items]
    right = sum(label == g and count * 2 > labellers for (label, count), g in zip(majority, gold))
    print(f"majority vs the authors' labels: {right}/{n} ({right / n:.1%})")
    predicted = [classify(it["text"]).klass for it in items]
    right = sum(p == g for p, g in zip(predicted, gold))
    print(f"the shipped classifier vs the authors' labels: {right}/{n} ({right / n:.1%})")
    for cls in CLASSES:
        idx = [i for i, g in enumerate(gold) if g == cls]
        people = [sum(items[i]["labels"][k] == cls for i in idx) for k in range(labellers)]
        model = sum(predicted[i] == cls for i in idx)
        print(f"  {cls}: labellers {', '.join(f'{p}/{len(idx)}' for p in people)}; "
              f"classifier {model}/{len(idx)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
