"""`1bit pull`: download a catalog entry or `ORG/REPO[:VARIANT]` into the Hugging Face cache.

`huggingface_hub` lists the repo and resolves each file (URL, `HF_TOKEN`, `HF_ENDPOINT`, commit,
etag, size); `download.py` moves the bytes, resumably. This module picks the files, checks there
is room for them, and checks each finished file against the hub's own checksum (LFS sha256, or
the git blob id of small files), deleting it when they differ.

Whatever the hub sends becomes a path in the cache (a listed path, an ETag, a commit), and the hub
may be any `HF_ENDPOINT`, a mirror or a proxy in the way, so every such value is checked before it
is used: a plain path inside the repo, a hash, a 40-hex commit. Every path written is resolved and
must stay inside the repo's folder of the cache, also where a folder on the way is a symlink; and a
pull deletes only what it wrote itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from lemonade_onebit.catalog.entries import find_entry
from lemonade_onebit.catalog.hubcache import hub_cache
from lemonade_onebit.catalog.variants import select_files, split_checkpoint
from lemonade_onebit.errors import RunError

GGUF_MAGIC = b"GGUF"
COMMIT = re.compile(r"[0-9a-f]{40}")  # what huggingface_hub takes for a commit (REGEX_COMMIT_HASH)
GIT_BLOB_ID = COMMIT
SHA256 = re.compile(r"[0-9a-f]{64}")


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


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 400 else text[:397] + "..."


def refused(what: str, value: object) -> RunError:
    """A hub answer that is no safe name in the cache: the pull stops before using it."""
    return RunError(f"{endpoint()} sent {what}: {_shown(value)}; refused, nothing outside "
                    f"{hub_cache()} was touched. Check HF_ENDPOINT and any mirror or proxy on the "
                    f"way, then pull again")


def plain_repo_path(path: object) -> bool:
    """A repo file name that joined onto a folder stays inside it, on POSIX and on Windows (as
    huggingface_hub's `_validate_relative_filename` requires, and stricter: no `.` or empty
    segment, no backslash, no NUL)."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        return False
    return all(part not in ("", ".", "..") and not PureWindowsPath(part).drive
               for part in path.split("/"))


def _check_listing(repo: str, files: dict) -> None:
    for path, f in files.items():
        if not plain_repo_path(path):
            raise refused(f"a file of {repo} whose path is not a plain path inside the repo", path)
        if not isinstance(f.blob_id, str) or not GIT_BLOB_ID.fullmatch(f.blob_id):
            raise refused(f"for {path} a git blob id that is not 40 hex digits", f.blob_id)
        if f.lfs is not None and not (isinstance(f.lfs.sha256, str)
                                      and SHA256.fullmatch(f.lfs.sha256)):
            raise refused(f"for {path} an LFS sha256 that is not 64 hex digits", f.lfs.sha256)


def list_files(repo: str) -> dict:
    """path → RepoFile of the repo's main revision (sizes and checksums included), every path
    and checksum checked (`_check_listing`)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        files = {f.path: f for f in HfApi().list_repo_tree(repo, recursive=True)
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
    except (KeyError, TypeError, ValueError) as exc:  # a listing without a hub's fields
        raise RunError(f"{endpoint()} sent a listing of {repo} that is not a hub's ({exc!r}): "
                       f"check HF_ENDPOINT") from None
    _check_listing(repo, files)
    return files


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
    """Delete a blob this pull wrote and failed to verify."""
    blob.unlink(missing_ok=True)
    raise RunError(f"{why}; the file was deleted. Pull again; if it repeats, the hub or mirror "
                   f"serves a corrupt file")


def _check_answer(path: str, f, meta) -> None:
    """The file's ETag must be the checksum the listing gave (the cache names each blob by it, and
    `check_room` counts on it), and its commit a commit."""
    etag, kind = (f.lfs.sha256, "sha256") if f.lfs else (f.blob_id, "git blob id")
    if not (SHA256 if f.lfs else GIT_BLOB_ID).fullmatch(meta.etag):
        raise refused(f"for {path} an ETag that is not a {kind}", meta.etag)
    if meta.etag != etag:
        raise refused(f"for {path} an ETag other than the {kind} {etag} its listing gave",
                      meta.etag)
    if not COMMIT.fullmatch(meta.commit_hash):
        raise refused(f"for {path} a commit (X-Repo-Commit) that is not 40 hex digits",
                      meta.commit_hash)


def _inside(path: Path, root: str) -> bool:
    real = os.path.realpath(path)
    try:
        return os.path.commonpath([real, root]) == root
    except ValueError:  # another drive
        return False


def _check_inside(folder: Path, paths: list[Path], lock: Path) -> None:
    """Every path this pull writes resolves inside the repo's folder of the cache (the lock inside
    its folder of `.locks`), so a symlink planted on the way cannot lead a write elsewhere."""
    cache = os.path.realpath(hub_cache())
    for path, root in [*((p, os.path.join(cache, folder.name)) for p in paths),
                       (lock, os.path.join(cache, ".locks", folder.name))]:
        if not _inside(path, root):
            link = next((p for p in reversed([path, *path.parents])
                         if hub_cache() in p.parents and p.is_symlink()), path)
            raise RunError(f"{path} would resolve to {os.path.realpath(path)}, outside {root}: "
                           f"the symlink {link} leads out of the cache; refused, nothing outside "
                           f"{hub_cache()} was touched. Remove that symlink, then pull again")


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
    _check_answer(path, f, meta)
    folder = repo_folder(repo)
    blob = folder / "blobs" / meta.etag
    link = folder / "snapshots" / meta.commit_hash / path
    refs = folder / "refs" / "main"
    lock = hub_cache() / ".locks" / folder.name / f"{meta.etag}.lock"
    _check_inside(folder, [folder, blob.parent, blob.with_name(blob.name + ".incomplete"),
                           link.parent, refs], lock)
    for d in (blob.parent, link.parent, refs.parent):
        d.mkdir(parents=True, exist_ok=True)
    downloaded = not blob.is_file()
    if downloaded:
        auth = {k: v for k, v in build_hf_headers().items() if k.lower() == "authorization"}
        expected = f.lfs.sha256 if f.lfs else None
        with tqdm(total=meta.size, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=path.rsplit("/", 1)[-1][:40], disable=progress_off or None) as bar:
            try:
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
                if downloaded:
                    _discard(blob, f"{path} is not a GGUF file (no GGUF magic)")
                raise RunError(f"{path}: the blob {blob} already in the cache is not a GGUF file "
                               f"(no GGUF magic); this pull did not write it and left it as it "
                               f"is: delete it, then pull again")
    try:
        if link.is_symlink() and os.path.realpath(link) != os.path.realpath(blob):
            link.unlink()  # a link to another blob: only the link goes, never what it names
        if not link.is_file():
            link.unlink(missing_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
        refs.write_text(meta.commit_hash)
    except OSError as exc:
        raise RunError(f"cannot link {path} into {folder}: {exc}; check that folder") from None
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
