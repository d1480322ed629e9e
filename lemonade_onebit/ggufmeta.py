"""GGUF metadata that decides a route: architecture, expert count, the Hadamard Q4_0 stamp.

Read with the `gguf` package. Its `GGUFReader` parses every element of every array, which for a
tokenizer vocabulary takes seconds (2.2 s for SmolLM2, 8.7 s for a Qwen vocabulary here); the reader
below skips array contents instead, so a look at the metadata costs milliseconds. Results are kept
in a small cache keyed by path, size and modification time.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

STAMP_KEY = "onebit.hadamard_q4_0"


@dataclass(frozen=True)
class GgufFacts:
    architecture: str
    expert_count: int
    hadamard_q4_0: int | None

    @property
    def moe(self) -> bool:
        return self.expert_count > 0


def _cache_path() -> Path:
    from lemonade_onebit.userdirs import cache_dir

    return cache_dir() / "gguf-facts.json"


def read_facts(path: Path) -> GgufFacts:
    """The facts of one GGUF file; ValueError when it is not a readable GGUF."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = _cache_path()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return GgufFacts(**known[key])
    facts = _read(path)
    known[key] = asdict(facts)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        tmp.replace(cache)
    except OSError:
        pass
    return facts


def _read(path: Path) -> GgufFacts:
    reader = _metadata_reader()(str(path))
    fields = reader.fields

    def scalar(name: str):
        field = fields.get(name)
        if field is None or not field.data:
            return None
        return field.contents()

    arch = scalar("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path}: no general.architecture")
    experts = scalar(f"{arch}.expert_count") or 0
    stamp = scalar(STAMP_KEY)
    return GgufFacts(arch, int(experts), int(stamp) if stamp is not None else None)


def _metadata_reader():
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    string = GGUFValueType.STRING

    class MetadataReader(GGUFReader):
        """GGUFReader that records arrays by their length and skips their elements."""

        def _get_field_parts(self, orig_offs, raw_type):
            if GGUFValueType(raw_type) != GGUFValueType.ARRAY or self.byte_order == "S":
                return super()._get_field_parts(orig_offs, raw_type)
            itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            offs = orig_offs + 12
            kind = GGUFValueType(itype[0])
            if kind == string:
                length = struct.Struct("<Q").unpack_from
                raw = memoryview(self.data)
                for _ in range(int(alen[0])):
                    offs += 8 + length(raw, offs)[0]
            elif kind in self.gguf_scalar_to_np:
                offs += int(np.dtype(self.gguf_scalar_to_np[kind]).itemsize) * int(alen[0])
            else:  # nested arrays: rare and small, read them the ordinary way
                return super()._get_field_parts(orig_offs, raw_type)
            return offs - orig_offs, [itype, alen], [], [GGUFValueType.ARRAY, kind]

    return MetadataReader
