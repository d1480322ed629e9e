"""What `-m MODEL` names: a file or folder of a known kind, a catalog entry, or an HF id."""

from __future__ import annotations

from pathlib import Path

from lemonade_onebit.catalog.entries import find_entry, install_hint, local_file
from lemonade_onebit.errors import RunError
from lemonade_onebit.modelref import HF_ID, ModelRef, detect_kind


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
