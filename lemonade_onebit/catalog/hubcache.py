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


def repo_folder(repo: str, cache: Path | None = None) -> Path:
    return (cache or hub_cache()) / ("models--" + repo.replace("/", "--"))


def cached_location(path: Path) -> tuple[str, str] | None:
    """(repo, path inside the repo) when `path` lies in a snapshot of any HF cache
    (`.../models--ORG--REPO/snapshots/<rev>/<file>`), else None."""
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 3, 0, -1):
        folder = parts[i]
        if folder.startswith("models--") and parts[i + 1] == "snapshots":
            org, sep, name = folder[len("models--"):].partition("--")
            rel = parts[i + 3:]
            if sep and org and name and rel:
                return f"{org}/{name}", "/".join(rel)
    return None


def snapshot_links_to(blob: Path) -> list[Path]:
    """The snapshot files of the repo folder `blob` lies in (`models--ORG--REPO/blobs/<h>`)
    that link to it."""
    if blob.parent.name != "blobs" or not blob.parent.parent.name.startswith("models--"):
        return []
    found = []
    try:
        for path in (blob.parent.parent / "snapshots").rglob("*"):
            if path.is_symlink() and path.resolve() == blob:
                found.append(path)
    except OSError:
        return []
    return sorted(found)


def file_sha256(path: Path) -> str:
    """The file's sha256, remembered by (device, inode, size, mtime) so a large file is hashed
    once, not at every load."""
    import hashlib
    import json

    from lemonade_onebit.userdirs import cache_dir

    st = path.stat()
    key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    memo = cache_dir() / "sha256.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return known[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    value = digest.hexdigest()
    known = known if isinstance(known, dict) else {}
    known[key] = value
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(list(known.items())[-256:])))
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only home: hash each time
    return value


def snapshot(repo: str, cache: Path | None = None) -> Path | None:
    """The snapshot `refs/main` points at, else the newest one; None when nothing is cached."""
    folder = repo_folder(repo, cache)
    named = snapshot_in(folder)
    if named is not None:
        return named
    try:
        snaps = sorted((p for p in (folder / "snapshots").iterdir() if p.is_dir()),
                       key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return snaps[-1] if snaps else None


def local_files(repo: str, variant: str | None, cache: Path | None = None) -> list[Path] | None:
    """The downloaded files of `repo:variant`, the executor's file first; None when any is missing."""
    snap = snapshot(repo, cache)
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


def local_revision(sha256: str) -> str:
    """The revision of a snapshot made from local files: 40 hex digits like a commit, derived
    from the file so the same file always lands in the same snapshot."""
    import hashlib

    return hashlib.sha1(f"lemonade-onebit local {sha256}".encode()).hexdigest()


def link_file(cache: Path, repo: str, relpath: str, target: Path, sha256: str,
              created: list[dict]) -> bool:
    """Make `target` the file `relpath` of `repo` in the HF cache at `cache`, without copying:
    `blobs/<sha256>` links to `target`, `snapshots/<rev>/<relpath>` to the blob, `refs/main`
    names the snapshot when it named none. What is there already is left alone. Appends what it
    creates to `created` as it goes (so that a failure halfway still leaves a full record for
    `unlink_created`); returns whether it created anything."""
    from lemonade_onebit.catalog.variants import REPO

    if not REPO.match(repo) or ".." in repo:
        raise RunError(f"{repo!r} is not an ORG/REPO name")
    parts = relpath.split("/")
    if relpath.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise RunError(f"{relpath!r} is not a path inside a repo")
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise RunError(f"{sha256!r} is not a sha256")
    folder = repo_folder(repo, cache)
    snap = snapshot_in(folder)
    if snap is not None and (snap / relpath).is_file():
        return False  # the cache already holds the file
    before = len(created)

    def make_dir(path: Path) -> None:
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for p in reversed(missing):
            p.mkdir()
            created.append({"path": str(p), "dir": True})

    blob = folder / "blobs" / sha256
    make_dir(blob.parent)
    if not blob.exists():
        if blob.is_symlink():  # a dangling link: ours from an earlier install, or junk
            blob.unlink()
        blob.symlink_to(target.resolve())
        created.append({"path": str(blob), "link": str(target.resolve())})
    rev = snap.name if snap is not None else local_revision(sha256)
    link = folder / "snapshots" / rev / relpath
    make_dir(link.parent)
    if link.is_symlink():
        link.unlink()
    to_blob = os.path.relpath(blob, link.parent)
    link.symlink_to(to_blob)
    created.append({"path": str(link), "link": to_blob})
    refs = folder / "refs" / "main"
    if not refs.exists():
        make_dir(refs.parent)
        refs.write_text(rev)
        created.append({"path": str(refs), "refs": rev})
    return len(created) > before


def snapshot_in(folder: Path) -> Path | None:
    """The snapshot `refs/main` of a repo folder names, when it exists."""
    try:
        commit = (folder / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snap = folder / "snapshots" / commit
    return snap if commit and "/" not in commit and snap.is_dir() else None


def unlink_created(records: list[dict], inside: Path) -> list[str]:
    """Undo `link_file`: remove, newest first, what it created that is still exactly what it
    made (a link to the same place, a `refs/main` naming the same revision, an empty folder)
    and lies inside `inside`. Returns what it removed."""
    removed = []
    root = Path(os.path.abspath(inside))
    for record in reversed(records):
        path = Path(str(record.get("path", "")))
        if not record.get("path") or root not in Path(os.path.abspath(path)).parents:
            continue  # never outside the cache it was asked about
        try:
            if "link" in record:
                if not (path.is_symlink() and os.readlink(path) == record["link"]):
                    continue  # replaced since: not ours any more
                path.unlink()
            elif "refs" in record:
                if path.is_symlink() or path.read_text().strip() != record["refs"]:
                    continue  # Lemonade moved it to a revision of its own
                path.unlink()
            elif record.get("dir"):
                path.rmdir()  # only when empty: the user's files stay
            else:
                continue
        except OSError:
            continue
        removed.append(str(path))
    return removed
