"""`1bit registry census`: count `config.architectures[0]` over Hugging Face's text-generation
listing (`GET /api/models?pipeline_tag=text-generation&expand[]=config&limit=1000`, following
`Link: rel="next"`).

The walk is saved after every page (`FILE.partial`: the next page's URL and the counts so far), so
an interrupted walk resumes there. `HF_ENDPOINT` and `HF_TOKEN` are honoured through
huggingface_hub. What the hub sends is input: a next link must stay on the endpoint (the token is
never sent elsewhere), every model must be an object with a string id, and an architecture name
is counted only if it looks like a class name; it is only ever a key in the JSON written, never
part of a path.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lemonade_onebit.errors import RunError

QUERY = "pipeline_tag=text-generation&expand[]=config&limit=1000"
ARCH_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
MAX_PAGE = 10_000  # models on one page; the hub sends at most `limit`


@dataclass
class Walk:
    next_url: str | None
    pages: int = 0
    models: int = 0
    no_architecture: int = 0
    refused: int = 0  # entries that were no model object, or an architecture no class name
    counts: dict[str, int] | None = None

    def as_dict(self) -> dict:
        return {"next": self.next_url, "pages": self.pages, "models": self.models,
                "no_architecture": self.no_architecture, "refused": self.refused,
                "counts": self.counts or {}}


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def first_url(base: str) -> str:
    return f"{base}/api/models?{QUERY}"


def same_origin(url: str, base: str) -> bool:
    a, b = urlsplit(url), urlsplit(base)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc) and a.path.startswith("/api/models")


def count_page(walk: Walk, page: object, where: str) -> None:
    """Add one page of the listing to the walk; RunError when it is not a listing."""
    if not isinstance(page, list) or len(page) > MAX_PAGE:
        raise RunError(f"{where} sent no list of models: check HF_ENDPOINT")
    counts = walk.counts if walk.counts is not None else {}
    for model in page:
        if not isinstance(model, dict) or not isinstance(model.get("id"), str):
            walk.refused += 1
            continue
        walk.models += 1
        config = model.get("config")
        archs = config.get("architectures") if isinstance(config, dict) else None
        first = archs[0] if isinstance(archs, list) and archs else None
        if first is None:
            walk.no_architecture += 1
        elif isinstance(first, str) and ARCH_NAME.fullmatch(first):
            counts[first] = counts.get(first, 0) + 1
        else:
            walk.refused += 1
    walk.counts = counts


def load_state(path: Path, base: str) -> Walk:
    if not path.is_file():
        return Walk(first_url(base), counts={})
    try:
        state = json.loads(path.read_text())
        walk = Walk(state["next"], int(state["pages"]), int(state["models"]),
                    int(state["no_architecture"]), int(state["refused"]),
                    {str(k): int(v) for k, v in state["counts"].items()})
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RunError(f"{path} is not a census walk in progress: delete it to start "
                       f"again") from None
    if walk.next_url is not None and not same_origin(walk.next_url, base):
        raise RunError(f"{path} continues at {walk.next_url}, not on {base}: delete it, or set "
                       f"HF_ENDPOINT back")
    return walk


def _save(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def walk(out: Path, progress: Callable[[Walk], None] | None = None,
         max_pages: int | None = None) -> Walk:
    """Walk (or resume) the listing into `out`; `max_pages` stops early, resumable."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_backoff

    base = endpoint()
    state_path = out.with_name(out.name + ".partial")
    state = load_state(state_path, base)
    headers = build_hf_headers()  # HF_TOKEN, when set
    done_pages = 0
    while state.next_url is not None and (max_pages is None or done_pages < max_pages):
        try:
            resp = http_backoff("GET", state.next_url, headers=headers, timeout=60)
            hf_raise_for_status(resp)
            page = resp.json()
        except ValueError:
            raise RunError(f"{base} sent a page that is not JSON: check HF_ENDPOINT") from None
        except HfHubHTTPError as exc:
            raise RunError(f"{base} answered {exc.response.status_code} for page "
                           f"{state.pages + 1} (a private listing needs HF_TOKEN); the walk so "
                           f"far is kept in {state_path}: run again to continue") from None
        except (httpx2.TransportError, OSError) as exc:
            raise RunError(f"cannot reach {base} ({exc}): the walk so far is kept in "
                           f"{state_path}; run again to continue") from None
        count_page(state, page, base)
        nxt = resp.links.get("next", {}).get("url")
        if nxt is not None and not same_origin(nxt, base):
            raise RunError(f"{base} sent a next page on another server ({nxt[:200]!r}); "
                           f"refused, HF_TOKEN goes to the endpoint only")
        state.next_url = nxt
        state.pages += 1
        done_pages += 1
        _save(state_path, state.as_dict())
        if progress:
            progress(state)
    if state.next_url is None:
        counts = dict(sorted((state.counts or {}).items(), key=lambda kv: (-kv[1], kv[0])))
        _save(out, {"source": f"{base}/api/models?{QUERY}, walked by `1bit registry census`",
                    "date": datetime.date.today().isoformat(), "models": state.models,
                    "no_architecture": state.no_architecture, "refused": state.refused,
                    "counts": counts})
        state_path.unlink(missing_ok=True)
    return state


def census_command(out: str, quiet: bool, max_pages: int | None) -> int:
    from tqdm import tqdm

    path = Path(out)
    if path.is_dir():
        raise RunError(f"{out} is a folder: give the census file to write")
    bar = None if quiet else tqdm(unit=" models", desc="census", dynamic_ncols=True)

    def progress(state: Walk) -> None:
        if bar is not None:
            bar.n = state.models
            bar.set_postfix_str(f"{state.pages} pages, {len(state.counts or {})} architectures")
            bar.refresh()

    try:
        state = walk(path, progress, max_pages)
    finally:
        if bar is not None:
            bar.close()
    if state.next_url is not None:
        print(f"{path}.partial: {state.models:,} models in {state.pages} pages so far; run "
              f"again to continue")
        return 0
    print(f"{path}: {state.models:,} models, {sum((state.counts or {}).values()):,} with an "
          f"architecture, {len(state.counts or {})} architectures; `1bit registry --report "
          f"--census {path}`")
    return 0
