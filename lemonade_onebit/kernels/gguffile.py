"""Reading a GGUF tensor by tensor and writing one atomically, with the metadata carried over.

The source is memory-mapped (`gguf.GGUFReader`), so only the tensor in hand is in memory. The
output is written under a temporary name beside the final one and renamed when complete: an
interrupted or failed run never leaves a file with the final name, and removes its own.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# What this package records in every file it writes (general.file_type is set too).
TRANSFORM_KEY = "onebit.transform"
ROTATION_KEY = "onebit.rotation"
SEED_KEY = "onebit.rotation_seed"
SOURCE_KEY = "onebit.source_sha256"
# Keys never copied from the source: the writer sets them, or they describe the source only.
NOT_COPIED = ("GGUF.", "general.architecture", "general.file_type", "general.alignment",
              "onebit.")


@dataclass(frozen=True)
class SourceTensor:
    name: str
    shape: tuple[int, ...]  # numpy order: rows first
    qtype: Any  # gguf.GGMLQuantizationType
    data: np.ndarray  # the memory-mapped bytes or values

    @property
    def float(self) -> bool:
        from gguf.constants import GGMLQuantizationType as T

        return self.qtype in (T.F32, T.F16, T.BF16)

    def values(self) -> np.ndarray:
        """The values, numpy shape: F32 and F16 as stored (views of the file), every other type
        dequantised to float32. Both convert to float64 exactly."""
        from gguf.constants import GGMLQuantizationType as T
        from gguf.quants import dequantize

        if self.qtype in (T.F32, T.F16):
            return np.asarray(self.data).reshape(self.shape)
        return dequantize(self.data, self.qtype).reshape(self.shape).astype(np.float32, copy=False)


class Source:
    """A GGUF file opened for conversion: its metadata fields and tensors."""

    def __init__(self, path: Path) -> None:
        from gguf import GGUFReader

        self.path = path
        try:
            self.reader = GGUFReader(path)
        except (ValueError, OSError, EOFError, IndexError) as exc:
            raise ValueError(f"{path}: not a readable GGUF file ({exc})") from None
        arch = self.field("general.architecture")
        if not isinstance(arch, str):
            raise ValueError(f"{path}: no general.architecture")
        self.arch = arch
        self.tensors = {t.name: SourceTensor(t.name, tuple(int(d) for d in reversed(t.shape)),
                                             t.tensor_type, t.data)
                        for t in self.reader.tensors}

    def field(self, key: str) -> Any:
        f = self.reader.fields.get(key)
        return None if f is None else f.contents()

    def number(self, key: str) -> int | None:
        value = self.field(f"{self.arch}.{key}")
        return value if isinstance(value, int) and value > 0 else None

    def copy_metadata(self, writer) -> None:
        """Every key/value of the source, with its exact types, but those in NOT_COPIED."""
        from gguf.constants import GGUFValueType as V

        alignment = self.field("general.alignment")
        if isinstance(alignment, int):
            writer.add_custom_alignment(alignment)
        for key, f in self.reader.fields.items():
            if key.startswith(NOT_COPIED):
                continue
            kind = f.types[0]
            if kind == V.ARRAY:
                sub = f.types[-1]
                if len(f.types) > 2:
                    raise ValueError(f"{self.path}: {key} is an array of arrays, which this "
                                     "tool does not copy")
                if sub == V.STRING:
                    items: list = [bytes(f.parts[i]) for i in f.data]
                else:
                    items = [f.parts[i].tolist()[0] for i in f.data]
                if items:
                    writer.add_key_value(key, items, V.ARRAY, sub_type=sub)
            elif kind == V.STRING:
                writer.add_key_value(key, bytes(f.parts[-1]), V.STRING)
            else:
                writer.add_key_value(key, f.parts[-1].tolist()[0], kind)


def sha256(path: Path, progress=None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            h.update(chunk)
            if progress is not None:
                progress.update(len(chunk))
    return h.hexdigest()


def temporary(final: Path, what: str) -> Path:
    """A name beside `final` that no other run uses and that no reader takes for the result."""
    return final.with_name(f".{final.name}.{what}-{os.getpid()}.tmp")


@contextmanager
def atomic(final: Path, what: str = "partial") -> Iterator[Path]:
    """Yields the temporary path to write; renames it to `final` when the block ends without an
    exception, removes it otherwise."""
    tmp = temporary(final, what)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def scratch(final: Path, what: str) -> Iterator[Path]:
    """A temporary path beside `final` for an intermediate file, removed when the block ends."""
    tmp = temporary(final, what)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class OutTensor:
    """A tensor of the output: its name, numpy shape and type, and how to make its data."""

    name: str
    shape: tuple[int, ...]
    qtype: Any  # gguf.GGMLQuantizationType
    make: Any  # () -> np.ndarray: float32/float16 values, or the quantised bytes

    def nbytes(self) -> int:
        from gguf.constants import GGML_QUANT_SIZES

        block, size = GGML_QUANT_SIZES[self.qtype]
        return int(np.prod(self.shape)) // block * size


def write(path: Path, source: Source, tensors: list[OutTensor], extra: dict[str, Any],
          file_type: int, progress=None) -> None:
    """The output GGUF: the source's metadata, `extra` (str or int values), then every tensor,
    made and written one at a time."""
    import gguf
    from gguf.constants import GGMLQuantizationType as T

    writer = gguf.GGUFWriter(str(path), source.arch)
    source.copy_metadata(writer)
    writer.add_file_type(file_type)
    for key, value in extra.items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint64(key, int(value))
    for t in tensors:
        if t.qtype in (T.F32, T.F16):
            dtype = np.dtype(np.float32 if t.qtype == T.F32 else np.float16)
            writer.add_tensor_info(t.name, t.shape, dtype, t.nbytes())
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(t.shape, t.qtype)
            writer.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), t.nbytes(),
                                   raw_dtype=t.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in tensors:
        data = t.make()
        if data.nbytes != t.nbytes():
            raise AssertionError(f"{t.name}: made {data.nbytes} bytes, expected {t.nbytes()}")
        writer.write_tensor_data(data)
        if progress is not None:
            progress.update(t.nbytes())
    writer.close()
