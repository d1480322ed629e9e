"""`make release`: this package's sdist and wheel, byte-reproducible, with SHA256SUMS and
changes.json, in dist/release/<tag>/. Nothing is uploaded and no tag is made: it prints the
`git tag` command.

- The sources are `git archive HEAD` (what is committed, never the working tree's extras).
- SOURCE_DATE_EPOCH is the last commit's time, and the archives are normalised (sorted members,
  that time on every member, no owners, fixed modes, a bare gzip header), so two builds of one
  commit give identical bytes.
- The tag is `v<ISO year>.<ISO week>` of the commit's date, `.1`, `.2`, ... for a second and
  third release in that week.
- changes.json lists every pin (lemonade_onebit/pins.json) that moved since the previous
  release tag: from, to, and the release notes where the manifest knows the upstream.

    python scripts/release.py [--out DIR] [--date YYYY-MM-DD]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = "lemonade_onebit/pins.json"
SECTIONS = ("executors", "models", "python", "external")


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def release_tag(day: dt.date, tags: list[str]) -> str:
    year, week, _ = day.isocalendar()
    base = f"v{year}.{week}"
    taken = {t for t in tags if t == base or re.fullmatch(re.escape(base) + r"\.\d+", t)}
    if base not in taken:
        return base
    n = 1
    while f"{base}.{n}" in taken:
        n += 1
    return f"{base}.{n}"


def previous_release(tags: list[str]) -> str | None:
    def key(tag: str):
        return tuple(int(x) for x in tag[1:].split("."))

    ours = [t for t in tags if re.fullmatch(r"v\d{4}\.\d{1,2}(\.\d+)?", t)]
    return max(ours, key=key) if ours else None


def _pins(manifest: dict) -> dict[str, dict]:
    return {pin.get("package", pin["name"]): pin for s in SECTIONS for pin in manifest.get(s, [])}


def notes(pin: dict, version: str) -> str | None:
    upstream = pin.get("upstream") or ""
    if pin.get("check") == "pypi" or "package" in pin or "artefact" in pin:
        return f"https://pypi.org/project/{pin.get('package', pin['name'])}/{version}/"
    if upstream.startswith("https://github.com/"):
        return f"{upstream}/releases/tag/{version}"
    return None


def changes(before: dict | None, now: dict) -> list[dict]:
    old = _pins(before) if before else {}
    out = []
    for name, pin in _pins(now).items():
        was = old.get(name, {}).get("version")
        if was != pin["version"]:
            out.append({"name": name, "from": was, "to": pin["version"],
                        "notes": notes(pin, pin["version"])})
    out += [{"name": name, "from": pin["version"], "to": None, "notes": None}
            for name, pin in old.items() if name not in _pins(now)]
    return out


def normalise_sdist(path: Path, epoch: int) -> None:
    with tarfile.open(path, "r:gz") as src:
        members = sorted(src.getmembers(), key=lambda m: m.name)
        data = {m.name: src.extractfile(m).read() if m.isfile() else None for m in members}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in members:
            m.mtime, m.uid, m.gid, m.uname, m.gname = epoch, 0, 0, "", ""
            m.mode = 0o755 if m.isdir() or m.mode & 0o111 else 0o644
            m.pax_headers = {}
            content = data[m.name]
            dst.addfile(m, io.BytesIO(content) if content is not None else None)
    with open(path, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out,
                                                mtime=epoch, compresslevel=9) as gz:
        gz.write(raw.getvalue())


def normalise_wheel(path: Path, epoch: int) -> None:
    stamp = max(dt.datetime.fromtimestamp(epoch, dt.timezone.utc),
                dt.datetime(1980, 1, 1, tzinfo=dt.timezone.utc)).timetuple()[:6]
    with zipfile.ZipFile(path) as src:
        names = sorted(src.namelist(), key=lambda n: (n.endswith(".dist-info/RECORD"), n))
        data = {n: src.read(n) for n in names}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in names:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data[name])


def build(out: Path, epoch: int, rev: str = "HEAD") -> list[Path]:
    """The sdist and wheel of `rev`, normalised, in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(src, filter="data")
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONHASHSEED": "0"}
        names = Path(tmp) / "names"
        # setuptools rewrites sys.argv while it builds: read the arguments first.
        code = ("import sys; from pathlib import Path; from setuptools import build_meta as b; "
                "dist, names = sys.argv[1:3]; "
                "Path(names).write_text(b.build_sdist(dist) + ' ' + b.build_wheel(dist))")
        subprocess.run([sys.executable, "-c", code, str(Path(tmp) / "dist"), str(names)],
                       cwd=src, env=env, check=True, capture_output=True)
        files = []
        for name in names.read_text().split():
            built = Path(tmp) / "dist" / name
            target = out / name
            target.write_bytes(built.read_bytes())
            (normalise_sdist if name.endswith(".tar.gz") else normalise_wheel)(target, epoch)
            files.append(target)
        return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "release")
    parser.add_argument("--date", type=dt.date.fromisoformat,
                        help="the release date (else the last commit's)")
    args = parser.parse_args(argv)
    epoch = int(git("log", "-1", "--format=%ct"))
    day = args.date or dt.datetime.fromtimestamp(epoch, dt.timezone.utc).date()
    tags = git("tag", "--list").splitlines()
    tag = release_tag(day, tags)
    out = args.out / tag
    files = build(out, epoch)
    before_tag = previous_release(tags)
    before = json.loads(git("show", f"{before_tag}:{MANIFEST}")) if before_tag else None
    now = json.loads((ROOT / MANIFEST).read_text())
    (out / "changes.json").write_text(json.dumps(
        {"tag": tag, "since": before_tag, "commit": git("rev-parse", "HEAD"),
         "pins": changes(before, now)}, indent=1) + "\n")
    sums = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}"
            for f in sorted([*files, out / "changes.json"])]
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    print("\n".join(sums))
    print(f"release {tag} in {out}; tag it with: git tag {tag} && git push origin {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
