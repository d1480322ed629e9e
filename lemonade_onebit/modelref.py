"""What MODEL names: a file or folder of a known kind, or a catalog entry; and the id it is served as."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.catalog.entries import find_entry, install_hint, local_file
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


def resolve_model(spec: str, alias: str | None = None) -> ModelRef:
    path = Path(spec).expanduser()
    if path.exists():
        kind = detect_kind(path)
        served = alias or (path.stem if path.is_file() else path.resolve().name)
        return ModelRef(kind, path.absolute(), served, spec)  # keep symlinked names (HF cache)
    if find_entry(spec) is not None:
        file = local_file(spec)
        if file is None:
            raise RunError(f"model {spec} is not on this machine: {install_hint(spec)}")
        return ModelRef(detect_kind(file), file, alias or spec, spec)
    if HF_ID.match(spec) and not spec.startswith((".", "/")):
        return ModelRef("hf-id", Path(spec), alias or spec.rsplit("/", 1)[1], spec)
    raise RunError(
        f"model not found: {spec} is neither a file, a folder, a catalog name nor an HF id"
    )
