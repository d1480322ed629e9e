"""What `1bit lemonade register` changed in each Lemonade, kept (`state_dir()/lemonade.json`) so
that `unregister` undoes exactly that, and so that a variant's shim finds the llama-server build
Lemonade used for that variant before."""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

from lemonade_onebit.lemonade import SHIM_NAME


def state_file() -> Path:
    from lemonade_onebit.userdirs import state_dir

    return state_dir() / "lemonade.json"


LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}


def _url_key(url: str) -> str:
    """One key per Lemonade, however its address is spelled (localhost, 127.0.0.1, [::1])."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    host = (parts.hostname or "").lower()
    host = "loopback" if host in LOOPBACK or host.startswith("127.") else host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{host}:{port}"


def is_shim(value: str | None) -> bool:
    return bool(value) and Path(str(value)).name.startswith(SHIM_NAME)


def recorded_llama_server(variant: str) -> str | None:
    """The `llamacpp.<variant>_bin` a Lemonade named before register pointed it at the shim,
    where that was a path to an executable: the variant's own llama-server build."""
    for record in read_state().values():
        before = (record.get("bins", {}).get(f"{variant}_bin") or {}).get("before")
        if before and os.path.isabs(before) and os.path.isfile(before) and \
                os.access(before, os.X_OK) and not is_shim(before):
            return before
    return None


def read_state() -> dict:
    try:
        state = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(state: dict) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
