"""`1bit lemonade register|unregister|status|export`: put the catalog and the shim into a running
Lemonade, show what is there, and take it all out again.

Stock Lemonade runs llama.cpp models by exec'ing the file its config names for the variant
(`llamacpp.<variant>_bin`). `register` points that at this package's shim for the variant
(`POST /internal/set`), makes every catalog file this machine already has present in Lemonade's
Hugging Face cache (links, no copy), and registers each catalog model as `user.<Name>` with the
`llamacpp` recipe (`POST /api/v1/pull`; with `do_not_upgrade` when the file is there, so it works
offline). Lemonade lists such models under the bare name `<Name>`. What `register` changed is
recorded (`state_dir()/lemonade.json`), so `unregister` can undo exactly that.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from lemonade_onebit import httpclient
from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.lemonade import SHIM_NAME
from lemonade_onebit.lemonade.shim import script_name
from lemonade_onebit.lemonade.state import _url_key, is_shim, read_state, state_file, write_state

# -- Lemonade's HTTP API -----------------------------------------------------------------------

class LemonadeClient:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        key = os.environ.get("LEMONADE_ADMIN_API_KEY") or os.environ.get("LEMONADE_API_KEY")
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 3600):
        try:
            return httpclient.request(method, self.url + path, body, self.headers,
                                      timeout=timeout).json()
        except httpclient.HTTPError as exc:
            hint = " (set LEMONADE_ADMIN_API_KEY)" if exc.status in (401, 403) else ""
            raise LemonadeError(exc.status, f"{method} {path}: Lemonade answered {exc.status}: "
                                            f"{exc.message()}{hint}") from None
        except httpclient.Unreachable as exc:
            raise RunError(f"cannot reach Lemonade at {self.url} ({exc}): is `lemond` "
                           f"running? (--url picks another)") from None
        except RunError as exc:
            raise RunError(f"{method} {path}: Lemonade's {exc}") from None

    def model_ids(self) -> set[str]:
        return set(self.models())

    def models(self) -> dict[str, dict]:
        listing = self.call("GET", "/api/v1/models?show_all=true")
        data = listing.get("data") if isinstance(listing, dict) else None
        return {m["id"]: m for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)}

    def bins(self) -> dict[str, str] | None:
        """`llamacpp.*_bin` as Lemonade has them, or None when it does not say."""
        try:
            config = self.call("GET", "/internal/config")
        except LemonadeError:
            return None
        llamacpp = config.get("llamacpp") if isinstance(config, dict) else None
        if not isinstance(llamacpp, dict):
            return None
        return {k: v for k, v in llamacpp.items() if k.endswith("_bin") and isinstance(v, str)}

    def set_bin(self, variant: str, value: str) -> None:
        self.call("POST", "/internal/set", {"llamacpp": {f"{variant}_bin": value}})


class LemonadeError(RunError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def known_as(name: str, ids: set[str]) -> bool:
    """Lemonade takes `user.<Name>` but lists it as `<Name>`: either spelling counts."""
    return name in ids or f"user.{name}" in ids


# -- the catalog as Lemonade sees it ----------------------------------------------------------

def pull_body(entry, variant: str, present: bool = False) -> dict:
    """The `/api/v1/pull` body that registers `entry` for stock Lemonade's llamacpp recipe;
    `present`: its files are in Lemonade's cache, so Lemonade must not reach for the hub."""
    body: dict = {"model_name": f"user.{entry.name}", "recipe": "llamacpp"}
    if entry.mmproj:
        body["checkpoints"] = {"main": entry.checkpoint, "mmproj": f"{entry.repo}:{entry.mmproj}"}
    else:
        body["checkpoint"] = entry.checkpoint
    body.update({"labels": list(entry.labels), "size": entry.size,
                 "recipe_options": {"llamacpp_backend": variant}})
    if present:
        body["do_not_upgrade"] = True
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


def lemonade_cache(option: str | None) -> tuple[Path, str]:
    """Lemonade's HF cache and where that answer came from."""
    from lemonade_onebit.catalog.hubcache import hub_cache

    if option:
        return Path(option).expanduser().absolute(), "--hf-cache"
    origin = ("$HF_HUB_CACHE" if os.environ.get("HF_HUB_CACHE") else
              "$HF_HOME" if os.environ.get("HF_HOME") else "the default location")
    return hub_cache().absolute(), origin


def entry_files(entry) -> list[tuple[str, Path]]:
    """(path inside the repo, file on this machine) for each file of `entry` this machine has
    (embedded, or pulled into our HF cache); empty when any is missing."""
    from lemonade_onebit.catalog.entries import local_files
    from lemonade_onebit.catalog.hubcache import cached_location, snapshot

    files = local_files(entry.name) or []
    if not files or any(not f.is_file() for f in files):
        return []
    out = []
    for f in files:
        where = cached_location(f)
        out.append((where[1] if where else entry.variant, f))
    if entry.mmproj:
        snap = snapshot(entry.repo)
        if snap is None or not (snap / entry.mmproj).is_file():
            return []
        out.append((entry.mmproj, snap / entry.mmproj))
    return out


