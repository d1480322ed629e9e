"""The README's route table, from the launcher registry: `python scripts/route_table.py --write`
rewrites it in place; without `--write` it prints it. `tests/test_docs.py` fails when the README's
table differs from what the registry says."""

from __future__ import annotations

import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- routes:start -->", "<!-- routes:end -->"
KINDS = {"gguf": "`.gguf`", "1bp": "`.1bp`", "onnx": "folder with `genai_config.json`",
         "npu": "NPU folder (`model.q4nx` + `npu/`)", "mlx": "MLX folder", "hf-id": "HF id"}


def table() -> str:
    from lemonade_onebit.backends import launchers

    rows = ["| `--device` | model | executor | found through | ready on | auto rank |",
            "|---|---|---|---|---|---|"]
    for cls in launchers():
        info = cls.info
        kinds = ", ".join(KINDS.get(k, k) for k in sorted(info.model_kinds))
        lookup = [f"`{info.executor_flag} PATH`"] if info.executor_flag else []
        lookup += [f"`${info.executor_env}`", f"`{info.executor}` on PATH"]
        rank = str(info.auto_rank) if info.auto_kinds != frozenset() else "never auto"
        rows.append(f"| `{info.device}` | {kinds} | {info.summary} | {', '.join(lookup)} | "
                    f"`{info.readiness}` | {rank} |")
    return "\n".join(rows)


def with_table(text: str) -> str:
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


if __name__ == "__main__":
    if "--write" in sys.argv:
        README.write_text(with_table(README.read_text()))
    else:
        print(table())
