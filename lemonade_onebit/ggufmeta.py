"""GGUF metadata that decides a route (architecture, expert count, the Hadamard Q4_0 stamp) and
sizes its slots (layers, attention heads and their sizes, the trained context).

The header is walked here, with the format's constants from the `gguf` package, rather than with
its `GGUFReader`: that reader parses every element of every array, which for a tokenizer vocabulary
takes seconds (2.2 s for SmolLM2, 8.7 s for a Qwen vocabulary here), and it trusts every count in
the file, so a crafted header (an array claiming 2^40 values, arrays nested 5,000 deep) ends in a
RecursionError, a struct.error or a misread. This walk reads only the key/value section, skips array
contents, and checks every count and length against the bytes the file has left, so a look at the
metadata costs milliseconds and a crafted header is a ValueError at once. Results are kept in a
small cache keyed by path, size and modification time.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

STAMP_KEY = "onebit.hadamard_q4_0"
VERSIONS = (2, 3)  # those GGUFReader reads; version 1 had 32-bit counts
MAX_DEPTH = 8  # arrays inside arrays: llama.cpp loads no file that has one
MAX_WALKED = {"strings": 1 << 22, "arrays": 1 << 16}  # walked one by one, in all; a large
# vocabulary and its merges hold under 10^6 strings
MAX_KEY = 1 << 16  # the GGUF spec's limit on a key's length
CACHE_VERSION = 2  # the facts' fields: entries of another version are read again
# The shape keys (`{arch}.` + key), by GgufFacts field. A value that is not a positive whole number
# (an array of per-layer counts, say) is None: the facts then say nothing about it.
SHAPE_KEYS = {"block_count": "block_count", "embedding_length": "embedding_length",
              "head_count": "attention.head_count", "head_count_kv": "attention.head_count_kv",
              "key_length": "attention.key_length", "value_length": "attention.value_length",
              "context_length": "context_length"}


@dataclass(frozen=True)
class GgufFacts:
    architecture: str
    expert_count: int
    hadamard_q4_0: int | None
    block_count: int | None = None
    embedding_length: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    key_length: int | None = None
    value_length: int | None = None
    context_length: int | None = None

    @property
    def moe(self) -> bool:
        return self.expert_count > 0


def _cache_path() -> Path:
    from lemonade_onebit.userdirs import cache_dir

    return cache_dir() / "gguf-facts.json"


def read_facts(path: Path) -> GgufFacts:
    """The facts of one GGUF file; ValueError when it is not a readable GGUF."""
    stat = path.stat()
    key = f"{CACHE_VERSION}:{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = _cache_path()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return GgufFacts(**known[key])
    facts = _read(path)
    if not isinstance(known, dict):
        known = {}
    known = {k: v for k, v in known.items() if k.startswith(f"{CACHE_VERSION}:")}
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
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise ValueError(f"{path}: empty file, not a GGUF")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            wanted = _Header(data, path).metadata()
    arch = wanted.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path}: no general.architecture")
    experts = wanted.get(f"{arch}.expert_count") or 0
    stamp = wanted.get(STAMP_KEY)
    if not isinstance(experts, int) or not (stamp is None or isinstance(stamp, int)):
        raise ValueError(f"{path}: {arch}.expert_count or {STAMP_KEY} is not an integer")
    shape = {field: _count(wanted.get(f"{arch}.{key}")) for field, key in SHAPE_KEYS.items()}
    return GgufFacts(arch, int(experts), int(stamp) if stamp is not None else None, **shape)


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class _Header:
    """A cursor over a GGUF header that refuses any count or length the file cannot hold."""

    def __init__(self, data, path: Path) -> None:
        from gguf.constants import GGUF_MAGIC, GGUFValueType

        self.data, self.path, self.at = data, path, 0
        self.walked = dict.fromkeys(MAX_WALKED, 0)
        self.T = GGUFValueType
        if self._u("<I") != GGUF_MAGIC:
            raise ValueError(f"{path}: no GGUF magic, not a GGUF file")
        version = self._u("<I")
        self.order = "<"
        if version & 0xFFFF == 0:  # a file written big-endian
            self.order = ">"
            version = int.from_bytes(version.to_bytes(4, "little"), "big")
        if version not in VERSIONS:
            raise ValueError(f"{path}: GGUF version {version}; only versions "
                             f"{', '.join(map(str, VERSIONS))} are read")
        T = GGUFValueType
        self.scalars: dict[int, str] = {
            T.UINT8: "B", T.INT8: "b", T.UINT16: "H", T.INT16: "h", T.UINT32: "I",
            T.INT32: "i", T.FLOAT32: "f", T.BOOL: "?", T.UINT64: "Q", T.INT64: "q",
            T.FLOAT64: "d"}

    def _fail(self, what: str) -> NoReturn:
        raise ValueError(f"{self.path}: not a readable GGUF header: {what} (at byte {self.at} "
                         f"of {len(self.data)}); the file is damaged or crafted: download it "
                         f"again")

    def _take(self, n: int) -> int:
        left = len(self.data) - self.at
        if n > left:
            self._fail(f"{n} bytes claimed, {left} left")
        start = self.at
        self.at += n
        return start

    def _u(self, fmt: str):
        return struct.unpack_from(fmt, self.data, self._take(struct.calcsize(fmt)))[0]

    def _walk(self, count: int, each: int, what: str) -> None:
        """Admit `count` items of at least `each` bytes that are walked one by one: no more than
        the bytes left hold, nor than MAX_WALKED over the whole header."""
        if count > (len(self.data) - self.at) // each:
            self._fail(f"an array claims {count} {what}, more than the file holds")
        self.walked[what] += count
        if self.walked[what] > MAX_WALKED[what]:
            self._fail(f"arrays of more than {MAX_WALKED[what]} {what} in all")

    def metadata(self) -> dict:
        """The scalar and string values of the key/value section (arrays skipped), by key."""
        self._take(8)  # the tensor count: the tensor infos after this section are not read
        count = self._u(self.order + "Q")
        if count > (len(self.data) - self.at) // 13:  # a key length, a type, a value byte
            self._fail(f"{count} metadata entries claimed, more than the file holds")
        values = {}
        for _ in range(count):
            size = self._u(self.order + "Q")
            if size > MAX_KEY:
                self._fail(f"a key of {size} bytes")
            key = bytes(self.data[self._take(size):self.at]).decode("utf-8", "replace")
            values[key] = self._value(self._u(self.order + "I"), 0)
        return values

    def _value(self, kind: int, depth: int):
        T = self.T
        if kind in self.scalars:
            return self._u(self.order + self.scalars[kind])
        if kind == T.STRING:
            size = self._u(self.order + "Q")
            raw = bytes(self.data[self._take(size):self.at])
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
        if kind != T.ARRAY:
            self._fail(f"unknown value type {kind}")
        if depth >= MAX_DEPTH:
            self._fail(f"arrays nested more than {MAX_DEPTH} deep")
        item = self._u(self.order + "I")
        count = self._u(self.order + "Q")
        if item in self.scalars:
            self._take(count * struct.calcsize(self.scalars[item]))
        elif item == T.STRING:
            self._walk(count, 8, "strings")
            length = struct.Struct(self.order + "Q").unpack_from
            data, at, end = self.data, self.at, len(self.data)
            for _ in range(count):
                if at + 8 > end:
                    self._fail("a string of this array runs past the end")
                at += 8 + length(data, at)[0]
            if at > end:
                self._fail("a string of this array runs past the end")
            self.at = at
        elif item == T.ARRAY:
            self._walk(count, 12, "arrays")
            for _ in range(count):
                self._value(T.ARRAY, depth + 1)
        else:
            self._fail(f"an array of unknown value type {item}")
        return None
