"""The Hugging Face cache, read without importing `huggingface_hub` (serve's start stays short).

Layout (the one Lemonade and every HF tool read): `<cache>/models--ORG--REPO/refs/main` holds the
commit, `snapshots/<commit>/<path>` links into `blobs/<etag>`.
"""

from __future__ import annotations

import os
from pathlib import Path

from lemonade_onebit.catalog.variants import select_files
from lemonade_onebit.errors import RunError


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return Path(home).expanduser() / "hub"


def repo_folder(repo: str) -> Path:
    return hub_cache() / ("models--" + repo.replace("/", "--"))


def snapshot(repo: str) -> Path | None:
    """The snapshot `refs/main` points at, else the newest one; None when nothing is cached."""
    folder = repo_folder(repo)
    try:
        commit = (folder / "refs" / "main").read_text().strip()
        if (folder / "snapshots" / commit).is_dir():
            return folder / "snapshots" / commit
    except OSError:
        pass
    try:
        snaps = sorted((p for p in (folder / "snapshots").iterdir() if p.is_dir()),
                       key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return snaps[-1] if snaps else None


def local_files(repo: str, variant: str | None) -> list[Path] | None:
    """The downloaded files of `repo:variant`, the executor's file first; None when any is missing."""
    snap = snapshot(repo)
    if snap is None:
        return None
    present = [str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()]
    try:
        chosen = select_files(present, variant, repo)
    except RunError:
        return None
    if not chosen:
        return [snap]  # a model folder (onnx, mlx): the snapshot itself
    return [snap / f for f in chosen]
