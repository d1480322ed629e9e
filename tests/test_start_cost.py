"""What `1bit serve` loads before the executor is up: validation libraries and the distribution
scanner cost it ~10 MB of RSS and ~100 ms of start, and nothing on its path needs them."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from lemonade_onebit.cli import build_parser
from lemonade_onebit.serve.options import serve_config
from lemonade_onebit.serve.plan import plan
import lemonade_onebit.serve.run, lemonade_onebit.serve.app
from lemonade_onebit.backends import launchers
ns = build_parser().parse_args(["serve", "-m", sys.argv[1], "--device", "cpu"])
p = plan(serve_config(ns, []), say=lambda m: None)
assert p.launcher.info.device == "cpu", p
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
                        ("pydantic", "pydantic_core", "huggingface_hub"))))
"""


def test_planning_a_serve_imports_no_validation_or_hub_library(smollm2, tmp_path):
    out = subprocess.run([sys.executable, "-c", PROBE, str(smollm2)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
