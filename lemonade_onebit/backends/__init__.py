"""The launcher registry: every route is a `lemonade_onebit.launchers` entry point.

Serve, `--device auto` and `1bit devices` read this registry; nothing else knows which routes exist.
"""

from __future__ import annotations

from functools import lru_cache

from lemonade_onebit.backends.base import Launcher, LauncherInfo
from lemonade_onebit.plugins import group

GROUP = "lemonade_onebit.launchers"

__all__ = ["GROUP", "Launcher", "LauncherInfo", "launchers", "launcher_for"]


@lru_cache(maxsize=1)
def launchers() -> tuple[type[Launcher], ...]:
    found = []
    for ep in group(GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Launcher)):
            raise TypeError(f"entry point {ep.name} in {GROUP} is not a Launcher class: {ep.value}")
        found.append(cls)
    return tuple(sorted(found, key=lambda c: -c.info.auto_rank))


def launcher_for(device: str) -> type[Launcher] | None:
    for cls in launchers():
        if cls.info.device == device:
            return cls
    return None