def _sha256_of(entry, relpath: str, file: Path) -> str:
    from lemonade_onebit.catalog.hubcache import file_sha256

    real = file.resolve()
    name = real.name
    if real.parent.name == "blobs" and len(name) == 64 and all(c in "0123456789abcdef" for c in name):
        return name
    if relpath == entry.variant and entry.sha256 and entry.bytes == real.stat().st_size:
        return entry.sha256
    return file_sha256(real)


def in_cache(cache: Path, entry) -> Path | None:
    """The entry's model file in the HF cache at `cache`, when all its files are there."""
    from lemonade_onebit.catalog.hubcache import local_files, snapshot

    files = local_files(entry.repo, entry.variant or None, cache)
    if not files or not files[0].is_file():
        return None
    if entry.mmproj and not (snapshot(entry.repo, cache) / entry.mmproj).is_file():
        return None
    return files[0]


# -- commands ---------------------------------------------------------------------------------

def shim_path(variant: str) -> str:
    """The absolute path of the variant's shim (Lemonade wants an absolute executable file)."""
    name = script_name(variant)
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if not found:
        raise RunError(f"{name} is not installed next to this Python nor on PATH: reinstall "
                       f"lemonade-onebit")
    return os.path.abspath(found)


def export_command(folder: str, variant: str, only: list[str] | None) -> int:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for entry in selected(only):
        path = out / f"{entry.name}.json"
        path.write_text(json.dumps(pull_body(entry, variant), indent=2) + "\n")
        print(path)
    return 0


def register_command(url: str, variant: str, only: list[str] | None, download: bool,
                     hf_cache: str | None) -> int:
    from lemonade_onebit.catalog.hubcache import link_file, repo_folder

    entries = selected(only)
    shim = shim_path(variant)
    cache, origin = lemonade_cache(hf_cache)
    client = LemonadeClient(url)
    ids = client.model_ids()
    bins = client.bins()
    state = read_state()
    mine = state.setdefault(_url_key(url), {"bins": {}, "models": {}})
    key = f"{variant}_bin"
    if key not in mine["bins"]:  # the value before the first register is the one to restore
        before = None if bins is None else bins.get(key)
        known = bins is not None and not is_shim(before)  # a shim there: an earlier install's
        mine["bins"][key] = {"before": before if known else None, "known": known}
    client.set_bin(variant, shim)
    write_state(state)
    print(f"llamacpp.{key} = {shim}")
    print(f"Lemonade's HF cache: {cache} ({origin}; --hf-cache picks another)")

    failed = []
    for entry in entries:
        record = mine["models"].setdefault(entry.name, {
            "added": not known_as(entry.name, ids),
            # Lemonade's delete removes the repo's folder: only safe if register made it.
            "repo_folder_existed": repo_folder(entry.repo, cache).exists(),
            "cache": str(cache), "links": []})
        if record.get("cache") != str(cache):
            raise UsageError(f"{entry.name} was registered with Lemonade's cache at "
                             f"{record.get('cache')}; run `1bit lemonade unregister --only "
                             f"{entry.name}` first to move it to {cache}")
        write_state(state)  # recorded before Lemonade is asked: a failed pull still registers
        linked = False
        for relpath, file in entry_files(entry):
            try:
                linked |= link_file(cache, entry.repo, relpath, file,
                                    _sha256_of(entry, relpath, file), record["links"])
            except OSError as exc:
                raise RunError(f"cannot link {file} into {cache}: {exc.strerror}") from None
            finally:
                write_state(state)
        present = in_cache(cache, entry) is not None
        body = pull_body(entry, variant, present)
        name = body["model_name"]
        state_word = "updated" if known_as(entry.name, ids) else "added"
        try:
            if download or present:
                client.call("POST", "/api/v1/pull", {**body, "stream": False})
            else:
                client.call("POST", "/api/v1/models/register", body)
        except LemonadeError as exc:
            failed.append(entry.name)
            print(f"{entry.name}: {exc}", file=sys.stderr)
            now = client.model_ids()
            held = ("lists it (registered, not downloaded)" if known_as(entry.name, now)
                    else "does not list it")
            hint = (f"Lemonade does not see the file in {cache}: if lemond's HF_HOME or "
                    f"HF_HUB_CACHE points elsewhere, pass that folder as --hf-cache"
                    if present else
                    f"`1bit pull {entry.name}` and run this register again (it links the file, "
                    f"no network needed), or pull it in Lemonade where the hub is reachable")
            print(f"  Lemonade now {held}. Next: {hint}; `1bit lemonade unregister --only "
                  f"{entry.name}` removes what register did.", file=sys.stderr)
            continue
        how = ("in Lemonade's cache" + (", linked to this machine's file" if linked else "")
               if present else "downloaded by Lemonade" if download else "not downloaded")
        print(f"{entry.name}: {state_word} as {name} ({entry.checkpoint}; {how})")
    if failed:
        raise RunError(f"{len(failed)} of {len(entries)} model(s) not ready in Lemonade: "
                       f"{', '.join(failed)}")
    return 0


