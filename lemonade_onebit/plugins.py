"""Entry points of our groups, cached on disk.

Reading them means importing `importlib.metadata` and scanning every installed distribution,
which costs about 20 ms of serve's start. The cache is keyed on the folders of `sys.path` and their
modification times: installing, upgrading or removing a package changes its folder's time, and the
next read scans again. The first entry (the script's folder, or the current directory under
`python -m`) changes all the time; it counts only when it holds a distribution.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

GROUPS = ("lemonade_onebit.launchers", "lemonade_onebit.recipes", "lemonade_onebit.catalog",
          "lemonade.plugins")


@dataclass(frozen=True)
class EntryPoint:
    name: str
    value: str  # "module:attr.attr"
    group: str

    def load(self):
        module, _, attrs = self.value.partition(":")
        obj = importlib.import_module(module.strip())
        for attr in filter(None, attrs.strip().split(".")):
            obj = getattr(obj, attr)
        return obj


def cache_file() -> Path:
    from lemonade_onebit.userdirs import cache_dir

    return cache_dir() / "entry-points.json"


def _key() -> list:
    key: list = [sys.version, sys.prefix]
    for i, entry in enumerate(sys.path):
        if i == 0 and not _holds_distributions(entry):
            continue
        try:
            key.append([entry, os.stat(entry).st_mtime_ns])
        except OSError:
            key.append([entry, None])
    return key


def _holds_distributions(folder: str) -> bool:
    try:
        return any(n.endswith((".dist-info", ".egg-info")) for n in os.listdir(folder or "."))
    except OSError:
        return False


def _scan() -> dict[str, list[list[str]]]:
    from importlib.metadata import entry_points

    found = entry_points()
    return {g: [[ep.name, ep.value] for ep in found.select(group=g)] for g in GROUPS}


@lru_cache(maxsize=1)
def _all() -> dict[str, list[list[str]]]:
    key, path = _key(), cache_file()
    try:
        cached = json.loads(path.read_text())
        if cached["key"] == key:
            return cached["groups"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    groups = _scan()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "groups": groups}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: scan each time
    return groups


def group(name: str) -> list[EntryPoint]:
    """The group's entry points: this package's own first (its built-ins come through the same
    door as every plugin's), then the others by name."""
    if name not in GROUPS:
        raise ValueError(f"not one of our entry point groups: {name}")
    found = [EntryPoint(n, v, name) for n, v in _all().get(name, [])]
    return sorted(found, key=lambda ep: (not ep.value.startswith(__package__ + "."), ep.name))
