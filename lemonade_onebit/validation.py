"""Reading a JSON data file and saying what is wrong with it, one way for every file we validate
(recipes, catalog entries, the Laya policy)."""

from __future__ import annotations

import json
from pathlib import Path


def read_json(path: Path):
    """The file's JSON; ValueError with a reason a user can act on when it cannot be read."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def reasons(exc, root: str, first_only: bool = False) -> str:
    """A pydantic ValidationError as `key.path: message; ...`."""
    errors = exc.errors()[:1] if first_only else exc.errors()
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or root}: "
                     f"{e['msg'].removeprefix('Value error, ')}" for e in errors)