def unregister_command(url: str, only: list[str] | None) -> int:
    from lemonade_onebit.catalog.hubcache import unlink_created

    state = read_state()
    mine = state.get(_url_key(url))
    if not mine:
        others = ", ".join(sorted(state)) or "none"
        print(f"1bit lemonade: nothing registered by 1bit at {url} (recorded in "
              f"{state_file()}: {others})", file=sys.stderr)
        return 0
    if only:
        unknown = [n for n in only if n not in mine["models"]]
        if unknown:
            raise UsageError(f"not registered by 1bit at {url}: {', '.join(unknown)}")
    client = LemonadeClient(url)
    ids = client.model_ids()
    for name in list(only or mine["models"]):
        record = mine["models"][name]
        # The links go first, so that Lemonade's delete finds none of our files.
        removed = unlink_created(record.get("links", []), Path(record.get("cache", "")))
        links = f"{len(removed)} cache link(s) removed" if removed else "no cache link"
        if not known_as(name, ids):
            print(f"{name}: no longer in Lemonade; {links}")
        elif not record.get("added"):
            print(f"{name}: left in Lemonade (it was there before register); {links}")
        elif record.get("repo_folder_existed"):
            print(f"{name}: left registered in Lemonade: its repo folder in Lemonade's cache "
                  f"was there before register, and Lemonade's delete would remove those files "
                  f"too (`lemonade delete {name}` if you want that); {links}")
        else:
            try:
                client.call("POST", "/api/v1/delete", {"model_name": f"user.{name}"})
            except LemonadeError as exc:
                if exc.status != 404:
                    raise
            print(f"{name}: removed from Lemonade; {links}")
        del mine["models"][name]
        write_state(state)
    if not mine["models"]:
        current = client.bins()
        for key, was in mine["bins"].items():
            now = (current or {}).get(key)
            if current is not None and not is_shim(now):
                print(f"llamacpp.{key} = {now or '(unset)'}: changed since register, left as is")
            elif was.get("known") and was.get("before"):
                client.call("POST", "/internal/set", {"llamacpp": {key: was["before"]}})
                print(f"llamacpp.{key} = {was['before']} (as before register)")
            else:
                print(f"llamacpp.{key}: its value before register is unknown (Lemonade did not "
                      f"say); it still names the shim, which hands models that are not 1bit's "
                      f"to the real llama-server. Set it with POST /internal/set.",
                      file=sys.stderr)
        del state[_url_key(url)]
        write_state(state)
    return 0


def status_command(url: str, hf_cache: str | None, as_json: bool) -> int:
    from lemonade_onebit.catalog.entries import owner_of

    client = LemonadeClient(url)
    models = client.models()
    bins = client.bins()
    recorded = read_state().get(_url_key(url), {})
    caches = {m.get("cache") for m in recorded.get("models", {}).values() if m.get("cache")}
    if hf_cache is None and len(caches) == 1:
        cache, origin = Path(caches.pop()), "as recorded by register"
    else:
        cache, origin = lemonade_cache(hf_cache)
    rows = []
    for entry in selected(None):
        listed = models.get(entry.name) or models.get(f"user.{entry.name}")
        variant = ((listed or {}).get("recipe_options") or {}).get("llamacpp_backend")
        file = in_cache(cache, entry)
        bin_value = (bins or {}).get(f"{variant}_bin") if variant else None
        why = None
        if listed is None:
            why = "not registered"
        elif file is None:
            why = f"its file is not in {cache}"
        elif bins is None:
            why = "unknown: Lemonade does not say which llama-server it runs"
        elif not bin_value or not Path(bin_value).name.startswith(SHIM_NAME):
            why = f"llamacpp.{variant}_bin is {bin_value or 'unset'}, not the shim"
        elif owner_of(file) != entry.name:
            why = f"{file} is not recognised as {entry.name}"
        rows.append({"name": entry.name, "registered": listed is not None,
                     "downloaded": bool(listed and listed.get("downloaded")),
                     "variant": variant, "file": str(file) if file else None,
                     "through_1bit": why is None, "why_not": why,
                     "added_by_register": entry.name in recorded.get("models", {})})
    report = {"url": url, "hf_cache": str(cache), "hf_cache_from": origin,
              "bins": bins, "models": rows}
    if as_json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"Lemonade at {url}; its HF cache: {cache} ({origin})")
    if bins is None:
        print("llamacpp.*_bin: Lemonade does not say (GET /internal/config)")
    for key, value in sorted((bins or {}).items()):
        ours = " (1bit shim)" if Path(value).name.startswith(SHIM_NAME) else ""
        print(f"llamacpp.{key} = {value or '(unset)'}{ours}")
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        state = ("through 1bit" if r["through_1bit"] else f"not through 1bit: {r['why_not']}")
        shown = "downloaded" if r["downloaded"] else "-"
        print(f"  {r['name']:<{width}}  {r['variant'] or '-':<6}  {shown:<10}  {state}")
    return 0
