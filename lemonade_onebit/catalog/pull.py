"""`1bit pull`: download a catalog entry or `ORG/REPO[:VARIANT]` into the Hugging Face cache.

`huggingface_hub` lists the repo and resolves each file (URL, `HF_TOKEN`, `HF_ENDPOINT`, commit,
etag, size); `download.py` moves the bytes, resumably. This module picks the files, checks there
is room for them, and checks each finished file against the hub's own checksum (LFS sha256, or
the git blob id of small files), deleting it when they differ.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.catalog.entries import find_entry
from lemonade_onebit.catalog.hubcache import hub_cache
from lemonade_onebit.catalog.variants import select_files, split_checkpoint
from lemonade_onebit.errors import RunError

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class Checkpoint:
    repo: str
    variant: str | None
    extra: tuple[str, ...] = ()  # files named besides the variant (an entry's mmproj)


def checkpoint_for(spec: str) -> Checkpoint:
    body = find_entry(spec)
    if body is not None:
        from lemonade_onebit.catalog.schema import validate

        entry = validate(spec, body)
        return Checkpoint(entry.repo, entry.variant, (entry.mmproj,) if entry.mmproj else ())
    repo, variant = split_checkpoint(spec)
    return Checkpoint(repo, variant)


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _network_errors() -> tuple[type[BaseException], ...]:
    import httpx2
    from huggingface_hub.errors import LocalEntryNotFoundError

    return (httpx2.TransportError, LocalEntryNotFoundError, ConnectionError)


def list_files(repo: str) -> dict:
    """path → RepoFile of the repo's main revision (sizes and checksums included)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        return {f.path: f for f in HfApi().list_repo_tree(repo, recursive=True)
                if isinstance(f, RepoFile)}
    except GatedRepoError:
        raise RunError(f"{repo} is gated on {endpoint()}: accept its terms there, then set "
                       f"HF_TOKEN to a token of that account") from None
    except RepositoryNotFoundError:
        raise RunError(f"no repo {repo} on {endpoint()}: check the name (a private repo needs "
                       f"HF_TOKEN)") from None
    except _network_errors() as exc:
        raise RunError(f"cannot reach {endpoint()} ({exc}): check the network, or point "
                       f"HF_ENDPOINT at a mirror") from None


def pick(target: Checkpoint, files: dict) -> list[str]:
    chosen = select_files(list(files), target.variant, target.repo) or sorted(files)
    for extra in target.extra:
        if extra not in files:
            raise RunError(f"{target.repo} has no file {extra}")
        chosen.append(extra)
    return chosen


def check_room(repo: str, chosen: list[str], files: dict) -> None:
    """Refuse before downloading when the cache's disk cannot hold what is still missing."""
    from lemonade_onebit.catalog.hubcache import repo_folder

    have = {p.name: p.stat().st_size for p in (repo_folder(repo) / "blobs").glob("*")
            if p.is_file()} if (repo_folder(repo) / "blobs").is_dir() else {}
    need = 0
    for path in chosen:
        f = files[path]
        etag = f.lfs.sha256 if f.lfs else f.blob_id
        if have.get(etag) != f.size:
            need += f.size - have.get(f"{etag}.incomplete", 0)
    cache = hub_cache()
    probe = cache
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        raise RunError(f"not enough disk space in {cache}: {need / 1e9:.2f} GB to download, "
                       f"{free / 1e9:.2f} GB free; free some space or set HF_HUB_CACHE")


def git_blob_id(path: Path) -> str:
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _discard(blob: Path, why: str) -> None:
    blob.unlink(missing_ok=True)
    raise RunError(f"{why}; the file was deleted. Pull again; if it repeats, the hub or mirror "
                   f"serves a corrupt file")


def fetch_file(repo: str, path: str, f, progress_off: bool, stats: dict) -> Path:
    """One file of `repo` into the cache (blob, snapshot link, refs/main); its path there."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.utils import build_hf_headers, tqdm

    from lemonade_onebit.catalog.download import fetch
    from lemonade_onebit.catalog.hubcache import repo_folder

    try:
        meta = get_hf_file_metadata(hf_hub_url(repo, path))
    except EntryNotFoundError:
        raise RunError(f"{repo} listed {path} but does not serve it; try again later") from None
    except _network_errors() as exc:
        raise RunError(f"cannot reach {endpoint()} ({exc}): check the network, or point "
                       f"HF_ENDPOINT at a mirror") from None
    if not meta.etag or not meta.commit_hash or meta.size is None:
        raise RunError(f"{endpoint()} sent no etag, commit or size for {path}: not a hub")
    folder = repo_folder(repo)
    blob = folder / "blobs" / meta.etag
    link = folder / "snapshots" / meta.commit_hash / path
    for d in (blob.parent, link.parent, folder / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    if not blob.is_file():
        auth = {k: v for k, v in build_hf_headers().items() if k.lower() == "authorization"}
        expected = f.lfs.sha256 if f.lfs else None
        with tqdm(total=meta.size, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=path.rsplit("/", 1)[-1][:40], disable=progress_off or None) as bar:
            try:
                lock = hub_cache() / ".locks" / folder.name / f"{meta.etag}.lock"
                started = time.perf_counter()
                got = fetch(meta.location, blob, lock, meta.size, expected, auth, bar)
                stats["bytes"] += meta.size
                stats["seconds"] += time.perf_counter() - started
            except OSError as exc:  # the cache cannot be written: permissions, a missing mount
                raise RunError(f"download of {path} into {hub_cache()}: {exc}") from None
        if expected and got != expected:
            _discard(blob, f"{path}: sha256 {got} does not match the hub's {expected}")
        if not f.lfs and git_blob_id(blob) != f.blob_id:
            _discard(blob, f"{path}: git blob id does not match the hub's {f.blob_id}")
    if path.lower().endswith(".gguf"):
        with open(blob, "rb") as handle:
            if handle.read(4) != GGUF_MAGIC:
                _discard(blob, f"{path} is not a GGUF file (no GGUF magic)")
    if not link.is_file():
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs" / "main").write_text(meta.commit_hash)
    return link


def pull(spec: str, quiet: bool = False, stats: dict | None = None) -> list[Path]:
    """Download what `spec` names; the executor's file first. Already complete files are not
    downloaded again; an interrupted one continues where it stopped. `stats` gets the bytes
    fetched and the seconds the transfers took."""
    stats = stats if stats is not None else {}
    stats.setdefault("bytes", 0)
    stats.setdefault("seconds", 0.0)
    target = checkpoint_for(spec)
    files = list_files(target.repo)
    chosen = pick(target, files)
    check_room(target.repo, chosen, files)
    return [fetch_file(target.repo, path, files[path], quiet, stats) for path in chosen]
