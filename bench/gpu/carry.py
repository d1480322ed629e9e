"""Pack files for the GPU machine into carry folders that each fit one call beside the tree.

The device tool sends the working tree and at most 64 MiB with each call; a warm machine keeps
what earlier calls carried. So a set larger than one call (the test suite's wheels and the 98 MB
embedded model) goes over several calls: this splits the files into `.h200/pN/` folders of at most
what one call can carry, cutting a file too big for what is left of a folder into parts, and
writes `manifest.json` (each file's parts and sha256) into the last folder. On the machine,
`python3 bench/gpu/carry.py --join .h200 DEST` puts the files back together in DEST and checks
every sha256.

    python bench/gpu/carry.py --out .h200 FILE...     # prints the folders, one per call
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

LIMIT = 64 * 1024 * 1024
MARGIN = 1024 * 1024  # the tool's own bookkeeping, and files that change between packing and sending


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_bytes(root: Path) -> int:
    """What every call sends anyway: tracked and untracked-but-not-ignored files, and shared/."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    total = sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file())
    shared = root / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file())
    return total


def pack(files: list[Path], out: Path, room: int, first_room: int) -> list[Path]:
    names = [path.name for path in files]
    if len(set(names)) != len(names):
        raise ValueError("two files of one name: they would share their parts")
    out.mkdir(parents=True, exist_ok=True)
    folders: list[Path] = []
    manifest: dict[str, dict] = {}
    left = 0

    def new_folder() -> int:
        folder = out / f"p{len(folders) + 1}"
        folder.mkdir()
        folders.append(folder)
        return first_room if len(folders) == 1 else room

    # biggest first, so the small ones fill what the parts of the big ones leave
    for path in sorted(files, key=lambda p: -p.stat().st_size):
        size, offset, parts = path.stat().st_size, 0, []
        with open(path, "rb") as f:
            while offset < size:
                if left <= 0:
                    left = new_folder()
                take = min(left, size - offset)
                part = f"{path.name}.{len(parts)}"
                (folders[-1] / part).write_bytes(f.read(take))
                parts.append(f"{folders[-1].name}/{part}")
                offset += take
                left -= take
        manifest[path.name] = {"size": size, "sha256": sha256(path), "parts": parts}
    if not folders:
        new_folder()
    (folders[-1] / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return folders


def join(src: Path, dest: Path) -> int:
    found = list(src.glob("p*/manifest.json"))
    if len(found) != 1:
        what = "no manifest" if not found else f"{len(found)} manifests (one packing's folders only)"
        print(f"carry: {what} under {src}: were all its folders carried?", file=sys.stderr)
        return 2
    manifest = json.loads(found[0].read_text())
    dest.mkdir(parents=True, exist_ok=True)
    bad = []
    for name, entry in manifest.items():
        missing = [p for p in entry["parts"] if not (src / p).is_file()]
        if missing:
            bad.append(f"{name}: missing {', '.join(missing)} (carry those folders first)")
            continue
        with open(dest / name, "wb") as f:
            for part in entry["parts"]:
                f.write((src / part).read_bytes())
        if sha256(dest / name) != entry["sha256"]:
            bad.append(f"{name}: sha256 differs")
    for line in bad:
        print(f"carry: {line}", file=sys.stderr)
    print(f"carry: {len(manifest) - len(bad)} of {len(manifest)} files joined in {dest}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=Path(".h200"), help="the carry root (git-ignored)")
    ap.add_argument("--first-extra", type=int, default=0,
                    help="bytes the first call carries besides its folder (an sdist, say)")
    ap.add_argument("--join", nargs=2, type=Path, metavar=("SRC", "DEST"),
                    help="on the machine: join SRC's parts into DEST and check them")
    args = ap.parse_args(argv)
    if args.join:
        return join(*args.join)
    root = Path(__file__).resolve().parents[2]
    if args.out.exists() and any(args.out.iterdir()):
        print(f"carry: {args.out} is not empty; remove it first", file=sys.stderr)
        return 2
    room = LIMIT - MARGIN - tree_bytes(root)
    if room <= args.first_extra:
        print("carry: the tree alone fills a call", file=sys.stderr)
        return 2
    try:
        folders = pack(args.files, args.out, room, room - args.first_extra)
    except ValueError as e:
        print(f"carry: {e}", file=sys.stderr)
        return 2
    for folder in folders:
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{folder}  {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
