"""Where this package keeps what it learns (caches) and what it did (state), per XDG."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or os.path.join(os.path.expanduser("~"), default))


def cache_dir() -> Path:
    """Facts that can be rebuilt (entry points, GGUF facts, file hashes)."""
    return _xdg("XDG_CACHE_HOME", ".cache") / "lemonade-onebit"


def state_dir() -> Path:
    """Records of changes made elsewhere (what `1bit lemonade register` did), kept to undo them."""
    return _xdg("XDG_STATE_HOME", os.path.join(".local", "state")) / "lemonade-onebit"
