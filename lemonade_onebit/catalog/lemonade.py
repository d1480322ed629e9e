"""`1bit lemonade register|export`: put the catalog and the shim into a Lemonade.

Stock Lemonade runs llama.cpp models by exec'ing the file its config names for the variant
(`llamacpp.<variant>_bin`); `register` points that at `onebit-llama-server` (`POST
/internal/set`) and registers every catalog model as `user.<Name>` with the `llamacpp` recipe
(`POST /api/v1/pull`, which also downloads it; `--no-download` uses `/api/v1/models/register`).
`export` writes the same pull bodies as JSON files for `lemonade import`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

from lemonade_onebit.errors import RunError, UsageError

SHIM = "onebit-llama-server"


def pull_body(entry, variant: str) -> dict:
    """The `/api/v1/pull` body that registers `entry` for stock Lemonade's llamacpp recipe."""
    body: dict = {"model_name": f"user.{entry.name}", "recipe": "llamacpp"}
    if entry.mmproj:
        body["checkpoints"] = {"main": entry.checkpoint, "mmproj": f"{entry.repo}:{entry.mmproj}"}
    else:
        body["checkpoint"] = entry.checkpoint
    body.update({"labels": list(entry.labels), "size": entry.size,
                 "recipe_options": {"llamacpp_backend": variant}})
    return body


def selected(only: list[str] | None):
    from lemonade_onebit.catalog.schema import load_catalog

    entries = load_catalog()
    if only:
        known = {e.name for e in entries}
        missing = [n for n in only if n not in known]
        if missing:
            raise UsageError(f"not in the catalog: {', '.join(missing)} (`1bit list` shows it)")
        entries = [e for e in entries if e.name in only]
    return entries


def export_command(folder: str, variant: str, only: list[str] | None) -> int:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for entry in selected(only):
        path = out / f"{entry.name}.json"
        path.write_text(json.dumps(pull_body(entry, variant), indent=2) + "\n")
        print(path)
    return 0


def shim_path() -> str:
    """The absolute path of the installed shim (Lemonade wants an absolute executable file)."""
    here = Path(sys.executable).parent / SHIM
    found = str(here) if here.is_file() else shutil.which(SHIM)
    if not found:
        raise RunError(f"{SHIM} is not installed next to this Python nor on PATH: reinstall "
                       f"lemonade-onebit")
    return os.path.abspath(found)


class Lemonade:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        key = os.environ.get("LEMONADE_ADMIN_API_KEY") or os.environ.get("LEMONADE_API_KEY")
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 3600):
        req = urllib.request.Request(self.url + path, method=method, headers=self.headers,
                                     data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                message = json.loads(raw)["error"]
                message = message.get("message", message) if isinstance(message, dict) else message
            except (ValueError, KeyError, TypeError):
                message = raw[:200].decode(errors="replace")
            hint = " (set LEMONADE_ADMIN_API_KEY)" if exc.code in (401, 403) else ""
            raise RunError(f"{method} {path}: Lemonade answered {exc.code}: {message}{hint}")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RunError(f"cannot reach Lemonade at {self.url} ({reason}): is `lemond` "
                           f"running? (--url picks another)") from None
        return json.loads(raw) if raw.strip() else {}


def register_command(url: str, variant: str, only: list[str] | None, download: bool) -> int:
    entries = selected(only)
    shim = shim_path()
    lemonade = Lemonade(url)
    before = {m.get("id"): m for m in
              lemonade.call("GET", "/api/v1/models?show_all=true").get("data", [])}
    lemonade.call("POST", "/internal/set", {"llamacpp": {f"{variant}_bin": shim}})
    print(f"llamacpp.{variant}_bin = {shim}")
    for entry in entries:
        body = pull_body(entry, variant)
        name = body["model_name"]
        if download:
            lemonade.call("POST", "/api/v1/pull", {**body, "stream": False})
        else:
            lemonade.call("POST", "/api/v1/models/register", body)
        state = "updated" if name in before else "added"
        print(f"{name}: {state} ({entry.checkpoint}{', downloaded' if download else ''})")
    return 0
