"""A model as a launcher is given it: its kind, its path and the id it is served as. What `-m` names
is resolved into one by `catalog.resolve`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.errors import RunError

HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelRef:
    kind: str  # gguf | 1bp | onnx | npu | mlx | hf-id
    path: Path
    served_id: str
    source: str = ""  # what the user named: a path, a catalog name or an HF id


def detect_kind(path: Path) -> str:
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".gguf":
            return "gguf"
        if suffix == ".1bp":
            return "1bp"
        raise RunError(f"{path}: not a model file this engine knows (.gguf or .1bp)")
    if (path / "genai_config.json").is_file():
        return "onnx"
    if (path / "model.q4nx").is_file() and (path / "npu").is_dir():
        return "npu"
    if (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        return "mlx"
    raise RunError(
        f"{path}: a folder of no known model kind (expected genai_config.json for ONNX, "
        "model.q4nx + npu/ for the NPU, or config.json + *.safetensors for MLX)"
    )
