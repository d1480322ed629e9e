"""Entry points, read once: scanning every installed distribution costs tens of milliseconds, and
serve needs two groups of them before it can start its executor."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import EntryPoints, entry_points


@lru_cache(maxsize=1)
def _all() -> EntryPoints:
    return entry_points()


def group(name: str) -> EntryPoints:
    return _all().select(group=name)
