"""Which files of a repo a checkpoint `ORG/REPO:VARIANT` names: one file, a quant, or its shards.

The same rules pick from a hub listing (`1bit pull`) and from a downloaded snapshot (`1bit serve
-m NAME`), so what was pulled is what is served.
"""

from __future__ import annotations

import re

from lemonade_onebit.errors import RunError, UsageError

REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def split_checkpoint(checkpoint: str) -> tuple[str, str | None]:
    """`ORG/REPO[:VARIANT]` → (repo, variant); a malformed one is a usage error."""
    repo, _, variant = checkpoint.partition(":")
    if not REPO.match(repo) or ".." in repo:
        raise UsageError(f"{checkpoint!r}: expected a catalog name or ORG/REPO[:VARIANT]")
    if variant and (variant.startswith("/") or ".." in variant.split("/")):
        raise UsageError(f"{checkpoint!r}: the variant must be a file inside the repo")
    return repo, variant or None


def is_mmproj(path: str) -> bool:
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def _shard_set(path: str, files: list[str]) -> list[str]:
    """All shards of the set `path` belongs to, in order; just [path] when it is not a shard."""
    m = SHARD.search(path)
    if not m:
        return [path]
    stem = path[:m.start()]
    total = m.group(2)
    shards = sorted(f for f in files if f.startswith(stem) and (s := SHARD.search(f))
                    and s.group(2) == total and f[:s.start()] == stem)
    if len(shards) != int(total):
        raise RunError(f"{path}: the repo has {len(shards)} of its {int(total)} shards")
    return shards


def select_files(files: list[str], variant: str | None, where: str) -> list[str]:
    """The model files `variant` names among `files` (repo-relative paths), the first being the
    one an executor opens. `where` names the repo in errors."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and not is_mmproj(f))
    if variant is None:
        whole = {tuple(_shard_set(f, ggufs)) for f in ggufs}
        if len(whole) == 1:
            return list(whole.pop())
        if not ggufs and files:
            return []  # not a GGUF repo: the whole snapshot is the model (onnx, mlx)
        raise RunError(f"{where} holds several models: name one as {where}:VARIANT "
                       f"({_choices(ggufs)})")
    if variant in files:
        return _shard_set(variant, files) if variant.lower().endswith(".gguf") else [variant]
    token = re.compile(rf"(^|[-_./]){re.escape(variant)}([-_./]|$)", re.IGNORECASE)
    found = [f for f in ggufs if token.search(f)]
    sets = sorted({tuple(_shard_set(f, ggufs)) for f in found})
    if len(sets) == 1:
        return list(sets[0])
    if not sets:
        raise RunError(f"{where} has no variant {variant!r}: it has {_choices(ggufs)}")
    raise RunError(f"{where}: {variant!r} matches several files ({_choices([s[0] for s in sets])});"
                   f" name the file instead")


def _choices(ggufs: list[str]) -> str:
    firsts = [f for f in ggufs if (m := SHARD.search(f)) is None or m.group(1) == "00001"]
    return ", ".join(firsts) if firsts else "no .gguf file"
